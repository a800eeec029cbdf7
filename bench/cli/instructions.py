"""`instructions`: instructions per training step under Callgrind."""
from __future__ import annotations

import os
from pathlib import Path

from bench.cli.common import UsageError, fraction, listed


def cmd_instructions(args) -> int:
    from bench.checks import instructions

    fraction(args.tolerance, "--tolerance", zero_allowed=True)
    if args.out and not os.access(Path(args.out).resolve().parent, os.W_OK):
        raise UsageError(f"cannot write {args.out}: its folder is missing or read-only; choose another --out")
    try:
        countable = instructions.countable()
        names = listed(args.strategies, "--strategies") or countable
        unknown = sorted(set(names) - set(countable))
        if unknown:
            raise UsageError(f"cannot count {', '.join(unknown)} under valgrind: choose from "
                             f"{', '.join(countable)} (one process on the CPU)")
        baseline = instructions.load(args.compare) if args.compare else None
        if baseline is not None:
            try:  # before counting: a count takes minutes
                instructions.check_environment(baseline, instructions.environment())
            except instructions.OtherEnvironment as exc:
                if args.other_environment == "fail":
                    raise
                print(f"instruction counts NOT JUDGED: {exc}")
                return 0
        record = instructions.measure(names)
        if args.out:
            try:
                instructions.write(args.out, record)
            except OSError as exc:
                raise UsageError(f"cannot write {args.out} ({exc.strerror or exc}); the counts were: "
                                 + ", ".join(f"{k} {v}" for k, v in record["counts"].items())) from None
            print(f"instruction counts written to {args.out}")
        if baseline is None:
            for name, n in record["counts"].items():
                print(f"{name:<20} {n:>14,} instructions/step")
            return 0
        passed, lines = instructions.compare(baseline, record, args.tolerance)
    except instructions.InstructionsError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(lines))
    print("instruction counts: " + ("pass" if passed else "REGRESSION"))
    return 0 if passed else 1


def add_parser(sub) -> None:
    ins = sub.add_parser("instructions", help="instructions per training step under Callgrind (exact on any machine); "
                         "exit 0 pass, 1 regression, 2 unusable")
    ins.add_argument("--strategies",
                     help="comma-separated (default: every strategy that runs in one process on the CPU)")
    ins.add_argument("--out", help="write the counts here (JSON)")
    ins.add_argument("--compare", metavar="BASELINE", help="judge the counts against this file's")
    ins.add_argument("--tolerance", type=float, default=0.01, help="allowed rise per strategy (fraction, default 0.01)")
    ins.add_argument("--other-environment", choices=["fail", "skip"], default="fail",
                     help="a baseline from another Python/torch build: fail (exit 2), or skip (say so, exit 0)")
    ins.set_defaults(func=cmd_instructions)
