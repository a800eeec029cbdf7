"""Regression tracking: compare a current results file with a baseline.

Per matched case: the change in throughput (images/s, tokens/s) and in peak memory, and a verdict.

Noise-aware rules (thresholds are per metric):
- Throughput of a multi-device strategy is judged by its ratio to `single` at the same
  per-GPU batch *measured in the same run*: a slower shared machine slows both and the
  ratio holds, while a slower strategy moves it. `single` itself, which has no in-run
  reference, is judged on absolute throughput.
- A drop counts only if it exceeds the threshold *and* the spread measured in the runs:
  the effective threshold is max(threshold, noise_factor x the relative p10-p90 width,
  the larger of the two runs'; for a ratio, the two cases' widths in quadrature), and
  for absolute throughput the p10-p90 ranges must not overlap.
- Peak memory (GPU runs) is deterministic enough to be judged on its own threshold.
- A case that was ok and now is oom/error/timeout is a regression.
- With several current runs, or several runs of the baseline (--baseline-repeat), every current
  run is compared with every baseline run; a regression stands unless one of those comparisons
  measured the case and saw none (`confirmed`).
- Work counters (bench/measure/counters.py: operator calls, kernel launches, host synchronisations,
  collectives and their elements, allocated memory per step) are deterministic: any rise
  is a regression, exactly (allocated memory within 1%). Kernel launches and allocated
  memory of a GPU case with cuDNN autotuning on are not (each worker picks its own
  convolution kernels) and are left unjudged there; so are host syncs between a GPU row counted
  with the profiler's own synchronisation (before `counters_scope`) and one without, saying so.
  `--judge counters` (shared CPUs)
  judges only these, peak memory and status changes, and shows timing unjudged.
Cases present in only one file, or measured on different hardware, are listed and
never compared (unless --across-hardware, which then compares in-run ratios alone); a
skipped case present only in the current file is `skipped`, not new. Cases measured with
another warm-up, step or trial count than their baseline are compared and say so.
A current row without a work counter that its baseline row has is `unusable`: a counter
that cannot be read is never a pass.

Exit status: 0 pass, 1 regression, 2 unusable input.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import strategies
from bench.measure import counters
from bench.cases import fileio, results
from bench.cases.case import Case, hardware, identity
from bench.workloads.data import unit_of

@dataclass
class Thresholds:
    slowdown: float = 0.10  # fraction of the throughput (or of the ratio to single)
    memory_growth: float = 0.10  # fraction of peak allocated memory
    noise_factor: float = 1.0  # times the measured relative p10-p90 width


def baseline_for(rows: list[dict], folder) -> "Path":
    """The baseline kept for the hardware of `rows`: results/baselines/<slug of GPU model>.json."""
    import re
    from pathlib import Path

    kinds = sorted({hardware(r) for r in rows})
    if len(kinds) != 1:
        raise results.ResultsError(f"results span several kinds of hardware ({', '.join(kinds)}); name the baseline")
    path = Path(folder) / (re.sub(r"[^a-z0-9]+", "-", kinds[0].lower()).strip("-") + ".json")
    if not path.exists():
        raise results.ResultsError(f"{path}: no baseline for {kinds[0]}; make one with "
                                   f"`python -m bench run ... --out {path}`")
    return path


def _key(row: dict) -> tuple:
    return identity(row)[1:]


def _width(row: dict) -> float:
    """Relative p10-p90 width of a case's throughput."""
    return (row["items_per_s_p90"] - row["items_per_s_p10"]) / row["items_per_s"]


def _single_of(rows: list[dict], row: dict) -> dict | None:
    """The baseline strategy's ok row of the same run that `row` is divided by."""
    want = Case.from_row(row).baseline_key()
    for r in rows:
        if r["strategy"] == strategies.baseline() and r["status"] == "ok" and hardware(r) == hardware(row) \
                and Case.from_row(r).baseline_key() == want:
            return r
    return None


