"""`bench fit`'s worker: one process that measures one model's memory per device as rank 0
of fake worlds of n (bench.engine.launchers.FakeWorld), probe after probe.

For each (precision, strategy) in the plan, device counts in increasing order, it searches the
largest batch that fits (bench.fit.search), and reports every probe on the events channel
(bench.core.protocol: a `start` before the probe, a `probe` after it), so that the parent
knows which probe a worker that died or hung was in. A probe builds the strategy's step
afresh from a copy of the model (built once, on the CPU) and its rows (on a GPU, made once for
the largest batch so far: HeldRows), runs `warmup` steps, then `steps`
steps whose peak memory is the probe's:

- on a GPU, the allocator's peak allocated and reserved memory after the warm-up, as
  `bench run` reads it; a budget below the device's memory caps the process
  (torch.cuda.set_per_process_memory_fraction), so that out of memory is the allocator's own;
- on the CPU, the tensor memory PyTorch's MemTracker follows (every tensor an operation
  creates, on any thread the autograd engine uses for the CPU); a probe whose peak passes the
  budget is out of memory.

After out of memory the probe's objects are dropped and the allocator's cache emptied, and
the next probe starts clean; where memory stays behind even after cycles, cuBLAS's workspaces
and the cache are released (`recovered`), and after any other failure (a CUDA error can poison
the process), the worker leaves and the parent starts another for what is left.

Usage (by `bench fit`, never by hand): python -m bench.fit.worker SPEC.json
"""
from __future__ import annotations

if __name__ == "__main__":
    from bench.run import procs as _procs

    _procs.die_with_parent()  # before torch: a fit killed while this starts takes it along

import copy
import dataclasses
import gc
import json
import sys
import time

from bench.core.launch_spec import LaunchSpec
from bench.core.step import CaseSpec
from bench.fit.spec import FitWorkerSpec

MIB = 2**20


def state_bytes(step) -> dict:
    """Bytes this rank holds of the training state after a step: its parameters (a sharded
    parameter's local shard), its optimiser's state, and the gradients the optimiser last
    stepped with (counted in its step's pre-hook: the step clears them)."""
    import torch

    def local(t):
        return t.to_local() if hasattr(t, "to_local") else t

    def nbytes(tensors):
        return sum(local(t).numel() * local(t).element_size() for t in tensors if isinstance(t, torch.Tensor))

    optimizer = step.optimizer
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps its rank's in .optim
    return {"parameter_bytes": nbytes(step.model.parameters()),
            "gradient_bytes": getattr(optimizer, "_parabench_gradient_bytes", None),
            "optimizer_state_bytes": nbytes(v for state in inner.state.values() for v in state.values())}


def count_gradients(step) -> None:
    """Before each optimiser step, the bytes of the gradients it steps with (local shards)."""
    import torch

    def before_step(optimizer, args, kwargs):
        grads = [p.grad for p in step.model.parameters() if p.grad is not None]
        local = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
        optimizer._parabench_gradient_bytes = sum(g.numel() * g.element_size() for g in local
                                                  if isinstance(g, torch.Tensor))

    step.optimizer.register_step_pre_hook(before_step)


class HeldRows:
    """A GPU worker's rows of the model's fixed synthetic batch, made for a batch and kept while the
    batches asked lie between half of it and it: a smaller batch takes their first rows, which equal
    its own (any slice equals that slice of a larger batch: bench/workloads/data.py), and placing
    copies them to the GPU.
    Near the limit the search probes batches a few percent apart, and each made its rows afresh on
    the CPU: for resnet18 at 11,000 images of 224 px, 172 blocks of random images, seconds per
    probe. On the CPU a probe's tracker counts the tensors it is given: there each probe makes its
    own (a CPU batch is small)."""

    def __init__(self):
        self.key, self.inputs, self.targets = None, None, None

    def __call__(self, job, case: CaseSpec):
        if not case.gpus:
            return job.data(case)
        start, stop = job.launcher.rows(job.rank, job.world_size, case.global_batch)
        key = (case.model, case.seed, start)
        # Made again where a batch asks more, or under half of what is held: a probe far past the
        # limit (the line's first guess) must not keep gigabytes of host memory for the rest.
        if self.key != key or not stop - start <= len(self.inputs) <= 2 * (stop - start):
            self.key = self.inputs = self.targets = None  # the old rows go before the new are made
            self.inputs, self.targets = job.data(case)
            self.key = key
        return self.inputs[:stop - start], self.targets[:stop - start]


