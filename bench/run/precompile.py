"""Compiles off the clock: the graphs of compiled cases still to come, compiled in processes of
their own while the GPUs measure other cases, so that each case's worker finds them in inductor's
cache and loads them in its warm-up instead of compiling (resnet18-small's first compiled step on
one H200: 24.4 s on a cold cache, 4.1 s after a side process had compiled it; docs/search.md).

A side process builds the case's step as its worker does (bench/run/worker.py `build_step`), with
torch.compile's backend swapped for one that compiles each graph exactly as inductor does in the
case's mode and stops before any graph runs: no kernel of the model runs (its weights and batch
are placed on the device, nothing is computed). A strategy of several processes is built as each
local rank in a fake world of n (launchers.FakeWorld: rank 0 of n, collectives that do nothing) on
that rank's device, one side process per rank: inductor keys a graph by its inputs' device. A side
process lowers each backward with its forward (training.lower_backward_with_forward), so that the
backward is in the cache too, and so do the search's workers while side compiles run
(protocol.LOWER_BACKWARD_ENV): lowered lazily, the backwards of DDP's split pieces came out with
other cache keys and were compiled afresh.

Side processes run at the lowest priority (nice 19) with few compile threads, a few at a time, on
the last half of the CPUs (whole cores: bench/run/affinity.py `side_cpus`); one that fails costs
nothing but its CPU time (the worker compiles as it would have). Each holds a CUDA
context, the model's weights and a batch on the device of the rank it compiles for, beside the
case being measured there. Before a case is measured the search settles its side compiles: a
queued one is dropped, a running one is waited for (it is ahead of a fresh compile) up to a limit,
then stopped; once the survey is over no side compile runs beside a measurement (`survey_over`).

Usage (by the search, never by hand): python -m bench.run.precompile SPEC.json LOCAL_RANK
"""
from __future__ import annotations

if __name__ == "__main__":
    from bench.run import procs as _procs

    _procs.die_with_parent()

import dataclasses
import json
import os
import sys
import threading
import time

from bench.cases.case import Case

# At most this many side processes at once, each with this many of inductor's compile threads: a
# share of the host's CPUs that leaves the measured workers theirs (a host lending 2 H200s has 32).
CPUS_PER_SIDE = 8
COMPILE_THREADS = "4"
# How long a case waits for its running side compile before its worker compiles it itself.
SETTLE_S = 60.0
# The CPUs a side process may run on, a list ("0-3,8"), set by SideCompiles where it pins them.
CPUS_ENV = "PARABENCH_SIDE_CPUS"


# The line a side process reports its figures on (its output's other lines are PyTorch's warnings).
REPORT = "side compile: "


class Compiled(Exception):
    """Raised where a side process's first compiled graph would run on real tensors: that frame's
    graphs (every piece of DDP's split graph, each with its backward) are compiled by then; a graph
    after a graph break, which the step would reach only by running, is not."""




def compile_only(mode):
    """torch.compile's backend in a side process: inductor's own (the same mode's settings, so the
    same cache keys) with the compiled graph replaced by a stop."""
    import torch

    class CompileOnly(torch._TorchCompileInductorWrapper):  # what torch.compile(mode=...) hands dynamo
        def __call__(self, gm, example_inputs):
            compiled = super().__call__(gm, example_inputs)  # compiled, and written to inductor's caches

            def stop(*args, **kwargs):
                # DDP's graph splitting runs each compiled piece on fake tensors to shape the next
                # piece's inputs: that call computes nothing and goes through; a real one stops.
                if torch._guards.detect_fake_mode(args) is not None:
                    return compiled(*args, **kwargs)
                raise Compiled

            return stop

    return CompileOnly(mode, None, None)


def compile_case(spec, local_rank: int) -> dict:
    """Compile the spec's first case as its worker's process `local_rank` would, without running it."""
    import torch
    import torch.distributed as dist

    from bench.engine import launchers, training
    from bench.run import worker

    case = spec.cases[0]
    launcher = launchers.by_name(spec.launcher)
    if launcher.multi_process:
        from bench.engine.launchers import FAKE_WORLD, fake_store

        if spec.gpus:
            torch.cuda.set_device(spec.gpus[local_rank % len(spec.gpus)])
        dist.init_process_group("fake", store=fake_store(), rank=local_rank, world_size=spec.n_replicas)
        job = worker.Job(spec, local_rank, spec.n_replicas, local_rank, launcher=FAKE_WORLD)
    else:
        job = worker.Job(spec, 0, 1, 0, launcher=launcher)
    worker.configure_backends(case)
    training.lower_backward_with_forward()
    training.side_backend = compile_only
    started = time.perf_counter()
    _, run = worker.build_step(job, case)
    try:
        run()
    except Compiled:
        pass
    else:
        raise RuntimeError("the step ran without reaching a compiled graph: nothing to compile")
    hits, misses, bypassed = training.compile_cache_counts()
    return {"compile_s": round(time.perf_counter() - started, 3), "graphs": training.compiled_graphs(),
            "from_cache": hits, "compiled": misses + bypassed}