def describe_case(row: dict) -> str:
    case = Case.from_row(row)
    knobs = case.variant()
    return case.label() + (f" [{knobs}]" if knobs else "")


def compare(baseline: list[dict], current: list[dict], th: Thresholds, across_hardware: bool = False,
            ratios_only: bool = False, judge_timing: bool = True) -> list[dict]:
    """Verdicts per case. `ratios_only` judges throughput by in-run ratios alone (for shared
    machines whose speed drifts between runs); absolute changes are then shown, not judged.
    With `judge_timing` off (shared CPUs), timing is shown and only the work counters, peak
    memory and status changes are judged."""
    baseline, current = results.latest(baseline), results.latest(current)  # duplicates: the latest ok row wins
    base_by_key = {_key(r): r for r in baseline}
    cur_by_key = {_key(r): r for r in current}
    verdicts = []
    for key, cur in cur_by_key.items():
        base = base_by_key.get(key)
        entry = {"case": describe_case(cur), "verdict": "pass", "why": [], "rate_change": None, "mem_change": None,
                 "ratio_change": None}
        verdicts.append(entry)
        if base is None:
            if cur["status"] == "skipped":  # not run, so nothing new was measured
                entry.update(verdict="skipped", why=[f"only in the current file, not run: {cur.get('reason')}"])
            else:
                entry.update(verdict="new", why=["only in the current file"
                                                 + ("" if cur["status"] == "ok" else f", {cur['status']}")])
            continue
        if (differs := protocol_difference(base, cur)):
            entry["protocol"] = differs
        same_hw = hardware(base) == hardware(cur)
        if not same_hw and not (across_hardware or ratios_only):
            entry.update(verdict="not compared", why=[f"different hardware: {hardware(base)} vs {hardware(cur)}"])
            continue
        if base["status"] != "ok" or cur["status"] != "ok":
            if base["status"] == "ok":
                entry.update(verdict="regression", why=[f"was ok, now {cur['status']}: {cur.get('reason')}"])
            elif cur["status"] == "ok":
                entry.update(verdict="improved", why=[f"was {base['status']}, now ok"])
            else:
                entry.update(verdict="not compared", why=[f"{base['status']} in both"])
            continue

        unreadable = _missing_counters(base, cur) if same_hw else []
        if unreadable:
            entry.update(verdict="unusable", why=[f"the current row has no {', '.join(unreadable)} where the baseline "
                                                  "has: a counter that cannot be read is never a pass"])
            continue
        timing_regressed, timing_why = _judge_timing(entry, base, cur, baseline, current, th, ratios_only, same_hw)
        counter_why = _judge_counters(base, cur) if same_hw else []
        entry["why"] += [f"{name.replace('_', ' ')} not judged: one row counts the profiler's own synchronisation "
                         "(counted before counters_scope); record the baseline again" for name in counters.COUNTERS
                         if same_hw and base.get(name) is not None and cur.get(name) is not None
                         and not counters.comparable(name, base, cur)]
        if judge_timing:
            entry["why"] += timing_why
            if timing_regressed:
                entry["verdict"] = "regression"
            elif timing_regressed is None:
                entry["verdict"] = "not judged"
        else:
            entry["why"] += [f"timing shown, not judged: {w}" for w in timing_why if "no in-run reference" not in w]
        if counter_why:
            entry["verdict"] = "regression"
            entry["why"] = counter_why + entry["why"]
        elif not judge_timing and not any(base.get(c) is not None for c in counters.COUNTERS):
            entry["verdict"] = "not judged"
            entry["why"].append("the baseline has no work counters: refresh it")
        if base.get("peak_alloc_mib") and cur.get("peak_alloc_mib") and same_hw:
            entry["mem_change"] = cur["peak_alloc_mib"] / base["peak_alloc_mib"] - 1
            if entry["mem_change"] > th.memory_growth:
                entry["verdict"] = "regression"
                entry["why"].append(f"peak memory grew {100 * entry['mem_change']:.1f}% ({base['peak_alloc_mib']:.0f} "
                                    f"-> {cur['peak_alloc_mib']:.0f} MiB; allowed {100 * th.memory_growth:.0f}%)")
    for key, base in base_by_key.items():
        if key not in cur_by_key:
            verdicts.append({"case": describe_case(base), "verdict": "missing", "why": ["only in the baseline"],
                             "rate_change": None, "mem_change": None, "ratio_change": None})
    for entry in verdicts:
        if entry.get("protocol"):
            entry["why"].append(f"measured differently: {entry['protocol']}")
    return verdicts


