"""A measured step as the simulation needs it, read from the traces of `bench run --anatomy`.

Per profiled step, on the device that sets the pace (a rank's GPU, or on the CPU the
step's host thread), averaged over the window's steps (milliseconds):

- forward: from the step's start to the start of backward's first work (the host's time
  before the first kernel included);
- backward: from there to the moment the last gradient is ready;
- tail: the rest of the step (the optimiser, zero_grad, what DDP does after backward, the
  host's time before the next step);
- ready: when each gradient is ready, from backward's start, in the order autograd
  accumulates them (one `AccumulateGrad` per parameter).

On GPUs a gradient is ready when the last kernel launched before its AccumulateGrad
returned has finished on the compute stream (the stream with the most kernels). Which
kernel that is comes from the labelled trace (launches and their correlation ids, the
parabench.backward range); when it ran comes from the GPU timeline, matched by position
in the stream's kernel sequence, which repeats every step (bench.measure.anatomy does the same
for the optimiser's kernels): the labelled trace's host is slowed by the profiler, the
timeline's is not. Without a timeline (or where its sequence does not repeat) the
labelled trace's own times are used, and the basis says so.

On the CPU autograd runs on the step's thread: the ranges and AccumulateGrad events are
read there directly.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from bench.measure import anatomy

ACCUMULATE = "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad"
_LAUNCH_CATS = ("cuda_runtime", "cuda_driver")


@dataclass(frozen=True)
class StepTimeline:
    forward: float
    backward: float
    tail: float
    ready: tuple[float, ...]
    optimizer: float  # busy time in the optimiser phase (kernels, or CPU operators)
    idle: float  # the device's idle time (bench.measure.anatomy)
    steps: int
    basis: str

    @property
    def step(self) -> float:
        return self.forward + self.backward + self.tail


def _x(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", []) if e.get("ph") == "X" and "ts" in e]


def _end(e: dict) -> float:
    return e["ts"] + e.get("dur", 0)


def _main_steps(events: list[dict]) -> tuple[list[dict], object]:
    steps = sorted((e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    if not steps:
        raise ValueError("the trace has no ProfilerStep annotations: it was not taken by bench run --anatomy")
    return steps, steps[0].get("tid")


def _ranges(events, name, tid) -> list[dict]:
    return sorted((e for e in events if e.get("name") == name and e.get("tid") == tid), key=lambda e: e["ts"])


def _within(events: list[dict], outer: dict) -> list[dict]:
    return [e for e in events if outer["ts"] <= e["ts"] <= _end(outer)]


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _average(per_step: list[dict], basis: str, breakdown: dict) -> StepTimeline:
    counts = {len(s["ready"]) for s in per_step}
    if len(counts) != 1:
        raise ValueError(f"the profiled steps accumulate different numbers of gradients ({sorted(counts)})")
    ready = tuple(_mean(col) for col in zip(*[s["ready"] for s in per_step]))
    return StepTimeline(forward=_mean(s["forward"] for s in per_step), backward=_mean(s["backward"] for s in per_step),
                        tail=_mean(s["tail"] for s in per_step), ready=ready, optimizer=breakdown["optimizer"],
                        idle=breakdown["idle"], steps=len(per_step), basis=basis)


# --- the CPU --------------------------------------------------------------------------------
def cpu_steps(events: list[dict]) -> list[dict]:
    """Per step (ms): forward, backward, tail and ready offsets, on the step's own thread."""
    steps, tid = _main_steps(events)
    backward = _ranges(events, "parabench.backward", tid)
    accumulate = _ranges(events, ACCUMULATE, tid)
    out = []
    for step in steps:
        (b,) = _within(backward, step) or [None]
        grads = _within(accumulate, step)
        if b is None or not grads:
            raise ValueError("a profiled step has no parabench.backward range or no gradient accumulation")
        b0, b1 = b["ts"], max(_end(g) for g in grads)
        out.append({"forward": (b0 - step["ts"]) / 1e3, "backward": (b1 - b0) / 1e3, "tail": (_end(step) - b1) / 1e3,
                    "ready": [(_end(g) - b0) / 1e3 for g in grads]})
    return out


# --- GPUs -------------------------------------------------------------------------------------
def _compute_stream(kernels: list[dict]):
    counts: dict = {}
    for e in kernels:
        if anatomy.kernel_class(e) == "kernel":
            key = e.get("args", {}).get("stream")
            counts[key] = counts.get(key, 0) + 1
    return max(counts, key=counts.get)


def _stream_kernels(events: list[dict], stream) -> list[dict]:
    return sorted((e for e in events if anatomy.kernel_class(e) in ("kernel", "copy")
                   and e.get("args", {}).get("stream") == stream), key=lambda e: e["ts"])