@dataclasses.dataclass
class SideCompile:
    """One side process: a case's graphs as one local rank compiles them."""

    case: Case
    local_rank: int
    spec_path: str
    env: dict
    state: str = "queued"  # queued, running, done, failed, dropped, stopped
    worker: object = None  # bench.run.procs.Worker while it runs
    started: float = 0.0
    seconds: float = 0.0
    said: str = ""  # the side process's last line: its figures, or why it failed


class SideCompiles:
    """The side processes of one search: queued in order, a few running at once (a thread of the
    parent starts them as others end), settled before their case is measured, all ended by `close`."""

    def __init__(self, slots: int | None = None, clock=time.monotonic, pinned: bool = True):
        from bench.run.limits import usable_cores

        self.slots = slots or max(1, usable_cores() // CPUS_PER_SIDE)
        # `pinned`: every side process on the whole cores of the last half of the CPUs
        # (affinity.side_cpus), so that a measured worker the kernel places on the first half shares
        # no core with a compile (docs/search.md: whether unpinned ones disturb is not yet resolved).
        self.cpus = _side_cpus() if pinned else None
        self.clock = clock
        self.items: list[SideCompile] = []
        self.survey_over = False  # from then on a measurement waits for every running side compile, not only its own
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._scratch = None
        self._env: dict | None = None

    def submit(self, cases: list[Case]) -> None:
        """Queue each compiled case's side compiles (one per local rank on GPUs), in order; a case
        already queued is not queued again, and one that cannot be prepared is recorded as failed."""
        known = {(i.case.key(), i.case.gpus) for i in self.items}
        for case in cases:
            if case.execution != "compile" or (case.key(), case.gpus) in known:
                continue
            known.add((case.key(), case.gpus))
            try:
                items = self._prepare(case)
            except Exception as exc:  # noqa: BLE001 - an optional speed-up: the worker compiles as it would have
                items = [SideCompile(case, 0, "", {}, state="failed", said=f"{type(exc).__name__}: {exc}"[:500])]
            with self._lock:
                self.items += items
        if self._thread is None and self.items:
            self._thread = threading.Thread(target=self._pump, daemon=True)
            self._thread.start()
        self._wake.set()

    def _prepare(self, case: Case) -> list[SideCompile]:
        from bench.engine.launchers import worker_environment
        from bench.run.procs import Scratch
        from bench.run.workers import inductor_cache_dir, launcher_of, worker_env, worker_spec, write_spec

        if self._scratch is None:
            self._scratch = Scratch()
            # The workers' environment, their cache folder named as theirs is (bench/run/attempt.py).
            self._env = {**worker_env(), "TORCHINDUCTOR_COMPILE_THREADS": COMPILE_THREADS}
            self._env.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir())
        folder = self._scratch.folder("side-")
        spec, failed = worker_spec([case], folder)
        if failed:
            raise failed[0][1]
        spec_path = os.path.join(folder, "spec.json")
        write_spec(spec, spec_path)
        launcher = launcher_of(case)
        env = {**worker_environment(launcher, case.placement, dict(self._env)), "TMPDIR": folder}
        if self.cpus:
            from bench.run.affinity import cpu_ranges

            env[CPUS_ENV] = cpu_ranges(self.cpus)
        # One per local rank on GPUs (each rank's device is in its graphs' keys); on the CPU every
        # rank compiles the same graphs.
        ranks = launcher.processes_per_host(case.placement) if case.gpus else 1
        return [SideCompile(case, rank, spec_path, env) for rank in range(ranks)]

    def _pump(self) -> None:
        while not self._closed:
            with self._lock:
                for item in [i for i in self.items if i.state == "running" and not i.worker.alive()]:
                    self._finish(item)
                running = sum(i.state == "running" for i in self.items)
                for item in [i for i in self.items if i.state == "queued"][:max(0, self.slots - running)]:
                    try:
                        self._start(item)
                    except Exception as exc:  # noqa: BLE001 - this thread owns the side processes: it must live on
                        item.state, item.said = "failed", f"{type(exc).__name__}: {exc}"[:500]
            self._wake.wait(0.2)
            self._wake.clear()

    def _start(self, item: SideCompile) -> None:
        from bench.core import imports
        from bench.run.procs import Worker

        item.worker = Worker([sys.executable, "-m", "bench.run.precompile", item.spec_path, str(item.local_rank)],
                             {**item.env, "PYTHONPATH": imports.pythonpath(item.env)}, str(imports.ROOT))
        item.state, item.started = "running", self.clock()

    def _finish(self, item: SideCompile, state: str | None = None) -> None:
        if state == "stopped":
            item.worker.kill()
        code = item.worker.proc.wait()
        item.worker.drain()  # every line read before the report is looked for
        item.seconds = round(self.clock() - item.started, 3)
        lines = item.worker.output_tail(lines=80, chars=100_000).splitlines()
        reported = [line[len(REPORT):] for line in lines if line.startswith(REPORT)]
        item.said = (reported[-1] if reported else (lines[-1] if lines else ""))[:500]
        item.state = state or ("done" if code == 0 and reported else "failed")
        item.worker = None

    def settle(self, cases: list[Case], limit_s: float = SETTLE_S) -> None:
        """Before `cases` are measured: drop their queued side compiles and wait for their running
        ones (every running one once the survey is over), at most `limit_s` in all and no longer
        than one and a half times the longest that finished; stop what is still running then."""
        wanted = {(c.key(), c.gpus) for c in cases}
        deadline = self.clock() + limit_s
        took = sorted(i.seconds for i in self.items if i.state == "done")
        while True:
            with self._lock:
                mine = [i for i in self.items if self.survey_over or (i.case.key(), i.case.gpus) in wanted]
                for item in mine:
                    if item.state == "queued":
                        item.state = "dropped"
                    elif item.state == "running" and not item.worker.alive():
                        self._finish(item)
                running = [i for i in mine if i.state == "running"]
                if not running:
                    return
                # Past the deadline, or (once side compiles have finished) past one and a half
                # times the longest of them: it is stuck or slower than the worker's own compile.
                late = took and all(self.clock() - i.started > 1.5 * took[-1] for i in running)
                if self.clock() >= deadline or late:
                    for item in running:
                        self._finish(item, "stopped")
                    return
            time.sleep(0.1)

    def close(self) -> None:
        """Stop every side process and remove their folder."""
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        with self._lock:
            for item in self.items:
                if item.state == "running":
                    self._finish(item, "stopped")
                elif item.state == "queued":
                    item.state = "dropped"
        if self._scratch is not None:
            self._scratch.close()
            self._scratch = None

    def summary(self) -> dict:
        """What the side processes did, for the search's log."""
        from bench.run.runner import named

        out = {"processes": len(self.items), "at_once": self.slots}
        if self.cpus:
            from bench.run.affinity import cpu_ranges

            out["cpus"] = cpu_ranges(self.cpus)
        for state in ("done", "failed", "dropped", "stopped"):
            out[state] = sum(i.state == state for i in self.items)
        out["process_wall_s"] = round(sum(i.seconds for i in self.items), 1)  # wall seconds, summed over them
        out["failures"] = [{"case": f"{named(i.case)} at {i.case.batch_per_gpu}/GPU, {i.case.where()}",
                            "rank": i.local_rank, "said": i.said}
                           for i in self.items if i.state == "failed"][:5]
        return out


def _side_cpus() -> list[int] | None:
    from bench.run.affinity import side_cpus

    try:
        return side_cpus(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux: the kernel places them
        return None


def main(argv: list[str]) -> None:
    from bench.core.launch_spec import LaunchSpec

    os.nice(19)  # the measured workers come first
    if os.environ.get(CPUS_ENV) and hasattr(os, "sched_setaffinity"):
        from bench.run.affinity import parse_ranges

        # Before torch: its threads inherit them. Of those still allowed (a job's CPU set may have shrunk).
        cpus = parse_ranges(os.environ[CPUS_ENV]) & os.sched_getaffinity(0)
        if cpus:
            os.sched_setaffinity(0, cpus)
    with open(argv[0]) as fh:
        spec = LaunchSpec.from_json(json.load(fh))
    print(REPORT + json.dumps(compile_case(spec, int(argv[1]))), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
