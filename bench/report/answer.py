"""The answer, first: for each run, hardware, model, precision and device count, the
configuration to use at each per-GPU batch, what it gives and costs, how close the others are,
and what each lever measured in the run gained, as one record per batch (`records`; `to_json`
for scripts). The table and the lines a person can act on are made of these records in
bench/report/answer_text.py.

Only cases of the same run (results file) are compared: a figure from another sweep, on a
machine then busier or idler, would fake a difference. At one device the baseline (`single`)
competes like any other strategy. The ranking rules are bench/cases/ranking.py's: each row's
median with its confidence interval; among the configurations the fastest does not beat beyond
both intervals (and beyond the run's own measured noise, where a search repeated cases) the
simplest is recommended; a row whose process was stopped or starved is left out (with why) until
it is measured again; where a configuration ahead by what matters overlaps the pick, the order is
open (unjudged), and said so. A search's log (its levers,
what it kept, dropped or did not try, bench/run/search.py) is read from the results file.
No torch.
"""
from __future__ import annotations

import functools
import json
import os
from typing import NamedTuple

import pandas as pd

import strategies
from bench.cases import ranking, results, schema
from bench.cases.case import Case
from bench.cases.caveats import MIN_STEPS_FOR_SPREAD
from bench.cases.levers import difference, settings
from bench.cases.ranking import UNSTABLE  # noqa: F401 - the report's legend states it
from bench.core.peaks import dense_peak
from bench.report.frame import run_name
from bench.report.hostload import busy_line
from bench.report.labels import Legend, full, knobs
from bench.workloads.data import unit_of


def spread(row) -> float:
    return ranking.spread(row)


def devices(row) -> int:
    return int(row["n_gpus"]) if row["n_gpus"] else int(row["n_replicas"])


def where(n: int, on_gpu: bool, nnodes: int = 1) -> str:
    text = f"{n} GPU{'s' if n > 1 else ''}" if on_gpu else f"CPU x{n}"
    return text + (f" on {nnodes} hosts" if nnodes > 1 else "")


def groups(runs: pd.DataFrame):
    """((run, hardware, model, precision, devices, on GPU, hosts), rows) in a stable order."""
    frame = runs.assign(_devices=[devices(r) for r in runs.to_dict("records")],
                        _gpu=runs["n_gpus"].fillna(0) > 0,
                        _nnodes=(runs["nnodes"].fillna(1).astype(int) if "nnodes" in runs else 1))
    keys = ["source", "hardware", "model", "precision", "_devices", "_gpu", "_nnodes"]
    for key, group in frame.groupby(keys, sort=True):
        yield key, group.drop(columns=["_devices", "_gpu", "_nnodes"])


def search_log(source: str) -> dict:
    """The search section of a results file (bench/run/search.py), {} for a plain sweep."""
    try:
        stat = os.stat(source)
    except OSError:
        return {}
    return _search_log(source, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=64)
def _search_log(source: str, mtime_ns: int, size: int) -> dict:
    log = results.sections(source).get("search")
    return schema.today_log(log) if isinstance(log, dict) else {}


def _in_group(entry_group: dict, model, precision, batch, n_replicas) -> bool:
    return (entry_group.get("model"), entry_group.get("precision"), entry_group.get("batch_per_gpu"),
            entry_group.get("devices")) == (model, precision, int(batch), int(n_replicas))


def not_measured(run: pd.DataFrame) -> dict[str, list[str]]:
    """The strategies a run measured nowhere, by why (reason -> strategies): the whole reason
    where it is short (it may name the fix), else its first clause (to the first colon or
    semicolon: a bracket inside it explains, "NVIDIA H200 (compute capability 9.0) is newer ...")."""
    import re

    ran = set(run[run["status"] == "ok"]["strategy"])
    absent: dict[str, list[str]] = {}
    for r in run[(run["status"] == "skipped") & ~run["strategy"].isin(ran)].to_dict("records"):
        # "not measured: why" says the line's own head again: its why is the reason.
        reason = re.sub(r"^not measured: ", "", str(r.get("reason") or ""))
        reason = reason if len(reason) <= 80 else re.split(r": |; ", reason)[0]
        if r["strategy"] not in absent.setdefault(reason, []):
            absent[reason].append(r["strategy"])
    return absent


