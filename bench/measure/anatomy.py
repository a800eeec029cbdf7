"""Step anatomy: where a training step's time goes, per device, from torch.profiler traces.

`bench run --anatomy` profiles a short window after a case's timed trials (the timing
never sees the profiler): one warm-up step, then N steps, with the devices synchronised
before and after the window. Every process writes its trace (Chrome/Perfetto JSON,
gzip-compressed) and analyses it; the reporting rank puts the breakdown in the row.

On GPUs the window of each device is split, instant by instant, into exclusive parts,
so that they add up to the profiled step (milliseconds per step):

- compute: a kernel other than communication, copy or optimiser runs on the device
  (forward and backward);
- optimizer: only kernels launched inside the optimiser phase run (the phase is labelled
  `parabench.optimizer` with record_function, and a kernel belongs to it when the host
  call that launched it lies in that range: exact, through the profiler's correlation ids);
- copy: only memcpy/memset run (DataParallel's scatter, gather, replicate and broadcast,
  the hand-written all-reduce's peer copies, host-to-device batches);
- exposed_comm: only communication kernels (NCCL) run: communication nothing hides;
- idle: no kernel at all: the device waits for the host to launch work (a launch- or
  Python-bound step).

`comm` is all communication kernel time, hidden or not (not part of the sum).

Exposed communication is split in two (wait + transfer = exposed_comm), from every rank's
trace together: a collective cannot finish before its last rank enters it, and a rank that
enters early spends the time until then waiting for the slowest rank (its host being
late, say), not moving data. The ranks' clocks are aligned on the collectives' end times,
which coincide on every rank (the median offset over the window's collectives); then, per
collective, each rank's span up to the last rank's entry is `wait`, and the exposed part of
that is `anatomy_wait_ms`; the rest of the exposed time is `anatomy_transfer_ms`. This
needs the same sequence of collectives on every rank (data-parallel steps have it);
otherwise the split is left empty and the note says so. Kernel
classes follow Holistic Trace Analysis (a name with "nccl" is communication, "memcpy"
or "memset" is a copy). A whole-step CUDA graph replays from one host call, so its
optimiser kernels count as compute.

On the CPU (gloo) the same columns describe the host thread that runs the step: compute
is time inside operators, optimizer time inside operators of the optimiser phase, copy
time inside top-level copy operators, exposed_comm time a gloo collective is in flight
(on gloo's threads) while the step's thread runs no operator, and idle everything else
on that thread (Python, framework code, waiting).

The per-device values go in `*_per_device` columns ("rank:device=value;..."); the plain
columns hold the busiest device's (least idle: the one that sets the pace).

The analysis reads the trace files only (no torch): the committed GPU trace fixture is
analysed in CI with the same code.
"""
from __future__ import annotations

import gzip
import json
import os
import re
import stat

from bench.measure.intervals import (clip, length, overlap, partition, partition_spans,  # noqa: F401
                                     subtract, union)

PARTS = ("compute", "optimizer", "copy", "exposed_comm", "idle")
VALUES = ("step",) + PARTS + ("comm",)
SPLIT = ("wait", "transfer")  # exposed_comm = wait + transfer, from all ranks' traces together
COLUMNS = ([f"anatomy_{v}_ms" for v in VALUES + SPLIT] + [f"anatomy_{v}_ms_per_device" for v in VALUES + SPLIT]
           + ["anatomy_device", "anatomy_basis", "anatomy_steps", "anatomy_traces", "anatomy_wall_s",
              "anatomy_vs_timed_pct", "anatomy_note"])
FLOAT_COLUMNS = {f"anatomy_{v}_ms" for v in VALUES + SPLIT} | {"anatomy_wall_s", "anatomy_vs_timed_pct"}
TOLERANCE_PCT = 5.0  # the profiled step against the timed median step (GPUs)

OPTIMIZER_PHASE = "parabench.optimizer"
_COPY_OPS = ("aten::copy_", "aten::to", "aten::_to_copy", "aten::clone")
_COMM_ANNOTATIONS = ("gloo:", "nccl:")


# --- traces ----------------------------------------------------------------------------
# A profiler trace of a few steps is tens of MiB; past this it is no trace of parabench's.
MAX_TRACE_BYTES = 2 * 2**30