# The measuring protocol of a row: a median of 3 steps after no warm-up is not the median of
# 20 steps after 10, whatever the code did.
PROTOCOL = ("warmup", "steps", "trials")


def protocol(row: dict) -> dict:
    """What ran: a row a search's survey stopped after its short first trial (`screened`) keeps the
    protocol asked for in its warmup/steps/trials, but measured one trial of `n_timed_steps`."""
    if row.get("screened") and row.get("n_timed_steps"):
        return {"warmup": row.get("warmup"), "steps": row["n_timed_steps"], "trials": 1}
    return {name: row.get(name) for name in PROTOCOL}


def protocol_difference(base: dict, cur: dict) -> str:
    """'warmup 3 -> 1, steps 6 -> 2' where the two rows were measured differently, else ''."""
    before, after = protocol(base), protocol(cur)
    return ", ".join(f"{name} {before[name]} -> {after[name]}" for name in PROTOCOL
                     if before[name] is not None and after[name] is not None and before[name] != after[name])


# An allowance this wide is no judgement: a case 90% slower passed a noise allowance of over 100% on
# a busy host. The spread that asks for it says the run cannot tell; it is not judged, and says why.
MAX_ALLOWANCE = 0.5


def _judge_timing(entry, base, cur, baseline, current, th, ratios_only, same_hw) -> tuple[bool | None, list[str]]:
    """(regressed, reasons) from throughput; None where there is nothing to judge it by."""
    regressed, why, allowed, change = _judge_timing_within(entry, base, cur, baseline, current, th, ratios_only,
                                                           same_hw)
    if regressed is False and allowed >= MAX_ALLOWANCE and change < 0:
        return None, [f"too noisy to judge: its p10-p90 spread allows {100 * allowed:.0f}% (at most "
                      f"{100 * MAX_ALLOWANCE:.0f}% judges anything); re-run on a quiet machine"]
    return regressed, why


def _judge_timing_within(entry, base, cur, baseline, current, th, ratios_only, same_hw
                         ) -> tuple[bool | None, list[str], float, float]:
    """(regressed, reasons, the drop allowed, the change judged)."""
    entry["rate_change"] = cur["items_per_s"] / base["items_per_s"] - 1
    allowed = max(th.slowdown, th.noise_factor * max(_width(base), _width(cur)))
    base_single, cur_single = _single_of(baseline, base), _single_of(current, cur)
    if cur["strategy"] != strategies.baseline() and base_single and cur_single:
        # Same-run ratio: what this strategy gives over single on the same machine, same run.
        base_ratio = base["items_per_s"] / base_single["items_per_s"]
        cur_ratio = cur["items_per_s"] / cur_single["items_per_s"]
        entry["ratio_change"] = cur_ratio / base_ratio - 1
        # A ratio of two measurements: their spreads add in quadrature.
        spread = math.hypot(max(_width(base), _width(cur)), max(_width(base_single), _width(cur_single)))
        allowed = max(th.slowdown, th.noise_factor * spread)
        single_allowed = th.noise_factor * max(_width(base_single), _width(cur_single))
        if single_allowed >= MAX_ALLOWANCE:
            # A speed-up over a `single` too noisy to judge is that noise: a 90% drop of both read as a pass.
            return None, [f"too noisy to judge: its speed-up divides by {strategies.baseline()}, whose p10-p90 spread "
                          f"allows {100 * single_allowed:.0f}% (at most {100 * MAX_ALLOWANCE:.0f}% judges anything); "
                          "re-run on a quiet machine"], allowed, entry["ratio_change"]
        if entry["ratio_change"] < -allowed:
            return True, [f"speed-up over single fell {-100 * entry['ratio_change']:.1f}% "
                          f"({base_ratio:.3f} -> {cur_ratio:.3f}; allowed {100 * allowed:.0f}%)"], allowed, \
                entry["ratio_change"]
        return False, [], allowed, entry["ratio_change"]
    if ratios_only or not same_hw:
        return None, ["no in-run reference; absolute change shown, not judged"], allowed, entry["rate_change"]
    disjoint = cur["items_per_s_p90"] < base["items_per_s_p10"]
    if entry["rate_change"] < -allowed and disjoint:
        return True, [f"{unit_of(cur).name}/s fell {-100 * entry['rate_change']:.1f}% ({base['items_per_s']:.1f} -> "
                      f"{cur['items_per_s']:.1f}; allowed {100 * allowed:.0f}%, p10-p90 ranges apart)"], allowed, \
            entry["rate_change"]
    return False, [], allowed, entry["rate_change"]


