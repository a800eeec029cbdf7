"""The answer, first: for each run, hardware, model, precision and device count, the
configuration to use at each per-GPU batch, what it gives and costs, how close the others are,
and what each lever measured in the run gained; then one line per hardware and model that a
person can act on.

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
from bench.cases import ranking, results
from bench.cases.case import Case
from bench.cases.caveats import CAPPED_PCT, MIN_STEPS_FOR_SPREAD
from bench.cases.levers import difference, settings
from bench.cases.ranking import UNSTABLE  # noqa: F401 - the report's legend states it
from bench.core.knobs import optimizer_state_words, state_copies
from bench.core.peaks import dense_peak
from bench.report.findings import efficiency_cell, rate, reference_pairs
from bench.report.frame import run_name
from bench.report.hostload import busy_line
from bench.report.labels import Legend, full, knobs
from bench.report.regime import GPU, HOST
from bench.workloads.data import unit_named, unit_of



def rate_of(r) -> str:
    """How a record's or a row's rate is written: "img/s", "tokens/s"."""
    return unit_named(r.get("unit")).rate


def heading_of(r) -> str:
    """A rate's column head for a record or a row: "images/s", "tokens/s"."""
    return unit_named(r.get("unit")).heading


def spread(row) -> float:
    return ranking.spread(row)


def devices(row) -> int:
    return int(row["n_gpus"]) if row["n_gpus"] else int(row["n_replicas"])


def where(n: int, on_gpu: bool, nnodes: int = 1) -> str:
    text = f"{n} GPU{'s' if n > 1 else ''}" if on_gpu else f"CPU x{n}"
    return text + (f" on {nnodes} hosts" if nnodes > 1 else "")


