"""Memory per GPU at n devices: the training state from the parameter count, the rest from
a measured one-device peak.

State per parameter element, fp32 (the strategies keep fp32 parameters under autocast):
parameters, gradients and SGD's momentum, 4 bytes each; DDP adds its gradient buckets
(another copy of the gradients) unless gradient_as_bucket_view. Sharded terms are divided
by the device count: ZeRO-1 the momentum (the busiest rank's share of its greedy
partition), FSDP2 all three, plus what it holds unsharded at once: two neighbouring units'
parameters (the one computing and the one prefetched; the largest such pair) and one unit's
gradients before their reduce-scatter; without reshard_after_forward every parameter stays gathered from forward
to backward. Activations (and the step's transient buffers) are the measured one-device
peak less the state of the strategy that measured it; they stay the same per device under
weak scaling.
"""
from __future__ import annotations

from bench.predict.params import ModelFacts, zero_partition

MIB = 2**20


def _flag(options: dict, key: str, default: bool) -> bool:
    return str(options.get(key, default)).lower() in ("1", "true", "yes", "on")


def state_bytes(strategy: str, facts: ModelFacts, n: int, options: dict) -> dict:
    """Bytes per device of each part of the training state."""
    full = facts.numel * 4
    if strategy == "fsdp2":
        units = facts.unit_numel()  # in gradient-ready order: backward's, forward's reversed
        sizes = [k * 4 for k in units.values()]
        biggest = max(sizes)
        pair = max((a + b for a, b in zip(sizes, sizes[1:])), default=biggest)
        gathered = pair if _flag(options, "reshard_after_forward", True) else full
        return {"parameters": full / n, "gradients": full / n, "momentum": full / n,
                "unsharded": gathered + biggest}
    out = {"parameters": full, "gradients": full, "momentum": full}
    if strategy in ("ddp", "zero1") and not _flag(options, "gradient_as_bucket_view", False):
        out["buckets"] = full
    if strategy == "zero1":
        out["momentum"] = max(zero_partition([p.numel for p in facts.ready], n)) * 4
    return out


def per_gpu_mib(strategy: str, facts: ModelFacts, n: int, options: dict,
                base_strategy: str, base_options: dict, base_peak_mib: float | None) -> dict:
    """The prediction's memory columns; activations only where the base measured a peak."""
    state = sum(state_bytes(strategy, facts, n, options).values()) / MIB
    out = {"state_mib": round(state, 1), "activations_mib": None, "memory_mib": None}
    if base_peak_mib:
        base_state = sum(state_bytes(base_strategy, facts, 1, base_options).values()) / MIB
        activations = max(0.0, base_peak_mib - base_state)
        out.update(activations_mib=round(activations, 1), memory_mib=round(state + activations, 1))
    return out