def _missing_counters(base: dict, cur: dict) -> list[str]:
    """Judged counters the baseline has and the current row lacks."""
    return [name for name in counters.COUNTERS
            if base.get(name) is not None and cur.get(name) is None and counters.judged(name, base)]


def _judge_counters(base: dict, cur: dict) -> list[str]:
    """Reasons for a counter regression: any counter above the baseline (exactly; allocated
    memory beyond its stated tolerance). Counters that fell are an improvement, not judged."""
    why = []
    for name in counters.COUNTERS:
        was, now = base.get(name), cur.get(name)
        if was is None or now is None or not (counters.judged(name, base) and counters.judged(name, cur)
                                               and counters.comparable(name, base, cur)):
            continue
        if now > was * (1 + counters.TOLERANCE.get(name, 0.0)) + 1e-9:
            why.append(f"{name.replace('_', ' ')} rose {was:g} -> {now:g}")
    return why


# The verdicts of a repeat that refute a regression seen in the first comparison: it measured the
# case within what is allowed, or found its host too noisy to tell.
REFUTES = ("pass", "improved", "not judged")


def confirmed(runs: list[list[dict]]) -> list[dict]:
    """Verdicts of the first comparison, where a regression stands only if no other one refutes
    it: each repeat run, and each repeat of the baseline (noise seldom repeats on the same case; a
    real regression does, and a baseline measured while the host was disturbed is outvoted). A
    repeat that lacks the case or could not compare it (another hardware) refutes nothing: a wrong
    file never turns a regression into a pass."""
    repeats = [{v["case"]: v for v in run} for run in runs[1:]]
    final = []
    for v in runs[0]:
        if v["verdict"] == "regression" and any(r.get(v["case"], {}).get("verdict") in REFUTES for r in repeats):
            v = dict(v, verdict="unconfirmed", why=v["why"] + ["not seen again in a repeat"])
        final.append(v)
    return final


