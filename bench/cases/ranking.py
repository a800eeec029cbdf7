"""How measured configurations are ranked, defined once for the search and the answer.

- **Estimate**: a row's median throughput (images/s, tokens/s), with the confidence interval of that median
  (bench/core/stats.py: a bootstrap over its trials and steps). Rows written before rows kept
  their steps have no interval; their p10-p90 range stands in for it (wider, so more ties).
- **Beats**: `a` beats `b` when a's interval lies wholly above b's and its median is ahead by more
  than THRESHOLD (or the run's own noise, where it measured that by repeating cases, if larger).
  Anything less is a tie, as criterion.rs reads a change (its intervals, and its noise threshold);
  ties go to the simpler configuration.
- **Stopped**: a row whose wall clock disagrees with its steps (the trials took far longer than
  their steps add up to: the process was stopped or starved outside them). Its steps do not
  describe the run, so it is left out until measured again. One slow step is no such thing: it
  is in the steps, an outlier.
- **Wide**: a row whose interval is too wide to rank by (WIDE of its median). It is ranked by that
  interval all the same (a wide interval rarely beats anything); where it overlaps a rival and the
  medians differ by what matters (MATTERS), the order is open until both are measured again,
  interleaved (bench/run/search.py).
- **Disturbed**: stopped or wide, with why.
- **Outliers** (Tukey's fences) are reported in the row, never used to throw a row away: one slow
  step in sixty moves a mean, not a median or its interval.
- **Simplicity**: ties go to the simplest configuration: fewer levers moved from what the run
  asked for, then the baseline strategy at one device (every wrapper only adds host work there),
  then the registry's order (`Strategy.order`: lower is simpler to run), then the faster median.

No torch, no pandas: rows are dicts (or anything with `[]` and `.get`).
"""
from __future__ import annotations

import math

import strategies
from bench.cases.case import Case
from bench.cases.caveats import wall_disagreement
from bench.workloads.data import rate_unit

# Rows without an interval (written before rows kept their steps): a p10-p90 spread wider than a
# quarter of the median is no measurement to rank by (docs/findings.md, finding 4).
UNSTABLE = 0.25
# A median's interval wider than this share of the median is too wide to rank by: on a quiet GPU
# a case's interval spans well under 1% (its steps' p10-p90 a few percent); host-bound steps that
# jump between two speeds, or a trial in another mode, make it wider.
WIDE = 0.10
# A difference of medians below this is no difference, however tight the intervals (criterion's
# noise threshold is 1% by default): on one 2 x H200 machine the same configuration measured by two
# searches and a listing came up to 1.6% apart (docs/search.md). A pick that turned on less would
# change from run to run.
THRESHOLD = 0.02
# Medians closer than this are no difference worth measuring again: the simpler is named either way
# (the answer's promise is the fastest within 5%).
MATTERS = 0.03


def _number(row, name):
    value = row.get(name)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def spread(row) -> float:
    """The steps' p10-p90 range over the median: how much the steps themselves vary."""
    return (row["items_per_s_p90"] - row["items_per_s_p10"]) / row["items_per_s"]


def has_interval(row) -> bool:
    return _number(row, "items_per_s_ci_lo") is not None and _number(row, "items_per_s_ci_hi") is not None


def interval(row) -> tuple[float, float]:
    """Where the row's median lies: its confidence interval, or its p10-p90 where it has none."""
    if has_interval(row):
        return float(row["items_per_s_ci_lo"]), float(row["items_per_s_ci_hi"])
    return float(row["items_per_s_p10"]), float(row["items_per_s_p90"])


def width(row) -> float:
    lo, hi = interval(row)
    return (hi - lo) / row["items_per_s"]


def beats(a, b, noise: float = 0.0) -> bool:
    """`a` faster than `b` beyond both intervals, by more than THRESHOLD and the run's measured noise."""
    return interval(a)[0] > interval(b)[1] and a["items_per_s"] > b["items_per_s"] * (1 + max(noise, THRESHOLD))


def low_end(row) -> float:
    """The slowest the row's own figures allow: its interval's low end, or lower where the wall
    clock fell below it (a stopped row's honest floor)."""
    figures = [interval(row)[0], _number(row, "wall_items_per_s")]
    return min(f for f in figures if f is not None)


def stopped(row) -> str:
    """Why the row's steps do not describe its run (its wall clock disagrees with them,
    bench/cases/caveats.py `wall_disagreement`), or ""."""
    disagreement = wall_disagreement(row)
    if disagreement is None:
        return ""
    off, against = disagreement
    return (f"its wall-clock figure ({row['wall_items_per_s']:.0f} {rate_unit(row)}) is {100 * abs(off):.0f}% off "
            f"{against}: "
            "it was stopped or starved")


def wide(row) -> str:
    """Why the row's interval is too wide to rank by, or ""."""
    if has_interval(row):
        if width(row) > WIDE:
            lo, hi = interval(row)
            return (f"the {100 * width(row):.0f}% interval of its median ({lo:.0f}-{hi:.0f} {rate_unit(row)}, over "
                    f"{100 * WIDE:.0f}%) is too wide to rank by")
        return ""
    if spread(row) > UNSTABLE:
        return (f"its p10-p90 spread is {100 * spread(row):.0f}% of the median (over {100 * UNSTABLE:.0f}%): "
                "the steps were disturbed")
    return ""