class Baselines(NamedTuple):
    """A run's baseline rows per (precision, batch, model, hardware)."""
    steady: dict[tuple, dict]  # the fastest steady one: what a speed-up divides by
    not_steady: dict[tuple, str]  # where none is steady: why ("disturbed", "OOM", "failed")


def _cell(r) -> tuple:
    return r["precision"], r["batch_per_gpu"], r["model"], r["hardware"]


def baselines(run: pd.DataFrame) -> Baselines:
    """The fastest steady baseline row of a run per (precision, batch, model, hardware): what a
    speed-up divides by where the top row has no baseline with its own knobs; and why there is
    none where one ran but is not steady. Built once per run (filtering the run for every record
    made a file of 20,000 rows take minutes)."""
    steady: dict[tuple, dict] = {}
    not_steady: dict[tuple, str] = {}
    for r in run[run["strategy"] == strategies.baseline()].to_dict("records"):
        key = _cell(r)
        if r["status"] != "ok":
            if r["status"] in ("oom", "error", "timeout"):
                not_steady.setdefault(key, "OOM" if r["status"] == "oom" else "failed")
        elif ranking.disturbed(r):
            not_steady[key] = "disturbed"  # never over noise; said where a speed-up is missing
        elif key not in steady or r["items_per_s"] > steady[key]["items_per_s"]:
            steady[key] = r
    return Baselines(steady, not_steady)


def no_speedup(top, base_of: Baselines) -> str:
    """Why the top row has no speed-up over the baseline (short, for a table cell), or ""."""
    key = _cell(top)
    if top["strategy"] == strategies.baseline() or key in base_of.steady:
        return ""
    why = base_of.not_steady.get(key)
    return f"{strategies.baseline()} {why}" if why else f"no {strategies.baseline()}"


def _speedup(top, base_of: Baselines) -> tuple[float | None, float | None, str]:
    """Speed-up and efficiency over the baseline of the same run: with the same knobs where
    measured, else over the fastest baseline case at that batch (named)."""
    if pd.notna(top.get("speedup")):
        return float(top["speedup"]), float(top["efficiency"]), ""
    best = base_of.steady.get(_cell(top))
    if best is None:
        return None, None, ""
    x = top["items_per_s"] / best["items_per_s"]
    return float(x), float(x / devices(top)), full(best)


def mfu(row) -> tuple[float | None, str]:
    """The share of the GPU's dense peak the case reaches, and the peak it is taken against."""
    flops = row.get("flops_per_item")
    if row.get("device") != "cuda" or flops is None or pd.isna(flops):
        return None, ""
    peak = dense_peak(row.get("gpu_name"), str(row["precision"]), row.get("tf32"))
    if peak is None:
        return None, ""
    per_gpu = float(flops) * float(row["items_per_s"]) / devices(row) / 1e12
    return per_gpu / peak[0], peak[1]


def _measured_levers(log: dict, rows: list[dict], top: dict, group: tuple) -> list[dict]:
    """Each lever's measured gain: the search's own record where the run was a search, else
    every pair of the top strategy's rows that differ in one setting alone."""
    if log:
        return [{k: e.get(k) for k in ("on", "lever", "gain", "verdict", "kept", "items_per_s", "base_items_per_s")}
                for e in log.get("levers", []) if _in_group(e.get("group", {}), *group)]
    same = [r for r in rows if r["strategy"] == top["strategy"]]
    cases = [Case.from_row(dict(r)) for r in same]
    # What the run asked for, where it did not say: each setting's most common value among the rows,
    # a tie going to the first row's (the grid's order: eager before compile, the sweep's own knobs).
    counts = pd.Series([s for c in cases for s in settings(c)]).value_counts()
    first = set(settings(cases[0]))

    def usual(setting: str) -> tuple[int, bool]:
        return int(counts.get(setting, 0)), setting in first

    out = []
    for i, (a, ra) in enumerate(zip(cases, same)):
        for b, rb in zip(cases[i + 1:], same[i + 1:]):
            moved = difference(a, b)
            if len(moved) != 1:
                continue
            back = difference(b, a)[0]
            if usual(moved[0]) == usual(back):
                continue  # neither is what the run asked for: no lever to speak of
            base, lever = (ra, rb) if usual(back) > usual(moved[0]) else (rb, ra)
            (setting,) = difference(Case.from_row(dict(base)), Case.from_row(dict(lever)))
            gain = lever["items_per_s"] / base["items_per_s"]
            verdict = ("beats the intervals" if ranking.beats(lever, base)
                       else "slower beyond the intervals" if ranking.beats(base, lever) else "within the intervals")
            out.append({"on": full(base), "lever": setting, "gain": round(gain, 4), "verdict": verdict,
                        "kept": verdict == "beats the intervals", "items_per_s": float(lever["items_per_s"]),
                        "base_items_per_s": float(base["items_per_s"])})
    return out