def per(r: dict) -> str:
    """What a batch is per: a GPU, or on the CPU a replica (a CPU has no MFU or device memory either)."""
    return "replica" if r["where"].startswith("CPU") else "GPU"


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
    return results.today_log(log) if isinstance(log, dict) else {}


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
        # A runner-up the survey screened ran one trial: its figure is a first look, said so.
        record.update({"runner_up": legend.short(second)
                       + (" (one trial)" if isinstance(second.get("screened"), str) and second["screened"] else ""),
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


def _verdict(r: dict) -> str:
    if r["unstable"]:  # a case that may be faster was disturbed
        return "unjudged, re-run"
    if r["runner_up"] is None:
        return ""
    return f"{r['gap_pct']:+.1f}%" + (", tie" if r["tie"] else "")


def _mfu_cell(r: dict) -> str:
    return "" if r.get("mfu") is None else f"{100 * r['mfu']:.1f}%"


def table(recs: list[dict]) -> pd.DataFrame:
    """Short cells (labels from the legend) for one group's records."""
    lines = []
    for r in recs:
        line = {f"batch/{per(r)}": r["batch_per_gpu"]}
        if r["strategy"] is None:
            oom = r["out_of_memory"]
            line.update({"recommended": "none ran" + (" (OOM)" if oom else "")})
            lines.append(line)
            continue
        speed = (r.get("no_speedup") or "") if r["speedup"] is None else f"x{r['speedup']:.2f}" + (
            f" ({efficiency_cell({'efficiency': r['efficiency'], 'efficiency_lo': r['efficiency_lo']})})"
            if r["devices"] > 1 else "") + ("*" if r["speedup_over"] else "")
        line.update({
            "recommended": r["label"] + ("" if r["recommended"] else " (unjudged)")
            + (" (disturbed)" if r.get("disturbed") and r["recommended"] else "")
            + (" (caveat)" if r.get("caveat") else ""),
            f"{heading_of(r)} (p10-p90)":
                f"{rate(r['items_per_s'])} ({rate(r['items_per_s_p10'])}-{rate(r['items_per_s_p90'])})",
            "95% CI": _interval_cell(r),
            f"vs {strategies.baseline()}": speed, **({} if per(r) == "replica" else {"MFU": _mfu_cell(r),
            "MiB/GPU": "" if r["peak_alloc_mib"] is None else f"{r['peak_alloc_mib']:.0f}"}),
            "regime": r["regime"], "runner-up": _runner_up(r), "gap": _verdict(r)})
        lines.append(line)
    return pd.DataFrame(lines).fillna("")


def rivals(r: dict) -> list[dict]:
    """The unjudged configurations of a record other than the one it shows."""
    return [x for x in r.get("unjudged") or [] if x["label"] != r["label"]]


def may_be(x: dict, r: dict) -> str:
    """What an unjudged configuration `x` may be against the record's: faster where its median is
    higher, as fast where it is lower but the intervals overlap (a median 54% lower is no "faster")."""
    return "may be faster" if x["items_per_s"] > r["items_per_s"] else "may be as fast"


def _runner_up(r: dict) -> str:
    """The next strategy; where every other was left out, which; "only one strategy" where one ran."""
    if r["runner_up"]:
        return r["runner_up"]
    if r.get("others_left_out"):
        return "no runner-up: " + ", ".join(r["others_left_out"]) + " left out (stopped or starved)"
    return "only one strategy"


def _interval_cell(r: dict) -> str:
    """The median's confidence interval, "" for a row that predates intervals."""
    if not r.get("interval_is_ci"):
        return ""
    lo, hi = r["items_per_s_ci"]
    return f"{rate(lo)}-{rate(hi)}"


def _figure(row, column: str) -> float | None:
    """A row's number, None where the row lacks it (older files, no NVML)."""
    value = row.get(column)
    return None if value is None or pd.isna(value) else float(value)


def _power(r: dict) -> str:
    """The share of the timed trials its GPUs ran held down by their power limit, where it is more
    than a brief one: the figure is the speed at that limit (bench/measure/throttle.py)."""
    share, limit = r.get("power_capped_pct"), r.get("power_limit_w")
    if share is None or share <= CAPPED_PCT:
        return ""
    # NVML's counter moves in steps: a GPU capped throughout can read a little over 100%.
    during = "throughout its trials" if share >= 100 else f"during {share:.0f}% of its trials"
    return f", at its power limit{f' of {limit:.0f} W' if limit else ''} {during}"


def _case(r: dict) -> str:
    interval = _interval_cell(r)
    return (f"`{r['label']}` ({r['precision']}, {r['where']}, {r['batch_per_gpu']}/{per(r)}): {rate(r['items_per_s'])} "
            f"{rate_of(r)} ({f'95% CI {interval}, ' if interval else ''}"
            f"p10-p90 {rate(r['items_per_s_p10'])}-{rate(r['items_per_s_p90'])})"
            + (f", x{r['speedup']:.2f} over {strategies.baseline()}" if r["speedup"] is not None else
               f", no speed-up: {r['no_speedup']} at this batch" if r.get("no_speedup") else "")
            + ("" if r.get("mfu") is None else f", MFU {100 * r['mfu']:.1f}% of {r['mfu_peak']}")
            + ("" if r["peak_alloc_mib"] is None else f", {r['peak_alloc_mib']:.0f} MiB/{per(r)}")
            + (f", {r['regime']}" if r["regime"] else "") + _power(r)
            + (f" (caveat: {r['caveat']})" if r.get("caveat") else ""))


def _short_setting(setting: str) -> str:
    return setting.replace("execution=", "").replace(":reduce-overhead", " reduce-overhead")


def _of_strategy(label: str | None, strategy: str) -> bool:
    return bool(label) and (label == strategy or label.startswith(strategy + " ("))


def lever_lines(recs: list[dict]) -> list[str]:
    """Per batch: each lever measured on the recommended strategy, its gain and fate, what it
    declined and why, and what the search did not try and why."""
    out = []
    for r in recs:
        if r["strategy"] is None:
            continue
        mine = [lever for lever in r.get("levers", []) if _of_strategy(lever.get("on"), r["strategy"])]
        skipped = [n for n in r.get("not_tried", []) if _of_strategy(n.get("on"), r["strategy"])]
        if not (mine or skipped):
            continue
        parts = []
        for lever in (measured for measured in mine if measured.get("gain") is not None):
            fate = "kept" if lever.get("kept") else str(lever.get("verdict", "")).replace("dropped: ", "dropped, ")
            parts.append(f"{_short_setting(lever['lever'])} x{lever['gain']:.2f} on `{lever['on']}` ({fate})")
        declined = sorted({f"{_short_setting(lever['lever'])} ({lever['verdict'].replace('declined: ', '')})"
                           for lever in mine if lever.get("gain") is None})
        line = f"{r['batch_per_gpu']}/{per(r)}, {r['where']}: " + ("; ".join(parts) if parts else "no lever measured")
        if declined:
            line += "; declined: " + "; ".join(declined)
        if skipped:
            whys = sorted({n["why"] for n in skipped})
            line += f"; not tried: {', '.join(_short_setting(n['lever']) for n in skipped)} ({'; '.join(whys)})"
        out.append(line)
    return out


def search_lines(path: str, name: str | None = None) -> list[str]:
    """How a search spent its budget: its phases with their cases and seconds, what it measured
    again and why; [] for a plain sweep. `path`: the results file; `name`: the run as shown."""
    log = search_log(str(path))
    if not log:
        return []
    source = name or run_name(path)
    spent: dict[str, list] = {}
    for p in log.get("phases", []):
        cases_s = spent.setdefault(p["phase"], [0, 0.0])
        cases_s[0] += p["cases"]
        cases_s[1] += p["seconds"]
    phases = ", ".join(f"{name} {n} case(s) in {secs:.0f} s" for name, (n, secs) in spent.items())
    lines = [f"Search of {source}: budget {log.get('budget_s', 0) / 60:g} min, spent "
             f"{log.get('spent_s', 0) / 60:.1f} min ({phases})."]
    for final in log.get("finals", []):
        g = final.get("group", {})
        where = f"{g.get('model')} {g.get('precision')} x{g.get('devices')} at {g.get('batch_per_gpu')}/GPU"
        order = " then ".join(f"`{c}`" for c in final.get("order", []))
        lines.append(f"Finals, {where}: {final.get('verdict')}" + (f" ({order})" if order else "") + ".")
    return lines


def _ties(r: dict) -> str:
    """What the recommendation won over by being simpler, and what it could not weigh."""
    parts = []
    if r.get("fastest"):
        f = r["fastest"]
        parts.append(f"`{r['label']}` measured {f['pick_vs_fastest_pct']:+.1f}% against `{f['label']}` (within the "
                     "intervals"
                     + (f" and the run's {r['noise_pct']:.1f}% noise" if r.get("noise_pct") else "")
                     + "): the simpler configuration is named")
    if r.get("disturbed") and r["recommended"]:
        parts.append(f"its own run was disturbed ({r['disturbed']}), but even its floor beats every other "
                     "configuration's interval")
    for x in r.get("unjudged", []):
        if x["label"] != r["label"]:
            parts.append(f"`{x['label']}` measured {rate(x['items_per_s'])} {rate_of(r)} and {may_be(x, r)} "
                         f"({x['why']}): "
                         "re-run it")
    return "; ".join(parts)


def _avoid(run: pd.DataFrame, recs: list[dict]) -> list[str]:
    ok = run[run["status"] == "ok"]
    out = []
    pairs = reference_pairs(ok)
    slow = [(r, x) for r, x in pairs if x < 0.9]
    if slow:
        ratios = [x for _, x in slow]
        batches = ", ".join(str(b) for b in sorted({int(r["batch_per_gpu"]) for r, _ in slow}))
        text = (f"avoid {', '.join(sorted({r['strategy'] for r, _ in slow}))} at {batches}/GPU: "
                f"{100 * min(ratios):.0f}-{100 * max(ratios):.0f}% of "
                f"{strategies.reference()}'s throughput on the same GPUs (replicas in threads, one process)")
        trap = [(on, off) for _, g in ok[ok["strategy"].isin({r["strategy"] for r, _ in slow})].groupby(
                    ["strategy", "precision", "n_gpus", "batch_per_gpu"])
                for on in g[g["cudnn_benchmark"].astype(str).str.lower() == "true"]["items_per_s"][:1]
                for off in g[g["cudnn_benchmark"].astype(str).str.lower() != "true"]["items_per_s"][:1]]
        if trap:
            worst = max(off / on for on, off in trap)
            text += (f", and never with cudnn.benchmark on: up to {worst:.0f}x slower (cuDNN's plan cache is "
                     "per thread, so every step autotunes again)")
        out.append(text)
    known = [r for r in recs if r.get("regime") in (HOST, GPU)]
    host = sorted({r["batch_per_gpu"] for r in known} - {r["batch_per_gpu"] for r in known if r["regime"] == GPU})
    busy = sorted({r["batch_per_gpu"] for r in recs
                   if r.get("regime") == GPU and host and r["batch_per_gpu"] > host[-1]})
    if host:
        out.append(f"at {', '.join(map(str, host))}/GPU every fastest case is host-bound (the GPU idles more than "
                   "half the step): differences there are host costs; "
                   + (f"compare at {busy[0]}/GPU or above" if busy else "use larger batches")
                   + " or a whole-step CUDA graph")
    return out


def actions(run: pd.DataFrame, recs: list[dict]) -> str:
    """One line for one run's hardware and model: the configuration to use, the one at the
    largest batch that fits, what the recommendation set aside and why, and what to avoid."""
    done = [r for r in recs if r["strategy"] is not None]
    if not done:
        return "nothing ran ok in this run."
    stable = [r for r in done if r["recommended"]]
    parts = []
    if stable:
        best = max(stable, key=lambda r: (r["items_per_s"], r["label"]))
        parts.append(f"Recommended: {_case(best)}" + (f"; {_ties(best)}" if _ties(best) else "") + ".")
    else:
        best = max(done, key=lambda r: (r["items_per_s"], r["label"]))
        if best.get("unjudged") and best["label"] not in {x["label"] for x in best["unjudged"]}:
            parts.append(f"Unjudged: the simplest configuration nothing beats is {_case(best)}; "
                         + "; ".join(f"`{x['label']}` measured {rate(x['items_per_s'])} {rate_of(best)} and "
                                     f"{may_be(x, best)} ({x['why']})" for x in best["unjudged"])
                         + ": re-run before choosing.")
        else:
            parts.append(f"No configuration can be recommended: every candidate's run was stopped or starved (fastest "
                         f"measured: {_case(best)}, unstable); re-run.")
    unsettled = [r for r in done if r is not best and r["unstable"]]
    alone = [r for r in unsettled if not rivals(r)]  # nothing else there to rank it against
    if len(alone) < len(unsettled):
        cells = sorted({(r["batch_per_gpu"], per(r), r["where"]) for r in unsettled if r not in alone})
        parts.append("Unjudged at " + ", ".join(f"{b}/{unit} on {w}" for b, unit, w in cells)
                     + ": a configuration that may be faster there could not be ranked; "
                       "re-run before trusting the order.")
    if alone:
        cells = sorted({(r["batch_per_gpu"], per(r), r["where"]) for r in alone})
        parts.append("At " + ", ".join(f"{b}/{unit} on {w}" for b, unit, w in cells)
                     + ": the one configuration measured was stopped or starved; re-run before trusting its figure.")
    largest = max(r["batch_per_gpu"] for r in done)
    # The fastest there, named or not (a recommended `single` at 1.8 img/s stood for a batch where
    # ddp, unjudged, ran at 24).
    at = max((r for r in done if r["batch_per_gpu"] == largest),
             key=lambda r: (r["items_per_s"], r["recommended"], r["label"]))
    oom = sorted({r["batch_per_gpu"] for r in recs if r["strategy"] is None and r["out_of_memory"]})
    if at is not best:
        parts.append(f"Largest batch that ran, {largest}/{per(at)}" + (f" (OOM at {oom[0]})" if oom else "")
                     + f": {_case(at)}" + ("" if at["recommended"] else ", unstable") + ".")
    params = run["parameters"].dropna() if "parameters" in run else pd.Series(dtype=float)
    if len(params) and at["peak_alloc_mib"]:
        copies = 2 + state_copies(at.get("optimizer"))  # weights, gradients and what the optimiser holds
        state = copies * 4 * float(params.iloc[0]) / 2**20
        parts.append(f"Model state (fp32 weights, gradients, {optimizer_state_words(at.get('optimizer'))} of "
                     f"{float(params.iloc[0]) / 1e6:.2f} M parameters) is {state:.0f} MiB of its "
                     f"{at['peak_alloc_mib']:.0f} MiB per GPU (replicated; a strategy that shards it holds less); "
                     "the rest is activations and workspace.")
    if not any(r.get("searched") for r in done):
        parts.append("Only the configurations this run measured are compared: `bench run --search` also tries the "
                     "executions, the optimiser's kernels, the memory format and strategy options on the leaders.")
    if "notes" in run:
        # A note several strategies share is said once, naming them all.
        by_note: dict[str, list[str]] = {}
        for r in run.to_dict("records"):
            if isinstance(r.get("notes"), str) and r["notes"] and r["strategy"] not in by_note.get(r["notes"], []):
                by_note.setdefault(r["notes"], []).append(r["strategy"])
        order = {s: i for i, s in enumerate(strategies.names())}
        parts += [f"{', '.join(f'`{n}`' for n in sorted(names, key=lambda n: (order.get(n, 99), n)))}: {note}."
                  for note, names in sorted(by_note.items(), key=lambda kv: min(order.get(n, 99) for n in kv[1]))]
    avoid = _avoid(run, done)
    if avoid:
        text = "; ".join(avoid)
        parts.append(text[0].upper() + text[1:] + ".")
    return " ".join(parts)


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
