"""`report`: plots/REPORT.md (the answer first), details pages, tables and figures."""
from __future__ import annotations

from pathlib import Path

from bench.cli.common import RESULTS_DIR, UsageError


def inputs(args) -> list[Path]:
    """The results files named (a folder stands for the files in it), else those under
    --results-dir; a usage error where there are none."""
    from bench.report.frame import default_inputs

    paths = []
    for given in map(Path, args.files):
        paths += default_inputs(given) if given.is_dir() else [given]
    if args.files and not paths:
        raise UsageError(f"no results files in {', '.join(args.files)}: name .json results files or a folder holding them")
    paths = paths or default_inputs(Path(args.results_dir))
    if not paths:
        raise UsageError(f"no results files in {args.results_dir}: run a sweep first (make bench)")
    return paths


def cmd_report(args) -> int:
    from bench.cases import results
    from bench.report import pages

    paths = inputs(args)
    try:
        out = pages.write_report(paths, Path(args.out), every_run=args.all)
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report in {args.out} ({exc.strerror or exc}): choose a writable --out") from None
    print(f"report written to {out} (tables and figures in {out.parent})")
    return 0


def add_inputs(parser) -> None:
    parser.add_argument("files", nargs="*", help="results files or folders (default: the results files under "
                        "--results-dir)")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR))
    parser.add_argument("--all", action="store_true", help="every run of the inputs, each run's answer apart "
                        "(default: the newest run only)")


def add_parser(sub) -> None:
    rep = sub.add_parser("report", help="plots/REPORT.md (the answer first), tables and figures from results files")
    add_inputs(rep)
    rep.add_argument("--out", default="plots", help="output folder (default plots/)")
    rep.set_defaults(func=cmd_report)