def build(job, case: CaseSpec, template, rows=None):
    """The case's step on a copy of `template`, and its one-step callable (bench.run.worker's
    build_step, with the model copied instead of built: a large model is built once); `rows`
    (HeldRows) gives its batch where the worker keeps one."""
    import strategies
    from bench.run.worker import make_context

    ctx = make_context(case, job.rank, job.world_size, job.local_rank)
    inputs, targets = rows(job, case) if rows else job.data(case)
    step = strategies.get(case.strategy).build(copy.deepcopy(template), ctx)
    count_gradients(step)
    placed = step.place(inputs, targets)
    return step, lambda: step.run(placed)


def held_mib(snapshot: dict) -> float:
    """MiB of the tensors a MemTracker snapshot holds in memory: every device's but the meta
    device's, which holds none (bench.run.worker's Job.data counts the activations autograd
    keeps there, once per process: counted, they made the first probe of a worker 106 MiB
    larger than the same batch later, and the search's verdict depend on what ran first)."""
    return sum(s.get("Total", 0) for device, s in snapshot.items() if str(device) != "meta") / MIB


def budget_tracker(budget_mib: float | None):
    """PyTorch's MemTracker that raises MemoryError, as an allocator would, once the tensors it
    follows pass `budget_mib`: the step stops where it runs out, not after it."""
    from torch.distributed._tools.mem_tracker import MemTracker

    class BudgetTracker(MemTracker):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = super().__torch_dispatch__(func, types, args, kwargs)
            if budget_mib is not None and out is not NotImplemented:
                held = held_mib(self.get_tracker_snapshot("current"))
                if held > budget_mib:
                    raise MemoryError(f"out of memory: {held:.1f} MiB of tensors, "
                                      f"over the budget of {budget_mib:g} MiB")
            return out

    return BudgetTracker()


