"""How measured configurations are ranked, defined once for the search and the answer.

- **Spread**: a row's p10-p90 range of images/s over its median.
- **Beats**: `a` beats `b` when a's p10 lies above b's p90 (and, where the run measured its own
  noise by repeating cases, by more than that noise). Anything less is a tie.
- **Disturbed**: a row whose figures cannot be ranked until it is measured again: its spread is
  wider than UNSTABLE of its median, a trial's mean fell outside the p10-p90 of all steps (the
  trials disagree beyond the spread), or the wall-clock figure falls outside that range and
  further than bench/cases/caveats.py allows from the median (the process was stopped or starved
  between steps).
- **Simplicity**: ties go to the simplest configuration: fewer levers moved from what the run
  asked for, then the baseline strategy at one device (every wrapper only adds host work there),
  then the registry's order (`Strategy.order`: lower is simpler to run).

No torch, no pandas: rows are dicts (or anything with `[]` and `.get`).
"""
from __future__ import annotations

import math

import strategies
from bench.cases.case import Case
from bench.cases.caveats import WALL_DISAGREEMENT

# A p10-p90 spread wider than a quarter of the median is no measurement to rank by: on a
# quiet GPU a case's spread is a few percent, host-bound cases' reach a third of the median
# (docs/findings.md, finding 4); 25% flags the widest for a re-run rather than a ranking.
UNSTABLE = 0.25
# A trial mean or wall-clock figure may sit this far outside p10-p90 before it counts as
# disagreeing: percentiles of 20-60 steps are themselves rounded to a step.
SLACK = 0.01


def _number(row, name):
    value = row.get(name)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def spread(row) -> float:
    return (row["img_per_s_p90"] - row["img_per_s_p10"]) / row["img_per_s"]


def beats(a, b, noise: float = 0.0) -> bool:
    """`a` faster than `b` beyond both spreads and beyond the run's measured noise."""
    return a["img_per_s_p10"] > b["img_per_s_p90"] and a["img_per_s"] > b["img_per_s"] * (1 + noise)


def low_end(row) -> float:
    """The slowest the row's own figures allow: its p10, or lower where a trial's mean or the
    wall clock fell below it (a disturbed row's honest floor)."""
    figures = [row["img_per_s_p10"], _number(row, "trial_img_per_s_min"), _number(row, "wall_img_per_s")]
    return min(f for f in figures if f is not None)


def disturbed(row) -> str:
    """Why the row must be measured again before it can be ranked, or ""."""
    if spread(row) > UNSTABLE:
        return (f"its p10-p90 spread is {100 * spread(row):.0f}% of the median (over {100 * UNSTABLE:.0f}%): "
                "the steps were disturbed")
    lo, hi = row["img_per_s_p10"] * (1 - SLACK), row["img_per_s_p90"] * (1 + SLACK)
    trials = [_number(row, "trial_img_per_s_min"), _number(row, "trial_img_per_s_max")]
    if trials[0] is not None and trials[1] is not None and (trials[0] < lo or trials[1] > hi):
        return (f"its trials disagree beyond the spread ({trials[0]:.0f}-{trials[1]:.0f} img/s against "
                f"p10-p90 {row['img_per_s_p10']:.0f}-{row['img_per_s_p90']:.0f})")
    wall = _number(row, "wall_img_per_s")
    if wall is not None and not lo <= wall <= hi and abs(wall / row["img_per_s"] - 1) > WALL_DISAGREEMENT:
        return (f"its wall-clock figure ({wall:.0f} img/s) is {100 * abs(wall / row['img_per_s'] - 1):.0f}% off its "
                f"median and outside its p10-p90 ({row['img_per_s_p10']:.0f}-{row['img_per_s_p90']:.0f}): steps were "
                "stopped or starved")
    return ""


def levers_moved(row, asked: dict | None) -> int:
    """How many settings the row moved away from what the run asked for (`asked`: the run's
    request as `asked_of` records it; None: count the knobs away from the suite's defaults)."""
    case = Case.from_row(dict(row))
    if asked is None:
        return len(case.changed_knobs())
    from bench.cases.levers import difference

    return len(difference(base_like(case, asked), case))


def asked_of(settings, execution: str) -> dict:
    """The run's request, as the search log records it: what `levers_moved` counts from."""
    return {"execution": execution, "knobs": {k: v for k, v in settings.knobs},
            "options": {k: v for k, v in settings.options}}