def judge(baselines: list[list[dict]], currents: list[list[dict]], th: Thresholds, **options) -> list[dict]:
    """Every current run against every run of the baseline (`compare`'s options), confirmed: the
    figures shown are the first pair's."""
    return confirmed([compare(base, cur, th, **options) for base in baselines for cur in currents])


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def render(verdicts: list[dict], baseline_path: str, current_path: str) -> str:
    lines = [f"parabench compare: {current_path} against baseline {baseline_path}", "",
             f"{'case':<58} {'rate':>8} {'vs single':>10} {'memory':>8}  verdict"]
    for v in verdicts:
        lines.append(f"{v['case']:<58} {_pct(v['rate_change']):>8} {_pct(v['ratio_change']):>10} "
                     f"{_pct(v['mem_change']):>8}  {v['verdict'].upper()}"
                     f"{': ' + '; '.join(v['why']) if v['why'] else ''}")
    counts = {}
    for v in verdicts:
        counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
    lines += ["", "summary: " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))]
    differing = sorted({v["protocol"] for v in verdicts if v.get("protocol")})
    if differing:
        lines.append(f"note: {sum(bool(v.get('protocol')) for v in verdicts)} case(s) were measured with other "
                     f"warm-up, steps or trials than their baseline ({'; '.join(differing)}): their timing differs "
                     "by protocol as well as by code; measure both with the same --warmup, --steps and --trials")
    return "\n".join(lines)


def exit_status(verdicts: list[dict]) -> int:
    if any(v["verdict"] == "regression" for v in verdicts):
        return 1
    if any(v["verdict"] == "unusable" for v in verdicts):
        return 2  # a figure could not be read: that is not a pass
    if not any(v["verdict"] in ("pass", "improved", "unconfirmed") for v in verdicts):
        return 2  # nothing could be compared: that is not a pass
    return 0


def _environment(row: dict) -> str:
    from bench.measure.envinfo import cudnn_version

    parts = [f"torch {row.get('torch')}"]
    if row.get("device") == "cuda":
        parts += [f"CUDA {row.get('cuda')}", f"cuDNN {cudnn_version(row.get('cudnn'))}", f"NCCL {row.get('nccl')}",
                  f"driver {row.get('driver')}"]
    parts += [f"commit {row.get('git_commit')}", f"measured {row.get('date')}"]
    return ", ".join(parts)


def dashboard(files: list[list[dict]]) -> tuple[list[dict], list[dict]]:
    """Entries for github-action-benchmark: (customBiggerIsBetter, customSmallerIsBetter).

    Bigger is better: the throughput (images/s, tokens/s) of every ok case, and the speed-up over `single` measured in
    the same results file (the in-run ratio `compare` trusts on shared machines). Smaller is
    better: peak memory per GPU. Names are unique: the case with its knobs, devices and
    hardware; where a case is in several files, the latest ok row wins."""
    bigger, smaller = {}, {}
    for rows in files:
        for r in rows:
            if r["status"] != "ok":
                continue
            name, extra = f"{describe_case(r)} ({hardware(r)})", _environment(r)
            unit = unit_of(r)
            entries = [(bigger, f"{name}: {unit.name}/s", unit.rate, round(r["items_per_s"], 2),
                        f"{r['items_per_s_p10']:.1f}-{r['items_per_s_p90']:.1f}")]
            single = _single_of(rows, r) if r["strategy"] != strategies.baseline() else None
            if single is not None:
                ratio = r["items_per_s"] / single["items_per_s"]
                entries.append((bigger, f"{name}: speed-up over single, same run", "x", round(ratio, 4),
                                f"{r['items_per_s_p10'] / single['items_per_s_p90']:.3f}-"
                                f"{r['items_per_s_p90'] / single['items_per_s_p10']:.3f}"))
            if r.get("peak_alloc_mib") is not None:
                entries.append((smaller, f"{name}: peak memory per GPU", "MiB", round(r["peak_alloc_mib"], 1), ""))
            for series, key, unit, value, spread in entries:
                if key in series and str(series[key]["_date"]) > str(r.get("date")):
                    continue  # an older measurement of the same case
                series[key] = {"name": key, "unit": unit, "value": value, "range": spread, "extra": extra,
                               "_date": r.get("date")}
    clean = [[{k: v for k, v in e.items() if not k.startswith("_")} for e in series.values()]
             for series in (bigger, smaller)]
    return clean[0], clean[1]


def write_json(path: str, payload) -> None:
    from pathlib import Path

    fileio.atomic_write_bytes(Path(path), (json.dumps(payload, indent=1) + "\n").encode())
