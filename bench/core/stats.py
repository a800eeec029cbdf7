"""Summary statistics of step times (no torch, no numpy: shared with the MXNet worker).

A case's estimate is its median step over every timed step, with a confidence interval by
bootstrap, as criterion.rs reports its estimates (and outliers as pytest-benchmark counts
them). The resampling is two-level (trials, then steps within each trial drawn): steps of one
trial share what that trial met (a clock, a neighbour's burst of work), so a trial that ran in
another mode widens the interval, while one slow step in a trial of steady ones does not move
it. scipy.stats.bootstrap resamples one level only, hence the few lines here. Outlier steps are
classified by Tukey's fences (1.5 and 3 interquartile ranges beyond the quartiles) and
reported, never dropped.
"""
from __future__ import annotations

import random
import statistics

CONFIDENCE = 0.95
RESAMPLES = 1000
# The resampling's seed: the same steps give the same interval in every run of every reader.
SEED = 20261127
TUKEY_MILD, TUKEY_SEVERE = 1.5, 3.0


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100] (numpy's default method)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def trials_of(step_ms: list[float], steps_per_trial: int) -> list[list[float]]:
    """The timed steps cut into their trials (a raced-out case ran one short trial, a full one several)."""
    size = max(1, int(steps_per_trial))
    return [step_ms[i:i + size] for i in range(0, len(step_ms), size)]


def median_interval(trials: list[list[float]], confidence: float = CONFIDENCE, resamples: int = RESAMPLES,
                    seed: int = SEED) -> tuple[float, float]:
    """The percentile bootstrap interval of the median step (ms) over trials and their steps."""
    trials = [t for t in trials if t]
    if not trials:
        raise ValueError("no timed steps")
    rng = random.Random(seed)
    medians = []
    for _ in range(resamples):
        pooled = []
        for _ in range(len(trials)):
            trial = trials[rng.randrange(len(trials))]
            pooled.extend(trial[rng.randrange(len(trial))] for _ in trial)
        medians.append(statistics.median(pooled))
    tail = 100 * (1 - confidence) / 2
    return percentile(medians, tail), percentile(medians, 100 - tail)


def outliers(step_ms: list[float]) -> dict:
    """Tukey's classification of the steps: counts of mild and severe outliers, low and high."""
    q1, q3 = percentile(step_ms, 25), percentile(step_ms, 75)
    iqr = q3 - q1
    counts = {"low_severe": 0, "low_mild": 0, "high_mild": 0, "high_severe": 0}
    for t in step_ms:
        if t < q1 - TUKEY_SEVERE * iqr:
            counts["low_severe"] += 1
        elif t < q1 - TUKEY_MILD * iqr:
            counts["low_mild"] += 1
        elif t > q3 + TUKEY_SEVERE * iqr:
            counts["high_severe"] += 1
        elif t > q3 + TUKEY_MILD * iqr:
            counts["high_mild"] += 1
    return counts


def outlier_text(step_ms: list[float]) -> str:
    """criterion's way of saying it: "3 of 60 (2 high mild, 1 high severe)", "" where none."""
    counts = outliers(step_ms)
    found = sum(counts.values())
    if not found:
        return ""
    parts = [f"{n} {kind.replace('_', ' ')}" for kind, n in counts.items() if n]
    return f"{found} of {len(step_ms)} ({', '.join(parts)})"


def series_text(trials: list[list[float]]) -> str:
    """The timed steps as the row keeps them: milliseconds to 4 significant digits, steps of a
    trial joined by ';', trials by '|' (one flat field, so the CSV holds it too)."""
    return "|".join(";".join(f"{t:.4g}" for t in trial) for trial in trials)


def parse_series(text: str) -> list[list[float]]:
    """`series_text` read back; ValueError where it is not one."""
    trials = [[float(t) for t in part.split(";")] for part in str(text).split("|")]
    if not all(trials) or any(not (t > 0 and t != float("inf")) for trial in trials for t in trial):
        raise ValueError("step times must be positive finite numbers")
    return trials


def interval_items_per_s(trials: list[list[float]], items_per_step: int) -> tuple[float, float]:
    """The median's interval as items/s (a slower step is fewer items/s: the ends swap)."""
    lo_ms, hi_ms = median_interval(trials)
    return items_per_step / (hi_ms / 1000), items_per_step / (lo_ms / 1000)


def summarize(step_ms: list[float], trial_wall_s: list[float], steps_per_trial: int, items_per_step: int) -> dict:
    """Figures of one case from its per-step times (ms, trial after trial) and per-trial wall times (s);
    `items_per_step` is what one step trains, in the unit throughput counts (the global batch's
    images, or its sequences' tokens)."""
    p10, p50, p90 = (percentile(step_ms, q) for q in (10, 50, 90))
    trial_items_per_s = [items_per_step * steps_per_trial / w for w in trial_wall_s]
    trials = trials_of(step_ms, steps_per_trial)
    ci_lo, ci_hi = interval_items_per_s(trials, items_per_step)
    return {
        "step_ms_p10": p10,
        "step_ms_p50": p50,
        "step_ms_p90": p90,
        "step_ms_mean": statistics.fmean(step_ms),
        "items_per_s": items_per_step / (p50 / 1000),
        # Throughput at the fast and slow ends of the step-time spread.
        "items_per_s_p10": items_per_step / (p90 / 1000),
        "items_per_s_p90": items_per_step / (p10 / 1000),
        # Where the median lies, at CONFIDENCE: what rankings compare (bench/cases/ranking.py).
        "items_per_s_ci_lo": min(ci_lo, items_per_step / (p50 / 1000)),
        "items_per_s_ci_hi": max(ci_hi, items_per_step / (p50 / 1000)),
        "outliers": outlier_text(step_ms),
        "step_ms_trials": series_text(trials),
        # Cross-check: whole trials timed on the host clock, synchronised at both ends.
        "wall_items_per_s": items_per_step * steps_per_trial * len(trial_wall_s) / sum(trial_wall_s),
        "trial_items_per_s_min": min(trial_items_per_s),
        "trial_items_per_s_max": max(trial_items_per_s),
        "n_timed_steps": len(step_ms),
    }
