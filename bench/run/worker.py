"""A worker: one long-lived process (or one per rank) that runs a list of cases sharing a
launcher and a device set, and reports one result event per case on the events channel.

Between cases it resets what a case may leave behind: peak-memory statistics, the
allocator cache, seeds, cuDNN/TF32 settings, torch.compile's caches; the profiler that
counted a case detaches from the GPU as it stops (bench/measure/counters.py). After any failure it
leaves, and the sweep starts a fresh worker for the cases left, so faults stay isolated.

Usage (by the sweep, never by hand): python -m bench.run.worker SPEC.json
"""
from __future__ import annotations

if __name__ in ("__main__", "__mp_main__"):  # a worker process (a spawned rank: __mp_main__)
    # First of all, before torch (seconds to import): a sweep killed while this process
    # starts takes it along; torchrun's and spawn's ranks have no other tie to the sweep.
    from bench.run import procs as _procs

    _procs.die_with_parent()

import functools
import gc
import json
import os
import sys
import time
import traceback

import torch

import strategies
from bench.measure import anatomy, capture, counters, envinfo
from bench.engine import launchers, training
from bench.run import affinity, procs, worker_row
from bench.core import protocol
from bench.workloads import get_workload
from bench.core.precision import get_precision, release_apex
from bench.cases import ranking
from bench.core.stats import summarize
from bench.measure.throttle import ClockLimits
from bench.measure.timing import StepClock, peak_memory_mib, reset_peak_memory
from bench.core.launch_spec import LaunchSpec
from bench.core.step import FIRST_LOOK, RACED_OUT, SETTLED, CaseSpec, WorkerContext


def configure_backends(case: CaseSpec) -> None:
    knobs = case
    torch.backends.cudnn.benchmark = bool(knobs.cudnn_benchmark)
    torch.backends.cudnn.deterministic = False
    if knobs.tf32 == "default":
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # PyTorch's defaults
    else:
        allow = knobs.tf32 == "on"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow


def is_oom(exc: BaseException) -> bool:
    """Device or host out of memory; cuBLAS's own failure to allocate its workspace too (on an
    H100, FSDP2's fake world of 64 at the edge of memory failed in cublasCreate that way)."""
    text = str(exc).lower()
    return (isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text
            or "can't allocate memory" in text or "cannot allocate memory" in text
            or "cublas_status_alloc_failed" in text)


def make_context(case: CaseSpec, rank: int = 0, world_size: int = 1, local_rank: int = 0) -> WorkerContext:
    return WorkerContext(case, case.placement, get_precision(case.precision), case.options, rank, world_size,
                         local_rank,
                         criterion=get_workload(case.model).criterion())