def disturbed(row) -> str:
    """Why the row must be measured again before it settles an order, or ""."""
    return stopped(row) or wide(row)


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
    """The sort key that puts the simplest configuration first (the faster of equals first)."""
    declared = strategies.info(str(row["strategy"]))
    devices = int(row.get("n_gpus") or 0) or int(row.get("n_replicas") or 1)
    one_device_baseline = devices == 1 and declared is not None and declared.baseline
    return (levers_moved(row, asked), not one_device_baseline, declared.order if declared else 99, str(row["strategy"]),
            -float(row["items_per_s"]))


def pick(rows: list, asked: dict | None = None, noise: float = 0.0) -> tuple[dict | None, list, list]:
    """The configuration to recommend among `rows` (ok rows of one hardware, model, precision,
    device count and batch): the simplest of those the fastest does not beat, never one that
    another row `outrun`s. Returns it, the
    rows it ties with (fastest first), and the stopped rows left out, each with why.

    A stopped row (its wall clock disagrees with its steps) that beats the pick from its honest
    floor (`low_end`) is faster whatever stopped it, and is named instead (the caller says so);
    where nothing else ran, nothing is named. A wide row is ranked by its interval like any
    other; `unjudged` says where the order is open."""
    usable = [r for r in rows if not stopped(r)]
    shaky = [r for r in rows if stopped(r)]
    chosen, tied = None, []
    if usable:
        fastest = max(usable, key=lambda r: (r["items_per_s"], -simplicity(r, asked)[2]))
        tied = [r for r in usable if not beats(fastest, r, noise)]
        # Never a row whose median most of another's steps outrun, however wide that one's
        # interval (the fastest is never such a row: no p10 lies above its median).
        chosen = min((r for r in tied if not outrun(r, usable, noise)), key=lambda r: simplicity(r, asked))
        tied = sorted((r for r in tied if r is not chosen), key=lambda r: -r["items_per_s"])
    ahead = [r for r in shaky if chosen is not None and clear_of(r, chosen, noise)]
    if ahead:
        chosen, tied = max(ahead, key=lambda r: r["items_per_s"]), []
    left_out = [(r, stopped(r)) for r in shaky if r is not chosen]
    return chosen, tied, left_out


def outrun(row, rows: list, noise: float = 0.0) -> bool:
    """Whether another of `rows` has its p10 above `row`'s median, its median ahead by more than
    THRESHOLD and the run's noise (as `beats` asks): nine in ten of its steps ran faster than
    `row`'s typical step, by a difference that counts (closer, two rows tie and the simpler is named)."""
    return any(other is not row and float(other["items_per_s_p10"]) > float(row["items_per_s"])
               and float(other["items_per_s"]) > float(row["items_per_s"]) * (1 + max(noise, THRESHOLD))
               for other in rows)


def clear_of(row, other, noise: float = 0.0) -> bool:
    """`row` faster than `other` beyond both intervals measured from row's honest floor
    (`low_end`): true whatever stopped row's steps."""
    return low_end(row) > interval(other)[1] and row["items_per_s"] > other["items_per_s"] * (1 + max(noise, THRESHOLD))


def unjudged(chosen: dict | None, tied: list, left_out: list) -> list:
    """The rows whose order against `chosen` is open: a tied row whose median lies more than
    MATTERS from the pick's either way (their intervals overlap, so a wide interval, the pick's
    or the other's, hides a difference that matters), and a stopped row whose median lies above
    the pick's interval. Until they are measured again the order is open."""
    if chosen is None:
        return [r for r, _ in left_out]
    open_ = [r for r in tied if abs(r["items_per_s"] / chosen["items_per_s"] - 1) > MATTERS]
    return open_ + [r for r, _ in left_out if r["items_per_s"] > interval(chosen)[1]]


def open_reason(row, chosen: dict | None) -> str:
    """Why `row` leaves the order open against `chosen` (a row of `unjudged`)."""
    if stopped(row) or chosen is None:
        return stopped(row) or "nothing else ran steadily"
    lo, hi = interval(row)
    return (f"its median is {100 * (row['items_per_s'] / chosen['items_per_s'] - 1):+.1f}%, but its interval "
            f"({lo:.0f}-{hi:.0f} {rate_unit(row)}) overlaps the pick's "
            f"({interval(chosen)[0]:.0f}-{interval(chosen)[1]:.0f})")


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
    """The run's own noise for one case: how far its repeated steady measurements (a search log's
    entries, bench/run/search.py; a disturbed one was measured again for being so) lie apart, over
    their median; 0 where it was measured once."""
    figures = sorted(m["items_per_s"] for m in measurements if m.get("key") == key and m.get("status") == "ok"
                     and not m.get("disturbed"))
    if len(figures) < 2:
        return 0.0
    return (figures[-1] - figures[0]) / figures[len(figures) // 2]
