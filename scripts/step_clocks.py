"""One training step's time beside the GPU's clocks, step after step (one GPU).

Where a compiled step's time moves in runs of steps (docs/findings.md, "A compiled row slower in
the search than alone"), this tells the GPU's part from the host's: each step's CUDA-event time,
the host's time to issue it, and every 10 steps the SM clock, the power drawn and NVML's reasons
for holding the clocks down. `--profile-first` counts one eager step first, as a worker counts
the case before (bench/measure/counters.py).

Usage: python scripts/step_clocks.py --variant compile --batch 1024 [--profile-first] --out FILE.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main() -> None:
    import pynvml
    import torch

    from bench.checks.handloop import _loop

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18-small")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--precision", default="amp-bf16")
    ap.add_argument("--variant", default="compile")
    ap.add_argument("--kernels", default="foreach")
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--profile-first", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    given = os.environ.get("TEARDOWN_CUPTI")  # as the shell set it (counting sets it where unset)

    torch.backends.cudnn.benchmark = True
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    if args.profile_first:
        from bench.measure.counters import count_step

        eager, _ = _loop(args.model, args.batch, args.precision, True, args.kernels, "eager")
        for _ in range(3):
            eager()
        count_step(eager, [torch.device("cuda", torch.cuda.current_device())])
        torch.cuda.synchronize()
        del eager
        torch.cuda.empty_cache()
    step, items = _loop(args.model, args.batch, args.precision, True, args.kernels, args.variant)
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    host_ms, samples = [], []
    events[0].record()
    for i in range(args.steps):
        started = time.perf_counter()
        step()
        events[i + 1].record()
        host_ms.append((time.perf_counter() - started) * 1000)
        if i % 10 == 0:
            samples.append({"step": i, "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000,
                            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                            "reasons": pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)})
    torch.cuda.synchronize()
    step_ms = [events[i].elapsed_time(events[i + 1]) for i in range(args.steps)]
    result = {"args": vars(args), "teardown_cupti_given": given, "torch": torch.__version__,
              "items_per_s_p50": items / statistics.median(step_ms) * 1000,
              "step_ms": [round(t, 3) for t in step_ms], "host_ms": [round(t, 3) for t in host_ms],
              "samples": samples}
    with open(args.out, "w") as fh:
        json.dump(result, fh)
    windows = [step_ms[i:i + 10] for i in range(0, args.steps, 10)]
    print(f"{args.variant} {args.batch} profile_first={args.profile_first} TEARDOWN_CUPTI={given}: "
          f"{result['items_per_s_p50']:.0f} items/s, p50 {statistics.median(step_ms):.2f} ms")
    for window, host, sample in zip(windows, [host_ms[i:i + 10] for i in range(0, args.steps, 10)], samples):
        print(f"  step {sample['step']:3d}: gpu {statistics.mean(window):6.2f} ms "
              f"host {statistics.mean(host):6.2f} ms sm {sample['sm_mhz']} MHz "
              f"{sample['power_w']:.0f} W {sample['temp_c']} C reasons {sample['reasons']:#x}")


if __name__ == "__main__":
    main()
