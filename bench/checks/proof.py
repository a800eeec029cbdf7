"""`check proof`: a search's answer against the fastest configuration the same call measured.

`python -m bench check proof SEARCH.json [SEARCH.json ...] --against LISTING.json ... --handloop
HANDLOOP.json` takes each search's answer (bench/report/answer.py) at its largest device count and
at one device, per model, precision and batch, and divides its throughput by the fastest ok row (by
its median; a disturbed one is said to be) at the same hardware, model, precision, device count and
batch in any of the files (the searches'
own rows, the listings', and at one device the hand-written loop's best, bench/checks/handloop.py).
Medians against medians; every file must come from the same call on the same machine. Exit 1
where a ratio is below --min-ratio, so that a script can stop on it. No torch.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from bench.cases import fileio, results, schema


def _cells(search: Path) -> list[dict]:
    from bench.report import answer
    from bench.report.frame import load_runs

    recs = [r for r in answer.records(load_runs([search])) if r["strategy"] is not None]
    if not recs:
        return []
    largest = max(r["devices"] for r in recs)
    return [r for r in recs if r["devices"] in (largest, 1)]


def _rows(paths: list[Path]) -> list[dict]:
    out = []
    for path in paths:
        for row in results.latest(results.load(path)):
            if row.get("status") == "ok":
                out.append({**row, "file": path.name})
    return out


def _handloop(path: Path | None) -> list[dict]:
    if path is None:
        return []
    try:
        doc = json.loads(fileio.read_text(path, kind="hand-loop file"))
    except ValueError as exc:
        raise results.ResultsError(f"{path}: not a hand-loop file ({exc})") from None
    # A hand-loop file written before units says img_per_s (schema.today reads it as today's name).
    return [{**schema.today(r), "file": path.name} for r in doc.get("rows", []) if schema.today(r).get("items_per_s")]


def _label(row: dict) -> str:
    from bench.cases.case import Case

    case = Case.from_row(dict(row))
    return case.strategy + (f" ({case.variant()})" if case.variant() else "")


def table(searches: list[Path], against: list[Path], handloop: Path | None) -> list[dict]:
    from bench.cases.case import hardware
    from bench.cases.ranking import disturbed
    from bench.report.answer import devices

    rows = _rows(searches + against)
    loop = _handloop(handloop)
    out = []
    for search in searches:
        for rec in _cells(search):
            cell = (rec["hardware"], rec["model"], rec["precision"], rec["devices"], rec["batch_per_gpu"])
            same = [r for r in rows if (hardware(r), r.get("model"), r.get("precision"), devices(r),
                                        int(r.get("batch_per_gpu") or 0)) == cell]
            candidates = [(float(r["items_per_s"]), _label(r), r["file"], disturbed(r)) for r in same]
            if rec["devices"] == 1 and rec["hardware"] == loop_gpu(handloop):
                candidates += [(float(r["items_per_s"]), f"hand loop ({r['variant']})", r["file"], "") for r in loop
                               if (r.get("model"), r.get("precision"), int(r["batch_per_gpu"]))
                               == (rec["model"], rec["precision"], rec["batch_per_gpu"])]
            best = max(candidates)  # the answer's own row is among them
            out.append({"search": search.name, "model": rec["model"], "precision": rec["precision"],
                        "devices": rec["devices"], "batch_per_gpu": rec["batch_per_gpu"],
                        "answer": rec["label"], "answer_config": rec.get("config"), "recommended": rec["recommended"],
                        "answer_items_per_s": rec["items_per_s"], "best": best[1], "best_file": best[2],
                        # The best by its median, disturbed or not, and said so: the yardstick errs high.
                        "best_disturbed": best[3], "best_items_per_s": best[0],
                        "ratio": round(rec["items_per_s"] / best[0], 4)})
    return out


def loop_gpu(path: Path | None) -> str | None:
    """The GPU the hand loop ran on, as rows name their hardware."""
    if path is None:
        return None
    return json.loads(fileio.read_text(path, kind="hand-loop file")).get("gpu")


def agreement(cells: list[dict]) -> tuple[int, int]:
    """In how many cells (model, precision, devices, batch) every search named the same
    configuration, of the cells every search answered: (same, cells). Run after run, the
    answer should not change where nothing else did."""
    by_cell: dict[tuple, dict[str, str]] = {}
    searches = {c["search"] for c in cells}
    for c in cells:
        by_cell.setdefault((c["model"], c["precision"], c["devices"], c["batch_per_gpu"]),
                           {})[c["search"]] = c["answer"]
    shared = [named for named in by_cell.values() if set(named) == searches]
    return sum(len(set(named.values())) == 1 for named in shared), len(shared)


class ProofError(Exception):
    """The files cannot be checked (missing, or nothing ran ok): one line, the command's fix."""


def main(args) -> int:
    searches = [Path(p) for p in args.searches]
    against = [Path(p) for p in args.against or []]
    handloop = Path(args.handloop) if args.handloop else None
    if not (math.isfinite(args.min_ratio) and 0 < args.min_ratio <= 1):
        raise ProofError(f"--min-ratio takes a share in (0, 1], got {args.min_ratio:g}")
    for path in searches + against + ([handloop] if handloop else []):
        if not path.is_file():
            raise ProofError(f"{path}: no such file: give the files one call wrote (scripts/answer_proof.sh)")
    cells = table(searches, against, handloop)
    if not cells:
        raise ProofError(f"{', '.join(map(str, searches))}: no answer to check (nothing ran ok)")
    print(f"{'search':<16} {'GPUs':>4} {'batch':>6}  {'answer':<52} {'rate':>9}  "
          f"{'best measured':<52} {'rate':>9} ratio")
    for c in cells:
        print(f"{c['search']:<16} {c['devices']:>4} {c['batch_per_gpu']:>6}  {c['answer'][:52]:<52} "
              f"{c['answer_items_per_s']:>9.0f}  {c['best'][:52]:<52} {c['best_items_per_s']:>9.0f} {c['ratio']:.3f}"
              + (" (the best's trials were disturbed)" if c["best_disturbed"] else ""))
    low = [c for c in cells if c["ratio"] < args.min_ratio or not c["recommended"]]
    named = ", ".join(f"{c['devices']} GPU(s) {c['batch_per_gpu']}/GPU" for c in low)
    print(f"{len(cells) - len(low)} of {len(cells)} cells at or above {args.min_ratio:g} of the best measured"
          + (f"; below or unrecommended: {named}" if low else ""))
    same, shared = agreement(cells)
    if len(searches) > 1:
        print(f"the same configuration named by all {len(searches)} searches in {same} of {shared} cells")
    if args.out:
        Path(args.out).write_text(json.dumps({"schema": "parabench-proof/1", "min_ratio": args.min_ratio,
                                              "cells": cells, "same_named": same, "cells_shared": shared},
                                             indent=1) + "\n")
    return 1 if low else 0
