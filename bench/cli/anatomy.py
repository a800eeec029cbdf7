"""`anatomy`: the step breakdown of the traces taken by `run --anatomy`."""
from __future__ import annotations

from pathlib import Path

from bench.cli.common import UsageError


def cmd_anatomy(args) -> int:
    """The breakdown of traces taken by --anatomy, per rank and device (ms per step)."""
    import re

    from bench.measure import anatomy

    ranks = []
    for folder in map(Path, args.folders):
        found = sorted(int(m.group(1)) for p in folder.glob("rank*.pt.trace.json.gz")
                       if (m := re.fullmatch(r"rank(\d+)\.pt\.trace\.json\.gz", p.name)))
        if not found:
            raise UsageError(f"no traces in {folder}: name a case folder written by run --anatomy")
        ranks += [(folder, r) for r in found]
    print("  ".join(f"{h:>12}" for h in ["rank", "device", *anatomy.VALUES]) + "  basis")
    for folder, rank in ranks:
        try:
            breakdown = anatomy.analyse_rank(str(folder), rank)
        except (OSError, EOFError, ValueError) as exc:  # unreadable, truncated or not a trace
            raise UsageError(f"cannot analyse rank {rank} in {folder}: {exc}") from None
        for d in breakdown:
            print("  ".join([f"{rank:>12}", f"{d['device']:>12}"] + [f"{d[v]:12.4f}" for v in anatomy.VALUES])
                  + f"  {d['basis']}")
    return 0


def add_parser(sub) -> None:
    ana = sub.add_parser("anatomy", help="the step breakdown of traces taken by run --anatomy (ms per step)")
    ana.add_argument("folders", nargs="+", help="case folders of traces (results/traces/<run>/<case>/)")
    ana.set_defaults(func=cmd_anatomy)