class Memory:
    """The peak memory of a stretch of steps on the probe's device."""

    def __init__(self, device: str, budget_mib: float | None):
        self.cuda = device == "cuda"
        self.budget_mib = budget_mib
        self._tracker = None

    def start(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.reset_peak_memory_stats()
            self._retries = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        else:
            self._tracker = budget_tracker(self.budget_mib)
            self._tracker.__enter__()

    def restart(self) -> None:
        """The peak from here on (after the warm-up): what is held stays counted."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            self._tracker.__exit__(None, None, None)
            self._tracker.__enter__()  # entering again takes the current memory as the peak

    def step(self, run) -> None:
        """One training step. The tracker keeps per-module figures for one pass of each module:
        they are cleared before each step (the device-wide peak is what counts here)."""
        if self._tracker is not None:
            self._tracker.reset_mod_stats()
        run()

    def peak(self) -> tuple[float, float]:
        """(peak allocated, peak reserved) MiB; on the CPU both are the tracked tensors'."""
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() / MIB, torch.cuda.max_memory_reserved() / MIB
        total = held_mib(self._tracker.get_tracker_snapshot("peak"))
        return total, total

    def largest_block(self) -> float | None:
        """MiB of the largest segment the caching allocator holds (0 on the CPU): every request it
        could not serve from its cache became a segment of its size, so no request of the step was
        larger. A real run whose free memory lies in pieces needs such a block afresh (`judged`).
        None where the allocator freed its cache to retry a request during the probe: the segments
        it held then are gone, and the largest may be among them (gpt2-1.5b's fsdp2 probe at 38
        sequences held 3734 MiB where its step asked 7467). With expandable segments the allocator
        grows one segment in place: 0."""
        import os

        import torch

        configured = ",".join(os.environ.get(name, "") for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"))
        if not self.cuda or "expandable_segments:true" in configured.lower().replace(" ", ""):
            return 0.0
        try:
            if torch.cuda.memory_stats().get("num_alloc_retries", 0) > self._retries:
                return None
            return max((s["total_size"] for s in torch.cuda.memory_snapshot()), default=0) / MIB
        except RuntimeError:  # a CUDA error the probe raised: its outcome is `error`, and the worker leaves
            return 0.0

    def stop(self) -> None:
        if self._tracker is not None:
            self._tracker.__exit__(None, None, None)
            self._tracker = None


def probe(job, case: CaseSpec, template, memory: Memory, rows: HeldRows | None = None) -> dict:
    """One batch size: its status and peak memory, state bytes where it fit."""
    import torch

    from bench.run.worker import is_oom

    started = time.perf_counter()
    memory.start()
    try:
        step, run = build(job, case, template, rows)
        for _ in range(case.warmup):
            memory.step(run)
        if not getattr(step.optimizer, "optim", step.optimizer).state:  # ZeroRedundancyOptimizer: its rank's own
            raise RuntimeError("the optimiser took no step in the warm-up (a loss scaler skipping steps?): its "
                               "state, part of the peak, would be missing")
        memory.restart()
        for _ in range(case.steps):
            memory.step(run)
        allocated, reserved = memory.peak()
        result = {"status": "ok", "reason": "", **state_bytes(step)}
    except Exception as exc:  # noqa: BLE001 - every failure is the probe's outcome
        allocated, reserved = memory.peak()
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        result = {"status": "oom" if is_oom(exc) else "error", "reason": f"{type(exc).__name__}: {first}"[:400]}
    finally:
        block = memory.largest_block()  # before the cache is emptied
        memory.stop()
    step = run = None  # noqa: F841 - drop the probe's model, optimiser and activations
    gc.collect()
    if memory.cuda:
        torch.cuda.empty_cache()
    return {**result, "peak_alloc_mib": round(allocated, 2), "peak_reserved_mib": round(reserved, 2),
            "largest_block_mib": None if block is None else round(block, 2),
            "probe_s": round(time.perf_counter() - started, 2)}


def left_behind_mib(before: int) -> float:
    """Device memory a probe left allocated (0 on the CPU): a probe that ran out of memory in a
    strategy's hooks can leave a reference cycle or a cache behind, which the next probe's
    peak would count."""
    import torch

    return max(0, torch.cuda.memory_allocated() - before) / MIB if torch.cuda.is_available() else 0.0


def release() -> None:
    """Give back what a probe left to the garbage collector and the caches: reference cycles
    (an out-of-memory error's traceback holds the frames of the step that raised it), cuBLAS's
    workspaces (allocated through PyTorch's allocator, kept per stream), the allocator's cache."""
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear is not None:
            clear()
        torch.cuda.empty_cache()


def recovered(before: int) -> bool:
    """Whether the device holds no more than before the probe (within 1 MiB), once released: the
    worker goes on after an out-of-memory where the allocator recovers, and leaves (a fresh one
    starts clean, 15-25 s on an H100) only where memory stays behind."""
    if left_behind_mib(before) <= 1:
        return True
    release()
    return left_behind_mib(before) <= 1


def held_back(memory: Memory, spec: FitWorkerSpec, n: int, limit: float) -> float:
    """A real world of n >= 2 holds memory outside PyTorch's allocator that a fake world does
    not: the communicator's buffers (NCCL's: about 1000 MiB per GPU on 2 H100s, NCCL 2.28,
    bench/fit/comm_memory.py). `reserve_mib` of the limit is held back from the probes there.
    Returns what a probe at n may use."""
    import torch

    reserve = (spec.reserve_mib or 0.0) if n >= 2 else 0.0
    if memory.cuda:
        # Set at every n (the next strategy starts again at n = 1): no cap without a budget or reserve.
        total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory / MIB
        capped = spec.budget_mib is not None or reserve
        torch.cuda.set_per_process_memory_fraction(min(1.0, (limit - reserve) / total) if capped else 1.0)
    else:
        memory.budget_mib = limit - reserve
    return limit - reserve


def headroom_mib(spec: FitWorkerSpec, usable: float) -> float:
    """What a probe that fit must leave free, beyond the larger of its peak allocated and reserved
    (`judged`), to count as fitting: a real run's caching allocator fragments differently from the
    probe's (other steps, NCCL's streams), and near the limit that decides. On 2 H200s vit-large's
    real runs held 1.9-2.6 GiB reserved beyond their peak, the probes 0.2-2.7 GiB: a real ddp run
    failed at the batch whose probe fit with 2.1 GiB to spare (results/reference/h200x2/fit-check
    at commit de3f349). `bench fit` asks none on the CPU by
    default, where the budget counts tensors; one given there applies as on a GPU."""
    return (spec.headroom or 0.0) * usable


def judged(result: dict, usable: float, headroom: float) -> dict:
    """A probe that fit with less than `headroom` MiB of `usable` to spare, beyond its largest block,
    is `tight`: it ran, and a real run may still not fit there. What it spares is counted from the
    larger of its peak allocated and its peak reserved: the device holds what the allocator
    reserved, fragments included. On 2 H200s gpt2-1.5b's ddp probe at 34 sequences reserved
    141,558 of 141,629 MiB (peak allocated 136,118), and the real run failed reserving exactly that
    (results/reference/h200x2/fit-gpt2-1.5b). The largest block is held back too: a real run's
    free memory can lie in pieces none of which takes the step's largest request, which then needs
    a block of its own. Every real gpt2-1.5b run that ran out of memory there asked for exactly that
    block (the logits' gradient in fp32, 6.53-7.29 GiB) with 5.3-8.3 GiB reserved but unallocated
    (tests/test_fit.py replays those probes and runs)."""
    held = max(result.get("peak_alloc_mib") or 0.0, result.get("peak_reserved_mib") or 0.0)
    spare = usable - held
    if result["status"] != "ok":
        return result
    if "largest_block_mib" in result and result["largest_block_mib"] is None:
        return {**result, "status": "tight",
                "reason": f"fit with {spare:.0f} MiB to spare, but the allocator freed its cache to retry a request: "
                          "its largest block is unknown, and a real run may not fit"}
    block = result.get("largest_block_mib") or 0.0
    if spare >= headroom + block:
        return result
    beyond = f" and its largest block, {block:.0f} MiB, which a real run may need afresh" if block else ""
    return {**result, "status": "tight",
            "reason": f"fit with {spare:.0f} MiB to spare, under the {headroom + block:.0f} MiB it must leave free: "
                      f"{headroom:.0f} for the allocator's fragmentation{beyond}; a real run may not fit"}


def main(spec_path: str) -> None:
    import torch
    import torch.distributed as dist

    from bench.core import protocol
    from bench.fit import search
    from bench.engine.launchers import FAKE_WORLD
    from bench.run.worker import Job, configure_backends
    from bench.workloads import get_workload

    spec = FitWorkerSpec.from_json(json.loads(open(spec_path).read()))  # typed from here on
    gpus = spec.gpus
    if gpus:
        torch.cuda.set_device(gpus[0])
        total = torch.cuda.get_device_properties(gpus[0]).total_memory / MIB
        if spec.budget_mib is not None:
            torch.cuda.set_per_process_memory_fraction(min(1.0, spec.budget_mib / total))
        limit = spec.budget_mib or torch.cuda.mem_get_info()[0] / MIB
    else:
        limit = spec.budget_mib
    protocol.emit("ready", limit_mib=limit)
    template = get_workload(spec.model).build(seed=spec.seed)
    memory = Memory("cuda" if gpus else "cpu", spec.budget_mib)
    world, rows = None, HeldRows()
    first_count: dict[str, list[dict]] = {}  # precision -> its first strategy's probes at the first count
    for item in spec.plan:  # one (precision, strategy): its device counts in increasing order
        how = search.Search(limit_mib=limit, **item.search)
        for i, n in enumerate(item.devices):
            probes = list(item.done.get(str(n), []))
            if i == 0:
                how = search.start_after(how, first_count.get(item.precision) or list(item.after))
            case = item.cases[str(n)]
            if search.next_batch(probes, how) is not None and world != n:
                if dist.is_initialized():
                    dist.destroy_process_group()
                job = Job(LaunchSpec.local(FAKE_WORLD.name, gpus, n), 0, n, 0, launcher=FAKE_WORLD)
                job.launcher.init(job.spec, 0, n, 0)
                world = n
            configure_backends(case)
            usable = held_back(memory, spec, n, limit)
            headroom = headroom_mib(spec, usable)
            how = dataclasses.replace(how, limit_mib=usable - headroom)  # the line aims at what is promised
            while (batch := search.next_batch(probes, how)) is not None:
                sized = dataclasses.replace(case, batch_per_gpu=batch, global_batch=batch * n)
                protocol.emit("start", precision=case.precision, strategy=case.strategy, devices=n, batch=batch)
                before = torch.cuda.memory_allocated() if gpus else 0
                result = {"batch": batch, **judged(probe(job, sized, template, memory, rows), usable, headroom)}
                probes.append(result)
                protocol.emit("probe", precision=case.precision, strategy=case.strategy, devices=n, **result)
                if result["status"] == "error":
                    sys.exit(1)  # the parent goes on in a fresh process
                if not recovered(before):
                    sys.exit(0)  # so does it where a probe left memory behind: the next starts clean
            if i == 0 and search.bracket(probes)[0]:
                first_count.setdefault(item.precision, probes)
            how = how.at_next_count(probes)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