def gpu_marks(labelled: list[dict]) -> dict:
    """From the labelled trace: the compute stream, its kernels per step (in launch order),
    and the positions in a step's sequence of backward's first kernel and of the kernel
    after which each gradient is ready."""
    steps, tid = _main_steps(labelled)
    launches = {e["args"]["correlation"]: e["ts"] for e in labelled
                if e.get("cat") in _LAUNCH_CATS and "correlation" in e.get("args", {})}
    stream = _compute_stream([e for e in labelled if anatomy.kernel_class(e)])
    kernels = [k for k in _stream_kernels(labelled, stream) if k.get("args", {}).get("correlation") in launches]
    backward = _ranges(labelled, "parabench.backward", tid)
    accumulate = sorted((e for e in labelled if e.get("name") == ACCUMULATE), key=lambda e: e["ts"])
    per_step, marks = [], None
    for step in steps:
        mine = [k for k in kernels if step["ts"] <= launches[k["args"]["correlation"]] <= _end(step)]
        mine.sort(key=lambda k: launches[k["args"]["correlation"]])
        (b,) = _within(backward, step) or [None]
        grads = _within(accumulate, step)
        if b is None or not grads:
            raise ValueError("a profiled step has no parabench.backward range or no gradient accumulation")
        at = [launches[k["args"]["correlation"]] for k in mine]
        first = next((i for i, t in enumerate(at) if t >= b["ts"]), None)
        ready = [max((i for i, t in enumerate(at) if t <= _end(g)), default=None) for g in grads]
        if first is None or None in ready:
            raise ValueError("backward launched no kernel on the compute stream in a profiled step")
        step_marks = (len(mine), first, tuple(ready))
        if marks not in (None, step_marks):
            raise ValueError("the profiled steps launch different kernel sequences: no step to replay")
        marks = step_marks
        per_step.append(mine)
    return {"stream": stream, "per_step": per_step, "count": marks[0], "first": marks[1], "ready": marks[2]}


def gpu_steps(per_step: list[list[dict]], marks: dict, window: tuple[float, float]) -> list[dict]:
    """Per step (ms) from the kernels' times: a step runs from the end of the previous step's
    last kernel (the window's start for the first) to the end of its own (the window's end
    for the last), so the steps tile the window."""
    out = []
    for i, kernels in enumerate(per_step):
        start = window[0] if i == 0 else _end(per_step[i - 1][-1])
        end = window[1] if i == len(per_step) - 1 else _end(kernels[-1])
        b0 = kernels[marks["first"]]["ts"]
        ready = [_end(kernels[p]) for p in marks["ready"]]
        b1 = max(ready)
        out.append({"forward": (b0 - start) / 1e3, "backward": (b1 - b0) / 1e3, "tail": (end - b1) / 1e3,
                    "ready": [(r - b0) / 1e3 for r in ready]})
    return out


def timeline_kernels(timeline: dict, marks: dict) -> list[list[dict]] | None:
    """The timeline's compute-stream kernels cut into steps, where its sequence repeats the
    labelled trace's; None where it does not."""
    events = _x(timeline)
    kernels = _stream_kernels(events, marks["stream"])
    steps = int(timeline.get("parabench_steps", 0))
    names = [k["name"] for k in marks["per_step"][0]]
    if not steps or len(kernels) != steps * marks["count"] or [k["name"] for k in kernels] != names * steps:
        return None
    return [kernels[i * marks["count"]:(i + 1) * marks["count"]] for i in range(steps)]


def read(folder: str, rank: int = 0) -> StepTimeline:
    """The step timeline of one rank of a case folder of traces."""
    labelled = anatomy.load(anatomy.trace_path(folder, rank))
    events = _x(labelled)
    breakdown = anatomy.analyse_rank(folder, rank)[0]
    if not any(anatomy.kernel_class(e) for e in events):
        return _average(cpu_steps(events), "cpu: the step's thread", breakdown)
    marks = gpu_marks(events)
    timeline_file = anatomy.timeline_path(folder, rank)
    if os.path.exists(timeline_file):
        timeline = anatomy.load(timeline_file)
        per_step = timeline_kernels(timeline, marks)
        if per_step is not None:
            gpu = [e for e in _x(timeline) if anatomy.kernel_class(e)]
            window = anatomy._timeline_window(_x(timeline), gpu)
            return _average(gpu_steps(per_step, marks, window), "gpu timeline", breakdown)
    steps, _ = _main_steps(events)
    window = (steps[0]["ts"], _end(steps[-1]))
    return _average(gpu_steps(marks["per_step"], marks, window),
                    "gpu kernels of the labelled trace (no repeating timeline)", breakdown)