def _record(key, batch, at: list[dict], base_of: Baselines, legend: Legend) -> dict:
    """The answer at one batch of one group: `at` holds the group's rows at that batch."""
    source, hardware, model, precision, n, on_gpu, nnodes = key
    rows = [r for r in at if r["status"] == "ok"]
    record = {"run": run_name(source), "source": str(at[0].get("path", source)),
              "hardware": hardware, "model": model,
              "precision": precision, "devices": int(n), "where": where(int(n), bool(on_gpu), int(nnodes)),
              "batch_per_gpu": int(batch), "out_of_memory": sorted({r["strategy"] for r in at if r["status"] == "oom"}),
              "unit": unit_of(next((r for r in at if r["status"] == "ok"), at[0])).name,
              "strategy": None, "searched": False}
    if not rows:
        return record
    n_replicas = int(rows[0].get("n_replicas") or n)
    log = search_log(str(rows[0].get("path") or source))
    group = (model, precision, batch, n_replicas)
    noise = _noise(log, rows)
    chosen, tied, left_out = ranking.pick(rows, log.get("asked") if log else None, noise)
    fastest = max(rows, key=lambda r: r["items_per_s"])
    open_ = ranking.unjudged(chosen, tied, left_out)
    # Unjudged: a row that may be faster could not be ranked against the pick. The answer
    # recommends neither: it shows the pick's figures, marked unjudged, beside the other's.
    top = chosen if chosen is not None else max(open_, key=lambda r: r["items_per_s"])
    shaky = ranking.stopped(top)
    ci_lo, ci_hi = ranking.interval(top)
    speedup, efficiency, over = _speedup(top, base_of)
    missing = "" if speedup is not None else no_speedup(top, base_of)
    share, peak = mfu(top)
    record.update({
        "strategy": top["strategy"], "config": knobs(top), "label": legend.short(top),
        "optimizer": Case.from_row(dict(top)).optimizer,
        "variant": top.get("variant") or "", "recommended": chosen is not None and not open_, "searched": bool(log),
        "disturbed": shaky,
        "unjudged": [{"label": legend.short(r), "items_per_s": float(r["items_per_s"]),
                      "items_per_s_p10": float(r["items_per_s_p10"]), "why": ranking.open_reason(r, chosen)}
                     for r in open_],
        "items_per_s": float(top["items_per_s"]), "items_per_s_p10": float(top["items_per_s_p10"]),
        "items_per_s_p90": float(top["items_per_s_p90"]),
        # The interval rankings compare (the p10-p90 where the row predates intervals).
        # Shown only where the steps are enough for a spread (a one-step run's interval is its one step).
        "items_per_s_ci": [float(ci_lo), float(ci_hi)],
        "interval_is_ci": ranking.has_interval(top) and (_figure(top, "n_timed_steps") or MIN_STEPS_FOR_SPREAD)
        >= MIN_STEPS_FOR_SPREAD,
        "outliers": str(top.get("outliers") or "") if pd.notna(top.get("outliers")) else "",
        "speedup": speedup, "efficiency": efficiency, "no_speedup": missing,
        "speedup_over": over, "efficiency_lo": top.get("efficiency_lo") if not over else None,
        "peak_alloc_mib": None if pd.isna(top.get("peak_alloc_mib")) else float(top["peak_alloc_mib"]),
        "regime": top.get("regime") or "", "notes": str(top.get("notes") or "") if pd.notna(top.get("notes")) else "",
        "caveat": str(top.get("caveat") or "") if pd.notna(top.get("caveat")) else "",
        "power_capped_pct": _figure(top, "power_capped_pct"), "power_limit_w": _figure(top, "power_limit_w"),
        "mfu": share, "mfu_peak": peak, "noise_pct": round(100 * noise, 1),
        "fastest": None, "ties": [legend.short(r) for r in tied],
        "left_out": [{"label": legend.short(r), "items_per_s": float(r["items_per_s"]), "why": why}
                     for r, why in left_out if r is not top],
        "levers": _measured_levers(log, rows, top, group),
        "not_tried": [{"on": e.get("on"), "lever": e.get("lever"), "why": e.get("why")}
                      for e in log.get("not_tried", []) if _in_group(e.get("group", {}), *group)],
        "runner_up": None, "runner_up_config": None, "gap_pct": None, "tie": False,
        # The order cannot be read where a configuration that may be faster could not be ranked.
        "unstable": chosen is None or bool(open_)})
    if fastest is not top and not ranking.stopped(fastest):
        record["fastest"] = {"label": legend.short(fastest), "items_per_s": float(fastest["items_per_s"]),
                             # The pick against it, as the table's gap column reads a pair (negative).
                             "pick_vs_fastest_pct": round(100 * (top["items_per_s"] / fastest["items_per_s"] - 1), 1)}
    others = sorted((r for r in rows if r["strategy"] != top["strategy"] and not ranking.stopped(r)),
                    key=lambda r: -r["items_per_s"])
    record["others_left_out"] = sorted({str(r["strategy"]) for r, _ in left_out if r["strategy"] != top["strategy"]})
    if others:
        second = others[0]
        # A runner-up the survey stopped after its short trial: its figure is a first look, said so.
        record.update({"runner_up": legend.short(second)
                       + (" (a short trial)" if isinstance(second.get("screened"), str) and second["screened"] else ""),
                       "runner_up_config": knobs(second),
                       "runner_up_items_per_s": float(second["items_per_s"]),
                       "gap_pct": round(100 * (top["items_per_s"] / second["items_per_s"] - 1), 1),
                       "tie": not ranking.beats(top, second, noise) and not ranking.beats(second, top, noise)})
    return record