def load(path: str) -> dict:
    """A trace, read only where it is a regular file of a trace's size: a pipe would block and a
    device never end (ValueError, one line)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file (a pipe, a device or a socket): not a trace")
    if info.st_size > MAX_TRACE_BYTES:
        raise ValueError(f"{path} is {info.st_size / 2**20:,.0f} MiB, more than any trace "
                         f"({MAX_TRACE_BYTES // 2**20} MiB at most)")
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        return json.load(fh)


def _spans(events, pred) -> list[tuple[float, float]]:
    return [(e["ts"], e["ts"] + e.get("dur", 0)) for e in events if pred(e)]


def _step_window(events: list[dict]) -> tuple[int, tuple[float, float], object]:
    """The profiled steps (ProfilerStep#N on the host): their count, their span, their thread."""
    steps = [e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")]
    if not steps:
        raise ValueError("the trace has no ProfilerStep annotations: it was not taken by bench --anatomy")
    spans = _spans(steps, lambda e: True)
    return len(steps), (min(a for a, _ in spans), max(b for _, b in spans)), steps[0].get("tid")


def kernel_class(event: dict) -> str | None:
    """copy, comm or kernel for GPU activity; None for host events."""
    cat = event.get("cat", "")
    name = str(event.get("name", "")).lower()
    if cat in ("gpu_memcpy", "gpu_memset") or (cat == "kernel" and ("memcpy" in name or "memset" in name)):
        return "copy"
    if cat == "kernel":
        return "comm" if "nccl" in name else "kernel"
    return None


def analyse(trace: dict, labelled: dict | None = None) -> list[dict]:
    """Per device of the process that wrote `trace`: milliseconds per step of each part.

    `trace` is either a labelled trace (CPU and GPU activity, ProfilerStep annotations) or a
    GPU timeline (GPU activity only, taken to keep the profiler off the host's critical
    path); a timeline takes its optimiser kernels from the `labelled` trace of the same
    rank, matched by position in each stream's kernel sequence."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
    gpu = [e for e in events if kernel_class(e)]
    if "parabench_steps" in trace:
        if labelled is None:
            raise ValueError("a GPU timeline needs the labelled trace of the same rank")
        label_events = [e for e in labelled.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]
        is_optimizer = optimizer_by_position(label_events, gpu)
        return _analyse_gpu(gpu, int(trace["parabench_steps"]), _timeline_window(events, gpu), is_optimizer,
                            "gpu timeline")
    n_steps, window, main_tid = _step_window(events)
    if gpu:
        correlations = _optimizer_correlations(events)
        return _analyse_gpu(gpu, n_steps, window, lambda e: e.get("args", {}).get("correlation") in correlations,
                            "gpu kernels, labelled trace")
    return [_analyse_cpu(events, n_steps, window, main_tid)]


def _timeline_window(events, gpu) -> tuple[float, float]:
    """From the end of the device synchronisation before the steps to the end of the last
    activity (or of the synchronisation after them)."""
    first = min(e["ts"] for e in gpu)
    syncs = [e["ts"] + e.get("dur", 0) for e in events if e.get("name") == "cudaDeviceSynchronize"]
    before = [t for t in syncs if t <= first]
    end = max([e["ts"] + e.get("dur", 0) for e in gpu] + syncs)
    return (max(before) if before else first), end


def _streams(gpu: list[dict]) -> dict:
    """GPU activity per (device, stream), in start order."""
    out: dict = {}
    for e in sorted(gpu, key=lambda e: e["ts"]):
        args = e.get("args", {})
        out.setdefault((args.get("device", e.get("pid")), args.get("stream", e.get("tid"))), []).append(e)
    return out


def optimizer_by_position(label_events: list[dict], timeline_gpu: list[dict]):
    """A predicate telling the timeline's optimiser kernels. Each stream's kernel sequence
    repeats every step, so position i of a step is an optimiser kernel in the timeline
    where it was one in the labelled trace. Where a sequence does not repeat, a kernel
    name counts as the optimiser's if most of its labelled launches were."""
    n_steps = _step_window(label_events)[0]
    correlations = _optimizer_correlations(label_events)
    patterns, by_name = {}, {}
    for key, kernels in _streams([e for e in label_events if kernel_class(e)]).items():
        flags = [e.get("args", {}).get("correlation") in correlations for e in kernels]
        for e, flag in zip(kernels, flags):
            by_name.setdefault(e["name"], []).append(flag)
        names = [e["name"] for e in kernels]
        per = len(kernels) // n_steps
        if per and names == names[:per] * n_steps:
            patterns[key] = (names[:per], flags[:per])
    majority = {name: sum(f) * 2 > len(f) for name, f in by_name.items()}
    marked = set()
    for key, kernels in _streams(timeline_gpu).items():
        names = [e["name"] for e in kernels]
        pattern = patterns.get(key)
        repeats = len(names) // len(pattern[0]) if pattern else 0
        if repeats and names == pattern[0] * repeats:
            marked.update(id(e) for e, flag in zip(kernels, pattern[1] * repeats) if flag)
        else:
            marked.update(id(e) for e in kernels if majority.get(e["name"]))
    return lambda e: id(e) in marked


def _optimizer_correlations(events: list[dict]) -> set:
    """Correlation ids of the launches made inside the optimiser phase, per host thread."""
    phases: dict = {}
    for e in events:
        if e.get("name") == OPTIMIZER_PHASE and e.get("cat") == "user_annotation":
            phases.setdefault(e.get("tid"), []).append((e["ts"], e["ts"] + e.get("dur", 0)))
    ids = set()
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            for a, b in phases.get(e.get("tid"), ()):
                if a <= e["ts"] <= b:
                    ids.add(e["args"]["correlation"])
                    break
    return ids


def _analyse_gpu(gpu, n_steps, window, is_optimizer, basis) -> list[dict]:
    out = []
    for device in sorted({e.get("args", {}).get("device", e.get("pid")) for e in gpu}, key=str):
        mine = [e for e in gpu if e.get("args", {}).get("device", e.get("pid")) == device]

        def spans(pred):
            return _spans(mine, pred)

        layers = [
            ("compute", spans(lambda e: kernel_class(e) == "kernel" and not is_optimizer(e))),
            ("optimizer", spans(lambda e: kernel_class(e) == "kernel" and is_optimizer(e))),
            ("copy", spans(lambda e: kernel_class(e) == "copy")),
            ("exposed_comm", spans(lambda e: kernel_class(e) == "comm")),
        ]
        out.append(_per_step(f"cuda:{device}", basis, n_steps, window, layers, comm=layers[3][1]))
    return out


def _top_level(ops: list[dict]) -> list[dict]:
    """Operators not nested in another operator of the same thread."""
    out, end = [], float("-inf")
    for e in sorted(ops, key=lambda e: (e["ts"], -e.get("dur", 0))):
        if e["ts"] >= end:
            out.append(e)
            end = e["ts"] + e.get("dur", 0)
    return out


def _analyse_cpu(events, n_steps, window, main_tid) -> dict:
    ops = [e for e in events if e.get("cat") == "cpu_op" and e.get("tid") == main_tid
           and not str(e.get("name", "")).startswith("c10d::")]
    top = _top_level(ops)
    phases = union(_spans(events, lambda e: e.get("name") == OPTIMIZER_PHASE and e.get("tid") == main_tid))
    copies = _spans(top, lambda e: e["name"] in _COPY_OPS)
    others = union(_spans(top, lambda e: e["name"] not in _COPY_OPS))
    # Operators inside the optimiser phase are the optimiser's, the rest compute.
    optimizer = [(max(a, c), min(b, d)) for a, b in others for c, d in phases if min(b, d) > max(a, c)]
    comm = _spans(events, lambda e: str(e.get("name", "")).startswith(_COMM_ANNOTATIONS))
    layers = [("optimizer", optimizer), ("compute", others), ("copy", copies), ("exposed_comm", comm)]
    return _per_step("cpu", "cpu ops", n_steps, window, layers, comm=comm)


def _per_step(device: str, basis: str, n_steps: int, window, layers, comm) -> dict:
    spans = partition_spans(window, layers)
    parts = {name: length(s) for name, s in spans.items()}
    parts["idle"] = (window[1] - window[0]) - sum(parts.values())
    per_ms = 1 / (1000 * n_steps)  # trace timestamps are microseconds
    out = {"device": device, "basis": basis, "steps": n_steps, "step": (window[1] - window[0]) * per_ms}
    out.update({p: parts[p] * per_ms for p in PARTS})
    out["comm"] = length(union(clip(comm, *window))) * per_ms
    # For the wait/transfer split across ranks (split_exposed_comm): every collective that
    # starts in the window, whole, in this trace's clock (us), and the exposed intervals.
    out["collectives"] = [[a, b] for a, b in sorted(comm) if window[0] <= a < window[1] and b > a]
    out["exposed_spans"] = [[a, b] for a, b in spans["exposed_comm"]]
    return out


def split_exposed_comm(devices: list[dict]) -> str | None:
    """Set `wait` and `transfer` (ms per step) on every device of every rank (see the module
    notes); None where that worked, else why not (the values are then None)."""
    for d in devices:
        d["wait"] = d["transfer"] = None
    talking = [d for d in devices if d.get("collectives")]
    if not talking:
        for d in devices:
            d["wait"], d["transfer"] = 0.0, d["exposed_comm"]
        return None
    counts = {len(d["collectives"]) for d in talking}
    if len(counts) > 1 or len(talking) < len(devices) and len(devices) > 1:
        return ("wait/transfer not split: the devices' traces hold different numbers of collectives "
                f"({', '.join(str(len(d.get('collectives') or [])) for d in devices)})")
    ends = [[b for _, b in d["collectives"]] for d in talking]
    offsets = [_median([e - r for e, r in zip(mine, ends[0])]) for mine in ends]
    last_entry = [max(d["collectives"][k][0] - off for d, off in zip(talking, offsets))
                  for k in range(counts.pop())]
    for d, off in zip(talking, offsets):
        waits = union((a, min(b, last + off)) for (a, b), last in zip(d["collectives"], last_entry))
        exposed = [tuple(s) for s in d["exposed_spans"]]
        per_ms = 1 / (1000 * d["steps"])
        d["wait"] = overlap(waits, exposed) * per_ms
        d["transfer"] = max(0.0, d["exposed_comm"] - d["wait"])
    for d in devices:
        if d["wait"] is None:
            d["wait"], d["transfer"] = 0.0, d["exposed_comm"]
    return None


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


# --- the row ---------------------------------------------------------------------------
def summarise(per_rank: list[list[dict]], timed_step_ms: float, on_gpu: bool) -> dict:
    """The row's anatomy columns from every rank's per-device breakdown."""
    devices = [dict(d, where=f"{rank}:{d['device']}") for rank, ds in enumerate(per_rank) for d in ds]
    unsplit = split_exposed_comm(devices)
    busiest = max(devices, key=lambda d: d["step"] - d["idle"])
    values = VALUES if unsplit else VALUES + SPLIT
    row = {f"anatomy_{v}_ms": round(busiest[v], 4) for v in values}
    row.update({f"anatomy_{v}_ms_per_device": ";".join(f"{d['where']}={d[v]:.4g}" for d in devices) for v in values})
    row.update(anatomy_device=busiest["where"], anatomy_basis=busiest["basis"], anatomy_steps=busiest["steps"])
    gap = 100 * (busiest["step"] - timed_step_ms) / timed_step_ms
    row["anatomy_vs_timed_pct"] = round(gap, 2)
    notes = [unsplit] if unsplit else []
    if on_gpu and abs(gap) > TOLERANCE_PCT:
        share = busiest["idle"] / busiest["step"]
        cause = ("the step is host-bound (idle %.0f%% of it) and the profiler adds host time to every launch"
                 % (100 * share)) if share > 0.2 else "the profiled window and the timed steps differ"
        notes.append(f"the parts add up to the profiled step, {busiest['step']:.3f} ms, which is {gap:+.1f}% "
                     f"against the timed median {timed_step_ms:.3f} ms: {cause}")
    if not on_gpu:
        notes.append("CPU: parts of the step's host thread (see README: step anatomy)")
    row["anatomy_note"] = "; ".join(notes)
    return row


def case_folder(label: str, variant: str) -> str:
    """A case's folder name under the run's trace folder: readable, one per case."""
    text = f"{label} {variant}".replace("batch ", "b")
    slug = re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-").lower()
    return slug[:150]


def trace_path(folder: str, rank: int) -> str:
    """The labelled trace: host and GPU activity, the one to open in Perfetto."""
    return os.path.join(folder, f"rank{rank}.pt.trace.json.gz")


def timeline_path(folder: str, rank: int) -> str:
    """The GPU timeline the parts are taken from on GPUs."""
    return os.path.join(folder, f"rank{rank}.timeline.pt.trace.json.gz")


def analyse_rank(folder: str, rank: int) -> list[dict]:
    """A rank's breakdown from the traces it wrote: its GPU timeline where there is one."""
    labelled = load(trace_path(folder, rank))
    timeline = timeline_path(folder, rank)
    if os.path.exists(timeline):
        return analyse(load(timeline), labelled)
    return analyse(labelled)
