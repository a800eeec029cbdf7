"""The GPU's dense matrix rates (bf16, fp16, tf32, fp32), measured here and now,
so that achieved TFLOP/s can be set against what the chip does: `python -m bench peak`."""
from __future__ import annotations

import json

import torch


def matmul_tflops(n: int = 8192, reps: int = 20, dtype=torch.bfloat16) -> float:
    a, b = (torch.randn(n, n, device="cuda", dtype=dtype) for _ in range(2))  # random, never zeros
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        start.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    times.sort()
    return 2 * n**3 / times[len(times) // 2] / 1e12


def main(out: str | None = None) -> None:
    result = {
        "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "bf16_matmul_tflops": matmul_tflops(), "fp16_matmul_tflops": matmul_tflops(dtype=torch.float16),
        "tf32_matmul_tflops": None, "fp32_matmul_tflops": matmul_tflops(dtype=torch.float32),
    }
    torch.backends.cuda.matmul.allow_tf32 = True
    result["tf32_matmul_tflops"] = matmul_tflops(dtype=torch.float32)
    print(json.dumps(result, indent=1))
    if out:
        with open(out, "w") as fh:
            json.dump(result, fh, indent=1)

