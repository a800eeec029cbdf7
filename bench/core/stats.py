"""Summary statistics of step times (no torch: shared with the MXNet worker)."""
from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def summarize(step_ms: list[float], trial_wall_s: list[float], steps_per_trial: int, global_batch: int) -> dict:
    """Figures of one case from its per-step times (ms) and per-trial wall times (s)."""
    p10, p50, p90 = (percentile(step_ms, q) for q in (10, 50, 90))
    trial_img_per_s = [global_batch * steps_per_trial / w for w in trial_wall_s]
    return {
        "step_ms_p10": p10,
        "step_ms_p50": p50,
        "step_ms_p90": p90,
        "step_ms_mean": statistics.fmean(step_ms),
        "img_per_s": global_batch / (p50 / 1000),
        # Throughput at the fast and slow ends of the step-time spread.
        "img_per_s_p10": global_batch / (p90 / 1000),
        "img_per_s_p90": global_batch / (p10 / 1000),
        # Cross-check: whole trials timed on the host clock, synchronised at both ends.
        "wall_img_per_s": global_batch * steps_per_trial * len(trial_wall_s) / sum(trial_wall_s),
        "trial_img_per_s_min": min(trial_img_per_s),
        "trial_img_per_s_max": max(trial_img_per_s),
        "n_timed_steps": len(step_ms),
    }