class Job:
    """This process's place in the worker: its rank and the launcher that connects the ranks."""

    def __init__(self, spec: LaunchSpec, rank: int, world_size: int, local_rank: int, launcher=None):
        self.spec = spec
        self.launcher = launcher or launchers.by_name(spec.launcher)
        self.rank, self.world_size, self.local_rank = rank, world_size, local_rank
        self.cpus: list[int] = []
        self.best_seen: dict = {}  # group -> the leader this worker measured there: items/s and interval

    def bind_cpus(self, case: CaseSpec) -> None:
        """This process's CPUs for the case (the cpu_bind knob, bench/run/affinity.py)."""
        placement = case.placement
        self.cpus = affinity.bind(case.cpu_bind, self.local_rank, self.launcher.processes_per_host(placement),
                                  case.gpus)

    @property
    def reporting(self) -> bool:
        """The process that reports: local rank 0 of node 0 (the node whose parent writes the
        rows). torchrun's c10d rendezvous may give global rank 0 to any node."""
        return self.local_rank == 0 and self.node == 0

    @property
    def node(self) -> int:
        return int(os.environ.get(protocol.NODE_RANK_ENV, "0"))

    def whereabouts(self) -> dict:
        """This process's node, host and device model, for the row's hosts and GPU names."""
        import socket

        gpu = torch.cuda.get_device_name() if self.spec.gpus and torch.cuda.is_available() else "CPU"
        return {"node": self.node, "host": socket.gethostname(), "gpu": gpu, "cpus": affinity.cpu_ranges(self.cpus)}

    def data(self, case: CaseSpec):
        """This process's rows of the case's global batch, built here and nowhere else; a
        batch the host cannot hold is this case's out-of-memory, found before allocating.
        On the CPU the step's activations live in host memory too, for every rank on the
        host: their least size (what autograd saves, counted on the meta device) is counted
        against the memory available here, within the cgroup's limit."""
        from bench.run import limits
        from bench.workloads.facts import saved_bytes_per_sample

        workload = get_workload(case.model)
        start, stop = self.launcher.rows(self.rank, self.world_size, case.global_batch)
        rows, what = stop - start, "inputs"
        needed = rows * workload.data.bytes_per_sample()
        if not case.gpus and case.precision == "fp32":  # fp32: what the meta device counts
            ranks = self.launcher.processes_per_host(case.placement)
            activations = saved_bytes_per_sample(case.model)
            if activations:
                needed = ranks * (needed + rows * activations)
                what = f"inputs and the activations autograd keeps, {ranks} rank{'s' if ranks > 1 else ''}"
        available = limits.available_memory()
        if needed > available:
            raise MemoryError(f"host out of memory: the batch needs at least {needed / 2**30:.1f} GiB ({what}), "
                              f"{available / 2**30:.1f} GiB available")
        return workload.synthetic_rows(start, stop, case.seed)


def build_step(job: Job, case: CaseSpec, dtype: torch.dtype | None = None, restore: bool = False):
    """The case's training step and the callable that runs one step of it; `dtype` holds the
    model and its floating inputs in another dtype, and `restore` puts a captured step back to
    the state before its warm-up, so that its replays are the first training steps (both for
    the parity check's worker, bench/checks/parity_worker.py)."""
    ctx = make_context(case, job.rank, job.world_size, job.local_rank)
    strategy = strategies.get(case.strategy)
    inputs, targets = job.data(case)
    workload = get_workload(case.model)
    torch.manual_seed(case.seed)
    model = workload.build(seed=case.seed)
    if dtype is not None:
        # The same weights and data, held in another dtype (bench/checks/parity.py: float64).
        model, inputs = model.to(dtype), inputs.to(dtype) if inputs.is_floating_point() else inputs
    step = strategy.build(model, ctx)
    if ctx.data == "host":
        # Every step starts from a pinned host batch: the copy is part of the step.
        if step.devices[0].type == "cuda":
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        return step, lambda: step.run(step.place(inputs, targets))
    placed = step.place(inputs, targets)
    if case.execution == "cuda-graph":
        replay = training.capture_whole_step(step, placed, restore=restore)
        return step, lambda: replay(placed)
    return step, lambda: step.run(placed)


def measure_case(job: Job, case: CaseSpec) -> dict | None:
    """The case's row figures (bench/run/worker_row.py assembles them from every rank's), or None
    on a rank that does not report."""
    per_rank = job.launcher.gather(time_case(job, case))
    figures = worker_row.throughput(case, per_rank)
    # Every rank keeps the leader of its group, so that every rank races the next case alike; a
    # case stopped after its short trial leads nothing (its interval is of a few steps).
    if not figures["screened"] and figures["items_per_s"] > job.best_seen.get(case.group, {}).get("items_per_s", 0.0):
        lo, hi = ranking.interval(figures)
        job.best_seen[case.group] = {"items_per_s": figures["items_per_s"], "lo": lo, "hi": hi}
    return worker_row.assemble(case, per_rank, figures) if job.reporting else None


