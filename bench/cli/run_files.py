"""`run`'s results file: which file a sweep writes (new, named, or resumed), and the rows it
already holds, checked against this host, its hardware and the sweep's settings."""
from __future__ import annotations

import datetime
import os
import socket
import sys
from pathlib import Path

from bench.cli.common import UsageError


def _this_host_hardware(cases) -> set[str]:
    from bench.measure import envinfo
    from bench.cases.case import hardware

    return {hardware({"device": c.device, **envinfo.for_gpus(c.gpus), "cpu": envinfo.collect_light()["cpu"]})
            for c in cases}


def output_path(args) -> Path:
    """The results file: --out, or with --resume the newest file of this host under the
    results folder, or a new file named after the time and host."""
    from bench.measure import envinfo
    from bench.cases import results

    folder = Path(args.results_dir)
    if args.out:
        if Path(args.out).suffix not in (".json", ".csv"):
            raise UsageError(f"--out takes a name ending in .json or .csv (both files are written), got {args.out}")
        return results.json_path(args.out)
    if args.resume:
        host = envinfo.collect_light()["host"]
        mine = []
        for path in sorted(folder.glob("run-*.json"), key=lambda p: p.stat().st_mtime):
            try:
                rows = results.load(path)
            except results.ResultsError:
                continue
            if rows and all(r.get("host") == host for r in rows):
                mine.append(path)
        if not mine:
            raise UsageError(f"--resume found no run-*.json written on this host ({host}) in {folder}; "
                             "pass the file with --out")
        return mine[-1]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    # The PID too: two sweeps started in the same second into one folder get two files.
    return folder / f"run-{stamp}-{socket.gethostname()}-{os.getpid()}.json"


def _results_in(path: Path) -> list[dict]:
    """The rows of a results file that a resumed sweep will rewrite; anything else is refused
    and left untouched."""
    from bench.cases import results

    try:
        return results.load(path)
    except results.ResultsError as exc:
        raise UsageError(f"{exc} (the file was left untouched; --resume rewrites it)") from None


def existing_rows(args, out: Path, cases) -> list[dict]:
    """Rows already in `out` (with --resume), after checking that they were measured on
    this hardware with these measurement settings; without --resume, `out` must be new."""
    from bench.measure import envinfo
    from bench.cases import results
    from bench.cases.case import MEASUREMENT, hardware

    csv_path = out.with_suffix(".csv")
    if not args.resume:
        for path in (out, csv_path):
            if path.exists():
                raise UsageError(f"{path} already exists: pass --resume to continue it, or choose another --out")
        return []
    # Both files are rewritten from the rows: each that exists must be a results file, and
    # the rows come from the JSON, or from the CSV where it is all there is.
    found = {path: _results_in(path) for path in (out, csv_path) if path.exists()}
    if not found:
        return []
    rows = found.get(out, found.get(csv_path))
    if out not in found:
        print(f"note: resuming from {csv_path} ({out.name} is missing); both are written again", file=sys.stderr)
        out = csv_path  # where the rows below come from
    host = envinfo.collect_light()["host"]
    here = _this_host_hardware(cases)
    torch = envinfo.torch_build()["torch"]  # read, not imported: the sweep's parent never imports torch
    for row in rows:
        if row.get("host") and row["host"] != host:
            raise UsageError(f"{out} was measured on host {row['host']}, this is {host}: resume it there, "
                             "or start a new file")
        # One file, one software: a speed-up must not divide rows of two torch versions.
        if row.get("torch") and torch and str(row["torch"]) != torch:
            raise UsageError(f"{out} was measured with torch {row['torch']}, this is torch {torch}: "
                             "resume it with that torch, or start a new file")
        if hardware(row) not in here:
            raise UsageError(f"{out} was measured on {hardware(row)}, this run uses {', '.join(sorted(here))}: "
                             "resume it on that hardware, or start a new file")
    wanted = cases[0].measurement()
    for row in rows:
        had = {k: row.get(k) for k in MEASUREMENT}
        if had != wanted:
            diff = ", ".join(f"{k} {had[k]} (file) vs {wanted[k]} (now)" for k in MEASUREMENT if had[k] != wanted[k])
            raise UsageError(f"{out} was measured with other settings: {diff}; resume with the same settings, "
                             "or start a new file")
    dups = results.duplicates(rows)
    if dups:
        print(f"note: {out} holds {len(dups)} duplicate case(s) "
              f"({'; '.join(dups[:3])}{'...' if len(dups) > 3 else ''}): "
              "the latest ok row of each is kept", file=sys.stderr)
    return rows
