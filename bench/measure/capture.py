"""Taking a step's traces inside a worker: the profiler windows behind the step anatomy
(bench/measure/anatomy.py reads what this writes)."""
from __future__ import annotations

import os

from bench.measure.anatomy import timeline_path, trace_path
from bench.measure.counters import detach_profiler_afterwards


def capture(run, devices, steps: int, folder: str, rank: int) -> None:
    """Profile `run` and write this rank's traces to `folder`.

    First the labelled trace: host operators, phase labels and GPU activity, one warm-up
    step then `steps` steps. Recording every operator costs the host microseconds per
    call, which lengthens a launch-bound step, so on GPUs the parts come from a second
    window of `steps` steps that records GPU activity only (and the host's CUDA calls):
    the GPU timeline. Both windows start and end with the devices synchronised."""
    import warnings

    import torch
    from torch.profiler import ProfilerActivity, profile, schedule

    warnings.filterwarnings("ignore", message="Profiler clears events")  # one window per profiler: expected
    cuda = sorted({d for d in devices if d.type == "cuda"}, key=lambda d: d.index)
    # On GPUs the profiler stays attached through both windows and lets go after them (below);
    # before teardown existed, both windows held GPU activity on 2 H200s.
    detach_profiler_afterwards(detach=not cuda)
    os.makedirs(folder, exist_ok=True)

    def synchronize():
        for d in cuda:
            torch.cuda.synchronize(d)

    def write(path):
        return lambda prof: prof.export_chrome_trace(path)

    try:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=steps),
                     on_trace_ready=write(trace_path(folder, rank))) as prof:
            for i in range(steps + 1):
                run()
                if i in (0, steps):
                    synchronize()  # the window starts and ends with idle queues
                prof.step()
        if not cuda:
            return
        with profile(activities=[ProfilerActivity.CUDA], schedule=schedule(wait=0, warmup=1, active=1),
                     on_trace_ready=write(timeline_path(folder, rank))) as prof:
            run()  # the profiler's own warm-up
            synchronize()
            prof.step()
            synchronize()  # marks the start of the window (cudaDeviceSynchronize)
            for _ in range(steps):
                run()
            synchronize()
            prof.add_metadata("parabench_steps", str(steps))
            prof.step()
    finally:
        if cuda:
            # The profiler lets go of the GPU in an empty window of its own, also after a failed window (the
            # worker's next cases must not run with it attached): on 2 H200s under torchrun the GPU timeline
            # of a window that let go as it stopped held no GPU activity on either rank, and with
            # TEARDOWN_CUPTI=0 throughout the same test passed (tests/gpu-logs/h200x2-1b07625.log and
            # h200x2-1b07625-attached.log); so it passed at 14f3745 (h200x2-14f3745-anatomy.log).
            detach_profiler_afterwards()
            with profile(activities=[ProfilerActivity.CUDA]):
                pass
