"""Does a case measure the same alone in a fresh worker and after other cases in the same
worker? The comparison behind tests/test_isolation.py (CPU) and on GPUs.

`python -m bench check isolation FOLDER` reads FOLDER/<strategy>-alone-<n>.json and
<strategy>-after-<n>.json, finds in each "after" file the case that its "alone" file holds,
and prints, per strategy, both sides' step times and whether the counters agree.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

from bench.measure import counters
from bench.cases import results
from bench.cases.case import identity

_NAME = re.compile(r"(?P<strategy>.+)-(?P<side>alone|after)-(?P<attempt>\d+)(\.probe)?\.json$")
_NAMED = ("strategy", "precision", "model", "execution", "batch_per_gpu", "n_replicas")


def same_case(rows: list[dict], like: dict) -> dict:
    """The one row of `rows` that measured `like`'s case (the same case key and hardware: its
    execution and knobs too); ValueError names what is missing."""
    found = [r for r in rows if identity(r) == identity(like)]
    if len(found) != 1:
        case = " ".join(str(like[k]) for k in _NAMED)
        raise ValueError(f"{len(found)} rows of the case {case} where one was expected")
    return found[0]


def _pair(sides: dict[str, Path]) -> tuple[dict, dict]:
    ok = [r for r in results.load(sides["alone"]) if r["status"] == "ok"]
    if len(ok) != 1:
        raise ValueError(f"{sides['alone']}: {len(ok)} ok rows; an 'alone' file holds the one case measured alone")
    try:
        return ok[0], same_case(results.load(sides["after"]), ok[0])
    except ValueError as exc:
        raise ValueError(f"{sides['after']}: {exc}") from None


def counter_differences(first: dict, later: dict) -> list[str]:
    """Counters that differ beyond their stated tolerance (bench/measure/counters.py), of those that
    repeat exactly from one worker to the next (not those cuDNN autotuning moves)."""
    out = []
    for name in counters.COUNTERS:
        if not (counters.judged(name, first) and counters.judged(name, later)):
            continue
        tolerance = counters.TOLERANCE.get(name, 0.0) * max(abs(first[name]), 1e-9)
        if abs(later[name] - first[name]) > tolerance:
            out.append(f"{name}: {first[name]} alone, {later[name]} after")
    return out


def spread(rows: list[dict]) -> tuple[float, float]:
    """The union of the rows' p10-p90 step-time ranges (ms)."""
    return min(r["step_ms_p10"] for r in rows), max(r["step_ms_p90"] for r in rows)


def compare(pairs: list[tuple[dict, dict]]) -> dict:
    """(alone, after) rows of one case, over several interleaved attempts."""
    alone, after = [a for a, _ in pairs], [b for _, b in pairs]
    (alone_lo, alone_hi), (after_lo, after_hi) = spread(alone), spread(after)
    return {
        "alone_ms": [round(r["step_ms_p50"], 3) for r in alone],
        "after_ms": [round(r["step_ms_p50"], 3) for r in after],
        "alone_spread_ms": (round(alone_lo, 3), round(alone_hi, 3)),
        "after_spread_ms": (round(after_lo, 3), round(after_hi, 3)),
        "after_not_slower": after_lo <= alone_hi,  # nothing earlier left a slowdown behind
        "alone_not_slower": alone_lo <= after_hi,  # a fresh worker's first case is not slow
        "counter_differences": sorted({d for a, b in pairs for d in counter_differences(a, b)}),
    }


def main(argv: list[str]) -> int:
    folder = Path(argv[0])
    found: dict[str, dict[int, dict[str, Path]]] = {}
    for path in sorted(folder.glob("*.json")):
        if m := _NAME.match(path.name):
            found.setdefault(m["strategy"], {}).setdefault(int(m["attempt"]), {})[m["side"]] = path
    if not found:
        print(f"no <strategy>-alone-<n>.json / -after-<n>.json files in {folder}", file=sys.stderr)
        return 2
    for strategy, attempts in sorted(found.items()):
        pairs = []
        for n, sides in sorted(attempts.items()):
            if set(sides) != {"alone", "after"}:
                print(f"{strategy} attempt {n}: only its {', '.join(sides)} file, left out", file=sys.stderr)
                continue
            try:
                pairs.append(_pair(sides))
            except (results.ResultsError, ValueError) as exc:
                print(f"parabench: error: {exc}", file=sys.stderr)
                return 2
        if not pairs:
            continue
        got = compare(pairs)
        a = pairs[0][0]
        print(f"{strategy} {a['model']} {a['precision']} {a['batch_per_gpu']}/replica x{a['n_replicas']} "
              f"({len(pairs)} attempts, interleaved)")
        print(f"  alone in a fresh worker: p50 {got['alone_ms']} ms, p10-p90 {got['alone_spread_ms']}")
        print(f"  after others:            p50 {got['after_ms']} ms, p10-p90 {got['after_spread_ms']}")
        unjudged = [n for n in counters.COUNTERS if not counters.judged(n, a)]
        print(f"  after not slower: {got['after_not_slower']}; alone not slower: {got['alone_not_slower']}; "
              f"counters: {'equal' if not got['counter_differences'] else '; '.join(got['counter_differences'])}"
              + (f" ({', '.join(unjudged)} not compared: cuDNN autotuning)" if unjudged else ""))
        for name in unjudged:
            print(f"  {name}: alone {[r[name] for r, _ in pairs]}, after {[r[name] for _, r in pairs]}")
    return 0