def time_case(job: Job, case: CaseSpec) -> dict:
    """This rank's part of the case: its step times per trial, wall times, peak memory, counted
    work, step anatomy, clock limits and the seconds of each phase."""
    phases, mark = {}, time.perf_counter()

    def phase(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        phases[name], mark = now - mark, now

    graphs, cached = training.compiled_graphs(), training.compile_cache_counts()
    step, run = build_step(job, case)
    clock = StepClock(step.devices)
    clock.synchronize()
    phase("build_s")
    warmup = warm_up(job, case, run, clock)
    clock.synchronize()
    phase("warmup_s")
    # Where the compiled graphs came from (inductor's cache persists across runs: a cold one costs
    # the warm-up minutes): those compiled in the build and warm-up; a recompile in the timed trials
    # is in no row's counts.
    compile_cache = (training.compile_cache_columns(*(now - before for now, before in
                                                      zip(training.compile_cache_counts(), cached)),
                                                    traced=training.compiled_graphs() - graphs)
                     if case.execution == "compile" else {})
    # Every execution alike: the peak from here on, graph pools added (timing.peak_memory_mib).
    reset_peak_memory(step.devices)
    job.launcher.barrier()

    step_ms, trial_wall, screened, steps = [], [], "", case.steps
    # As timeit does: a garbage collection landing in a timed trial would stall a step for a pause
    # that is Python's, not the strategy's (compiled steps leave many objects to walk). Collected
    # before, off during the trials, on again after.
    gc.collect()
    limits = ClockLimits(step.devices)
    limits.start()
    gc.disable()
    try:
        if job.spec.race is not None and case.race != "full":
            # The survey's first look: a short trial. Where it stops the case, it is the row;
            # elsewhere the full trials follow and it counts as warm-up.
            times, wall = clock.time_trial(run, job.spec.race.short_steps)
            screened = race(job, case, times, wall, warmup)
            if screened:
                step_ms, trial_wall, steps = [times], [wall], len(times)
        if not screened:
            for _ in range(case.trials):
                times, wall = clock.time_trial(run, case.steps)
                step_ms.append(times)
                trial_wall.append(wall)
    finally:
        gc.enable()
    capped = limits.columns()
    phase("timed_s")
    if case.execution == "compile" and training.compiled_graphs() == graphs:
        # A row saying execution=compile must be a compiled step, whatever the strategy declares.
        raise RuntimeError(f"{case.strategy} declares --execution compile but its step compiled nothing: "
                           "its build() must pass the model through training.maybe_compile")
    memory = peak_memory_mib(step.devices)
    # After the timing (the profiler never touches it), and only for a row the answer may show: a
    # settled case ties the leader at best and may stand as its runner-up; one raced out is far
    # behind and a first look is a row of the survey alone, and their counting would cost as much.
    # With an anatomy to follow, the profiler stays attached: the anatomy lets go after its windows
    # (bench/measure/capture.py), with no teardown and attaching again between the two.
    counted = not screened or screened.startswith(SETTLED)
    work = counters.count_step(run, step.devices, detach=case.anatomy is None) if counted else None
    clock.synchronize()
    phase("counters_s")
    anatomy_started = time.perf_counter()
    breakdown = profile_anatomy(job, case, run, step.devices) if case.anatomy else None
    return {"step_ms": step_ms, "wall": trial_wall, "memory": memory, "work": work, "anatomy": breakdown,
            "compile_cache": compile_cache,
            "anatomy_s": time.perf_counter() - anatomy_started, "where": job.whereabouts(), "phases": phases,
            "capped": capped, "screened": screened, "steps": steps}


# The fewest warm-up steps before a racing case's short trial: an eager step is steady once the
# first has chosen cuDNN's kernels and grown the allocator's pool, a compiled reduce-overhead step once
# the third has recorded its graphs.
RACE_MIN_WARMUP = 3
# A racing case's warm-up ends early only where its last three steps lie within this share of
# each other (the slowest rank's): timm:resnet50's ddp on one H200, the first case of its worker,
# still sped up by 7% over a short trial after 5 warm-up steps, and read 4% under its full trials.
STEADY_SPREAD = 0.005


def warmup_steps(job: Job, case: CaseSpec) -> int:
    """The fewest warm-up steps before the case's first timed step. A racing case's short trial is
    warm-up for the full trials that may follow it, so its own warm-up may be shorter by the short
    trial's steps (at least RACE_MIN_WARMUP): a case that runs on has had --warmup steps before its
    first full trial, as every case has, and one that stops after its short trial costs that much
    less (a heavy model's step: timm:resnet50 at 2048 on one H200 took 0.4 s)."""
    if job.spec.race is None or case.race == "full":
        return case.warmup
    return max(case.warmup - job.spec.race.short_steps, min(case.warmup, RACE_MIN_WARMUP))


def warm_up(job: Job, case: CaseSpec, run, clock) -> int:
    """Run the case's warm-up; return its steps. A racing case's shorter warm-up (warmup_steps) is
    timed, and where its last three steps are not steady (STEADY_SPREAD), the rest of --warmup
    follows. Every rank decides on the same figures (the slowest rank's steps): all run alike."""
    least, ran = warmup_steps(job, case), 0
    if least < case.warmup:
        times, _ = clock.time_trial(run, least, lead_in=0)
        ran = least
        last = [max(col) for col in zip(*job.launcher.gather(times))][-3:]
        if len(last) == 3 and min(last) > 0 and (max(last) - min(last)) / min(last) <= STEADY_SPREAD:
            return least
    for _ in range(case.warmup - ran):
        run()
    return case.warmup


# A short trial whose interval is at most this wide (a share of its median) is settled where it
# cannot pass its group's leader by THRESHOLD (bench/cases/ranking.py): a steady GPU-bound step
# (timm:resnet50 on one H200: 60-step intervals of 0.02-0.15%) would read the same over every trial.
SETTLED_WIDTH = ranking.THRESHOLD / 2


def race(job: Job, case: CaseSpec, short_ms: list[float], wall_s: float, warmup: int) -> str:
    """Why the case stops after its short first trial, or "": under a search's survey, where the
    trial's interval lies below its group's leader's beyond both (bench/cases/ranking.py `beats`),
    it cannot lead ("raced out"); where its interval is narrow (SETTLED_WIDTH) and cannot pass the
    leader by what counts as a win, it ties at best ("settled"): more trials would not change the
    answer either way. A case sent to run the short trial alone (the survey's share of the budget
    was spent) stops there too. Every rank decides on the same figures (the slowest rank's steps),
    so all stop together."""
    gathered = job.launcher.gather([short_ms, wall_s])
    steps = [max(col) for col in zip(*[g[0] for g in gathered])]
    data = get_workload(case.model).data
    trial = summarize(steps, [max(g[1] for g in gathered)], len(steps), case.global_batch * data.items_per_sample)
    # Of a few steps of one trial the bootstrap interval is about their range (of 5: 94% coverage).
    read = (f"a short trial of {len(steps)} steps (after {warmup} warm-up steps) read "
            f"{trial['items_per_s']:.0f} {data.unit.rate} "
            f"(interval {trial['items_per_s_ci_lo']:.0f}-{trial['items_per_s_ci_hi']:.0f})")
    if case.race == "short":
        return f"{read}, the survey's share of the budget spent: {FIRST_LOOK}, not {case.trials} trials"
    leaders = [d for d in (job.spec.race.leaders.get(case.group), job.best_seen.get(case.group)) if d]
    if not leaders:
        return ""
    leader = max(leaders, key=lambda d: d["items_per_s"])
    as_row = {"items_per_s": leader["items_per_s"], "items_per_s_ci_lo": leader["lo"],
              "items_per_s_ci_hi": leader["hi"]}
    said = f"the leader at this batch ({leader['items_per_s']:.0f}, {leader['lo']:.0f}-{leader['hi']:.0f})"
    if ranking.beats(as_row, trial):
        return f"{RACED_OUT}: {read}, below {said}"
    lo, hi = ranking.interval(trial)
    if (hi - lo) / trial["items_per_s"] <= SETTLED_WIDTH and hi < leader["items_per_s"] * (1 + ranking.THRESHOLD):
        return (f"{SETTLED}: {read}, which cannot pass {said} by {ranking.THRESHOLD:.0%}: more trials would not "
                "change the answer")
    return ""


def profile_anatomy(job: Job, case: CaseSpec, run, devices) -> list[dict] | str:
    """This rank's step anatomy (bench/measure/anatomy.py), or why it could not be taken."""
    folder = case.anatomy.folder
    try:
        capture.capture(run, devices, case.anatomy.steps, folder, job.rank)
        return anatomy.analyse_rank(folder, job.rank)
    except Exception as exc:  # noqa: BLE001 - the timing stands; the row says why the anatomy is missing
        return f"rank {job.rank}: {type(exc).__name__}: {str(exc).strip()[:300]}"


def reset_between_cases(case: CaseSpec) -> None:
    """Free what the case left behind before the next one: its compiled code, its objects
    (cycles included) and the blocks the allocator keeps cached."""
    if case.execution == "compile":
        torch._dynamo.reset()
    release_apex()  # Apex O1's process-wide patches must not reach the next case
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if not gc.get_freeze_count():
        # What is alive after the first case's collection (torch with the modules its first
        # step imports, ~290 k objects) lives as long as the worker: a full collection
        # skips it from now on, 0.15-0.3 s less per case on the CI machine.
        gc.freeze()


def fail(job: Job, case: CaseSpec, exc: BaseException) -> None:
    """Report the failed case with this rank's traceback, then leave: other ranks may be
    stuck in a collective, and a CUDA error can poison the context."""
    status = "oom" if is_oom(exc) else "error"
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    reason = f"{'rank %d: ' % job.rank if job.world_size > 1 else ''}{type(exc).__name__}: {first_line}"
    protocol.emit("result", key=list(case.key), status=status, reason=reason[:500], rank=job.rank,
                  traceback=traceback.format_exc()[-4000:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(protocol.EXIT_AFTER_OOM if status == "oom" else protocol.EXIT_AFTER_ERROR)


def serve(spec: LaunchSpec, spec_path: str, rank: int, world_size: int, local_rank: int, run_case=None) -> None:
    """Run the spec's cases in this process, each by `run_case(job, case)` (the figures of its
    row, or None on a rank that does not report): `measure_case` unless another is given."""
    run_case = run_case or measure_case
    procs.die_with_parent()  # spawned ranks: die with the worker that spawned them
    job = Job(spec, rank, world_size, local_rank)
    try:
        job.launcher.init(spec, rank, world_size, local_rank)
        job.launcher.barrier()
    except BaseException as exc:  # noqa: BLE001 - the rank's own traceback is the cause
        protocol.emit("worker_error", rank=rank, reason=f"rank {rank}: {type(exc).__name__}: {exc}"[:500],
                      traceback=traceback.format_exc()[-4000:])
        raise
    if job.reporting and os.path.exists(spec_path):
        os.unlink(spec_path)  # every rank has read it: nothing is left behind whatever happens next
    try:
        for case in spec.cases:
            if job.reporting:
                protocol.emit("start", key=list(case.key))
            started = time.perf_counter()
            job.bind_cpus(case)
            configure_backends(case)
            try:
                figures = run_case(job, case)
            except Exception as exc:  # noqa: BLE001 - every failure becomes the case's status
                fail(job, case, exc)
            if job.reporting:
                protocol.emit("result", key=list(case.key), status="ok", reason="",
                              elapsed_s=time.perf_counter() - started, **envinfo.runtime_libraries(),
                              **(figures or {}))
            reset_between_cases(case)
    finally:
        job.launcher.close()


def main(argv: list[str], run_case=None, spec_type: type[LaunchSpec] = LaunchSpec) -> None:
    """Read the launch spec (`spec_type`: the parity check's worker reads its own, with its section)
    and run its cases on its launcher's processes."""
    procs.die_with_parent()
    with open(argv[0]) as fh:
        spec = spec_type.from_json(json.load(fh))  # typed from here on
    launchers.by_name(spec.launcher).run(spec, functools.partial(serve, spec, argv[0], run_case=run_case))


if __name__ == "__main__":
    main(sys.argv[1:])
