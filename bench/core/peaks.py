"""Dense peak FLOP rates of GPUs, per precision: the denominator of model FLOPs utilisation.

MFU = the model's FLOPs per item x items/s per GPU / the GPU's dense peak for the precision
the step computes in (the convention torchtitan and Lightning's ThroughputMonitor use), an item
being what throughput counts: an image, or a token of a language model (nanoGPT's estimate_mfu). The
figures are NVIDIA's datasheet rates without sparsity, in TFLOP/s; they are the hardware's
ceiling, not a measurement. fp32 cases count TF32's rate where convolutions may use TF32
(PyTorch's default for cuDNN convolutions, `--tf32 default` and `on`), plain fp32's where
`--tf32 off`. A GPU not listed has no MFU (shown as such, never guessed). No torch.
"""
from __future__ import annotations

# (pattern in the device name, lower case; its peaks). The first pattern found wins, so the
# more specific names come first.
DENSE_TFLOPS: tuple[tuple[str, dict], ...] = (
    ("h100 pcie", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2}),
    ("h100 nvl", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("h200 nvl", {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0}),
    ("h100", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM: "NVIDIA H100 80GB HBM3"
    ("h200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),  # SXM
    ("gh200", {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9}),
    ("a100", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    ("l40s", {"bf16": 362.05, "fp16": 362.05, "tf32": 183.0, "fp32": 91.6}),
    ("l4", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3}),
    ("a10", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    ("v100", {"fp16": 125.0, "fp32": 15.7}),
)


def compute_dtype(precision: str, tf32: str | None) -> str:
    """The number format the step's matrix work runs in."""
    if "bf16" in precision:
        return "bf16"
    if "fp16" in precision or precision.startswith("apex"):
        return "fp16"
    return "fp32" if tf32 == "off" else "tf32"


def dense_peak(gpu_name: str | None, precision: str, tf32: str | None = None) -> tuple[float, str] | None:
    """(TFLOP/s, what it is) for the GPU and precision, or None where the GPU is not listed."""
    if not gpu_name:
        return None
    name = str(gpu_name).lower()
    dtype = compute_dtype(precision, tf32)
    for pattern, peaks in DENSE_TFLOPS:
        if pattern in name:
            rate = peaks.get(dtype) or (peaks.get("fp32") if dtype == "tf32" else None)
            if rate is None:
                return None
            shown = dtype if dtype in peaks else "fp32"
            return rate, f"{gpu_name}'s dense {shown} peak, {rate:g} TFLOP/s (datasheet)"
    return None