def _noise(log: dict, rows: list[dict]) -> float:
    """The largest spread between repeated measurements of one case of this group in the run
    (a search's finals measure each candidate twice or more); 0 where nothing was repeated."""
    if not log:
        return 0.0
    keys = [list(map(str, Case.from_row(dict(r)).key())) for r in rows]
    return max((ranking.noise(log.get("measurements", []), k) for k in keys), default=0.0)


def records(runs: pd.DataFrame, legend: Legend | None = None) -> list[dict]:
    """The answer, one record per run, hardware, model, precision, device count and batch."""
    legend = legend or Legend()
    out = []
    runs = runs.reset_index(drop=True)
    # Rows as dicts once (a DataFrame's rows made into dicts group by group took most of the time
    # a file of 20,000 rows needed), grouped by their positions; the baselines once per run.
    every = runs.to_dict("records")
    base_of = {source: baselines(run) for source, run in runs.groupby("source", sort=False)}
    # What the whole run says beside each answer: the busy host, the strategies it measured nowhere.
    around = {source: {"host_busy": busy_line(run.to_dict("records"), f"run {run_name(source)}"),
                       "not_measured": [{"strategies": who, "why": why} for why, who in not_measured(run).items()]}
              for source, run in runs.groupby("source", sort=False)}
    for key, group in groups(runs):
        for batch, at in sorted(group.groupby("batch_per_gpu", sort=False).indices.items()):
            record = _record(key, batch, [every[group.index[i]] for i in at], base_of[key[0]], legend)
            out.append({**record, **around[key[0]]})
    return out


def _figure(row, column: str) -> float | None:
    """A row's number, None where the row lacks it (older files, no NVML)."""
    value = row.get(column)
    return None if value is None or pd.isna(value) else float(value)


def _plain(value):
    """JSON's values: numbers without NaN (null), numpy scalars as Python's."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def to_json(recs: list[dict]) -> str:
    return json.dumps(_plain(recs), indent=1, sort_keys=True)
