"""`report`: tables, figures and plots/REPORT.md from results files."""
from __future__ import annotations

from pathlib import Path

from bench.cli.common import RESULTS_DIR, UsageError


def cmd_report(args) -> int:
    from bench.report import page as report
    from bench.cases import results

    paths = []
    for given in map(Path, args.files):
        # A folder stands for the results files in it.
        paths += report.default_inputs(given) if given.is_dir() else [given]
    if args.files and not paths:
        raise UsageError(f"no results files in {', '.join(args.files)}: name .json results files or a folder holding them")
    paths = paths or report.default_inputs(Path(args.results_dir))
    if not paths:
        raise UsageError(f"no results files in {args.results_dir}: run a sweep first (make bench)")
    try:
        out = report.write_report(paths, Path(args.out))
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report in {args.out} ({exc.strerror or exc}): choose a writable --out") from None
    print(f"report written to {out} (tables and figures in {out.parent})")
    return 0


def add_parser(sub) -> None:
    rep = sub.add_parser("report", help="tables, figures and plots/REPORT.md from results files")
    rep.add_argument("files", nargs="*", help="results files (default: every results file under --results-dir)")
    rep.add_argument("--results-dir", default=str(RESULTS_DIR))
    rep.add_argument("--out", default="plots", help="output folder (default plots/)")
    rep.set_defaults(func=cmd_report)
