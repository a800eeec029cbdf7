"""Step timing: CUDA events at every step boundary on every device a process drives.

No host synchronisation inside a trial, so the CPU may queue the next step while the
GPUs work, as in real training. The time of step i on a device is the distance between
its boundary events i and i+1 on that device's stream; the step time is the largest
over devices (and, for several processes, over ranks). On the CPU the host clock is
exact, since the work is synchronous.

A trial starts from a synchronisation, which training never does: the queue is empty, so
the first step after it waits for the host to issue its work. Where the host's share of a
step is close to the GPU's (torch.compile's reduce-overhead at small batches: 3.2 ms on the
GPU, 4.3-5.6 ms for the first step of every trial on an H200), that wait showed in 1 to 7
of each trial's 20 steps and made one configuration read as two. So each trial first runs
LEAD_IN untimed steps, and its clock starts at the event after them: the first timed step no
longer waits for an empty queue. It does not refill the queue as training does (the host gains
only what the GPU's share exceeds its own each step), so a host that falls behind for a while
still shows in the steps, as it would in training. The lead-in's time is taken off the trial's
wall clock too.
"""
from __future__ import annotations

import time
from typing import Callable

import torch

# Untimed steps at the start of every GPU trial, after its synchronisation (see above).
LEAD_IN = 2


class StepClock:
    def __init__(self, devices: list[torch.device]):
        self.cuda_devices = sorted({d for d in devices if d.type == "cuda"}, key=lambda d: d.index)

    def synchronize(self) -> None:
        for device in self.cuda_devices:
            torch.cuda.synchronize(device)

    def time_trial(self, run: Callable[[], None], steps: int, lead_in: int = LEAD_IN) -> tuple[list[float], float]:
        """Run `lead_in` untimed steps (on a GPU), then `steps` timed ones; return the timed
        steps' milliseconds and the trial's wall seconds less the lead-in's."""
        self.synchronize()
        start = time.perf_counter()
        if not self.cuda_devices:
            marks = [start]
            for _ in range(steps):
                run()
                marks.append(time.perf_counter())
            return [(b - a) * 1000 for a, b in zip(marks, marks[1:])], marks[-1] - start

        total = lead_in + steps
        events = {d: [torch.cuda.Event(enable_timing=True) for _ in range(total + 1)] for d in self.cuda_devices}

        def mark(i: int) -> None:
            for device, evs in events.items():
                evs[i].record(torch.cuda.current_stream(device))

        mark(0)
        for i in range(total):
            run()
            mark(i + 1)
        self.synchronize()
        wall = time.perf_counter() - start
        per_device = [[evs[i].elapsed_time(evs[i + 1]) for i in range(total)] for evs in events.values()]
        times = [max(column) for column in zip(*per_device)]
        return times[lead_in:], wall - sum(times[:lead_in]) / 1000


def reset_peak_memory(devices: list[torch.device]) -> None:
    for device in {d for d in devices if d.type == "cuda"}:
        torch.cuda.reset_peak_memory_stats(device)


def graph_pool_bytes() -> dict[int, int]:
    """Per CUDA ordinal: bytes of private memory pools that no live tensor holds.

    A CUDA graph (torch.cuda.graph, and the CUDA-graph trees of torch.compile's
    reduce-overhead mode) allocates its temporaries from a private pool while it is
    captured; the capture then frees them to that pool, and every replay writes into the
    same memory without allocating. The allocator's allocated-bytes statistic, and so
    max_memory_allocated after a reset, never sees that memory again: a captured step's
    activations and (set-to-None) gradients vanish from the peak. The pool's segments stay
    reserved for the graphs, so their free part is what the graphs hold beyond the
    allocator's count. Private pools are the segments whose pool id is not the default
    pool's (0, 0) (torch.cuda.memory_snapshot)."""
    held: dict[int, int] = {}
    for segment in torch.cuda.memory_snapshot():
        if tuple(segment.get("segment_pool_id") or (0, 0)) != (0, 0):
            device = segment["device"]
            held[device] = held.get(device, 0) + segment["total_size"] - segment["allocated_size"]
    return held


def peak_memory_mib(devices: list[torch.device]) -> dict[int, tuple[float, float]]:
    """Per CUDA ordinal: (peak allocated, peak reserved) in MiB since the last reset, for
    every execution by one rule: the allocator's peak plus what CUDA-graph pools hold
    beyond it (graph_pool_bytes; zero for eager and compile's default mode). Reserved
    memory already includes the pools' segments."""
    cuda = {d for d in devices if d.type == "cuda"}
    pools = graph_pool_bytes() if cuda else {}
    return {
        d.index: ((torch.cuda.max_memory_allocated(d) + pools.get(d.index, 0)) / 2**20,
                  torch.cuda.max_memory_reserved(d) / 2**20)
        for d in cuda
    }