def base_like(case: Case, asked: dict) -> Case:
    """The configuration the run asked for, at `case`'s strategy, devices and batch."""
    from bench.cases.case import Settings

    settings = Settings(knobs=tuple(asked.get("knobs", {}).items()), options=tuple(asked.get("options", {}).items()))
    return Case.make(case.strategy, case.precision, case.model, case.placement, case.batch_per_gpu,
                     asked.get("execution", "eager"), settings)


def simplicity(row, asked: dict | None = None) -> tuple:
    """The sort key that puts the simplest configuration first."""
    declared = strategies.info(str(row["strategy"]))
    devices = int(row.get("n_gpus") or 0) or int(row.get("n_replicas") or 1)
    one_device_baseline = devices == 1 and declared is not None and declared.baseline
    return (levers_moved(row, asked), not one_device_baseline, declared.order if declared else 99, str(row["strategy"]))


def pick(rows: list, asked: dict | None = None, noise: float = 0.0) -> tuple[dict | None, list, list]:
    """The configuration to recommend among `rows` (ok rows of one hardware, model, precision,
    device count and batch): the simplest of those the fastest does not beat. Returns it, the
    rows it ties with (fastest first), and the disturbed rows left out, each with why.

    Noise never picks the answer: a disturbed row that beats the stable pick beyond both spreads
    (its honest floor, `low_end`, above the other's p90) is faster whatever disturbed it, and is
    named instead (the caller says it was disturbed); where nothing is stable, nothing is named
    (every p90 may be the disturbance's). A disturbed row that may be faster but is not clearly
    so stays left out, and `unjudged` names it: the comparison is said to be open, never settled."""
    usable = [r for r in rows if not disturbed(r)]
    shaky = [r for r in rows if disturbed(r)]
    chosen, tied = None, []
    if usable:
        fastest = max(usable, key=lambda r: (r["img_per_s"], -simplicity(r, asked)[2]))
        tied = [r for r in usable if not beats(fastest, r, noise)]
        chosen = min(tied, key=lambda r: simplicity(r, asked))
        tied = sorted((r for r in tied if r is not chosen), key=lambda r: -r["img_per_s"])
    # Only against a stable pick: where nothing is stable, every p90 may be the disturbance's.
    ahead = [r for r in shaky if chosen is not None and clear_of(r, chosen, noise)]
    if ahead:
        chosen, tied = max(ahead, key=lambda r: r["img_per_s"]), []
    left_out = [(r, disturbed(r)) for r in shaky if r is not chosen]
    return chosen, tied, left_out


def clear_of(row, other, noise: float = 0.0) -> bool:
    """`row` faster than `other` beyond both spreads measured from row's honest floor
    (`low_end`): true whatever disturbed row's trials."""
    return low_end(row) > other["img_per_s_p90"] and row["img_per_s"] > other["img_per_s"] * (1 + noise)


def unjudged(chosen: dict | None, left_out: list) -> list:
    """The left-out (disturbed) rows that may be faster than `chosen`: their median above its
    p90, but not beyond both spreads. Until they are measured again the order is open."""
    if chosen is None:
        return [r for r, _ in left_out]
    return [r for r, _ in left_out if r["img_per_s"] > chosen["img_per_s_p90"]]


# Host-bound or GPU-bound from a series' batch ladder (bench/report/regime.py states the rule).
HOST, GPU, UNKNOWN = "host-bound", "GPU-bound", "unknown"
IDLE_SHARE = 0.5  # host-bound above this share of the step idle (or bounded idle)
GROWTH = 1.25  # the largest batch is GPU-bound when its step grew more than this from the batch below


def ladder(batches: list[int], steps_ms: list[float]) -> list[str]:
    """The regime of each batch of one series (ascending batches, their median step times)."""
    if len(batches) < 2:
        return [UNKNOWN] * len(batches)
    if steps_ms[-1] <= GROWTH * steps_ms[-2]:
        return [HOST] * len(batches)
    top = steps_ms[-1] / batches[-1]
    return [HOST if top / (t / b) < IDLE_SHARE else GPU for b, t in zip(batches, steps_ms)]


def noise(measurements: list[dict], key: list[str]) -> float:
    """The run's own noise for one case: how far its repeated measurements (a search log's
    entries, bench/run/search.py) lie apart, over their median; 0 where it was measured once."""
    figures = sorted(m["img_per_s"] for m in measurements if m.get("key") == key and m.get("status") == "ok")
    if len(figures) < 2:
        return 0.0
    return (figures[-1] - figures[0]) / figures[len(figures) // 2]
