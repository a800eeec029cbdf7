"""What makes an ok row's figures mislead, said in the row itself (the `caveat` column).

A row can be measured to the letter and still not say what its figures seem to say: its
first timed step did one-time work, its steps are too few for a spread, its GPU was held
below its clocks for its temperature, or its steps disagree with the time the trials took.
Each such fact is one short clause of the caveat; a row without one has none. Computed from
the row's own fields, so that a row read back from any file gets the same caveat as when it was
written.
"""
from __future__ import annotations

from bench.workloads.data import rate_unit

# p10 and p90 (linear interpolation over n steps) lean on the single fastest and slowest
# step while 0.1 * (n - 1) < 1: a spread needs at least 11 timed steps.
MIN_STEPS_FOR_SPREAD = 11
# A GPU held below its asked clocks by its temperature for more than this share of the timed trials:
# its cooling, not the configuration, set part of the row's speed. The power cap is no caveat: the
# figure is the speed at the GPU's power limit, a setting of the machine that the row records
# (`power_limit_w`, with `power_capped_pct`; bench/measure/throttle.py says what NVML can and cannot
# tell of it), and the answer says it beside the figure.
CAPPED_PCT = 5.0
# Wall-clock against the steps: in the 821 ok rows of results/reference the wall clock and the median
# differed by at most 5.3% (GPUs, p10-p90 spreads of 0.1-4%); twice that is a disagreement.
WALL_DISAGREEMENT = 0.10


def wall_disagreement(row: dict) -> tuple[float, str] | None:
    """How far the trials' wall-clock figure lies from what the row's steps say, and what it is
    set against; None where it does not disagree. Rows that keep their steps (`step_ms_trials`)
    set it against the steps' own total (their mean): time no step accounts for (the process stopped or starved
    between trials, or the step timing broken). One slow step is in the steps' total, and is
    an outlier (the row's `outliers`), not a disagreement. Older rows: against the median,
    outside the p10-p90 spread."""
    wall, median = row.get("wall_items_per_s"), row.get("items_per_s")
    low, high = row.get("items_per_s_p10"), row.get("items_per_s_p90")
    mean, batch = row.get("step_ms_mean"), row.get("global_batch")
    if not wall or not median:
        return None
    if mean and batch and row.get("step_ms_trials"):
        off = wall / (float(batch) * float(row.get("items_per_sample") or 1) * 1000 / float(mean)) - 1
        return (off, "what its steps add up to") if abs(off) > WALL_DISAGREEMENT else None
    if low is None or high is None:
        return None
    off = wall / median - 1
    return (off, f"the median's {median:.3g}") if abs(off) > WALL_DISAGREEMENT and not low <= wall <= high else None


def caveat(row: dict) -> str:
    """The clauses that apply to an ok row, joined by '; '; '' where none does."""
    if row.get("status") != "ok":
        return ""
    said = []
    if row.get("warmup") == 0:
        said.append("no warm-up: the first timed step includes one-time work (allocator growth, autotuning, lazy "
                    "loading)")
    steps = row.get("n_timed_steps")
    if steps is None and row.get("steps") is not None and row.get("trials") is not None:
        steps = row["steps"] * row["trials"]
    if steps is not None and steps < MIN_STEPS_FOR_SPREAD:
        said.append(f"{steps} timed step{'s' if steps != 1 else ''}: too few for a p10-p90 spread (it needs "
                    f"{MIN_STEPS_FOR_SPREAD})")
    share = row.get("thermal_capped_pct")
    if share is not None and share > CAPPED_PCT:
        said.append(f"a GPU ran below its asked clocks for its temperature during {share:.0f}% of the timed "
                    "trials: its cooling set part of this speed")
    disagreement = wall_disagreement(row)
    if disagreement:
        off, against = disagreement
        if against.startswith("the median"):
            why = "some steps stalled far beyond what the median shows" if off < 0 else \
                "the step times do not add up to the trials' time"
            said.append(f"wall-clock {row['wall_items_per_s']:.3g} {rate_unit(row)} is {100 * off:+.0f}% off "
                        f"{against}, "
                        f"beyond the p10-p90 spread: {why}; re-run")
        else:
            why = "the process was stopped or starved outside its timed steps" if off < 0 else \
                "the step times do not add up to the trials' time"
            said.append(f"wall-clock {row['wall_items_per_s']:.3g} {rate_unit(row)} is {100 * off:+.0f}% off "
                        f"{against}: "
                        f"{why}; re-run")
    return "; ".join(said)
