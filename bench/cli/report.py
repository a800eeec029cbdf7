"""`report`: plots/REPORT.md (the answer first), details pages, tables and figures."""
from __future__ import annotations

from pathlib import Path

from bench.cli.common import RESULTS_DIR, UsageError


REFERENCE = "reference"  # the folder of --results-dir that holds the committed reference runs


def inputs(args) -> list[Path]:
    """The results files to read: those named (a folder stands for the results files in it),
    else the user's own runs under --results-dir (its reference/ folder left out), or with
    --reference the committed reference runs. A file a folder holds that does not load is
    skipped with one line on stderr; a file named that does not load is an error."""
    from bench.report.frame import default_inputs

    folder = Path(args.results_dir)
    if args.reference and args.files:
        raise UsageError("--reference reads the committed runs in "
                         f"{folder / REFERENCE}: name results files, or pass --reference, not both")
    if args.reference:
        found = _loadable(default_inputs(folder / REFERENCE))
        if not found:
            raise UsageError(f"no reference runs in {folder / REFERENCE}: they come with the repository (git checkout "
                             f"{folder / REFERENCE}), or name a results file")
        return found
    named = []
    for given in map(Path, args.files):
        if given.is_dir():
            named += _loadable(default_inputs(given))
        else:
            named.append(given)
    if args.files and not named:
        raise UsageError(f"no results files in {', '.join(args.files)}: "
                         "name .json results files or a folder holding them")
    if named:
        return named
    own = _loadable([p for p in default_inputs(folder) if REFERENCE not in p.relative_to(folder).parts])
    if not own:
        reference = f", or pass --reference for the runs committed in {folder / REFERENCE}" \
            if (folder / REFERENCE).is_dir() else ""
        raise UsageError(f"no results of your own in {folder}: measure a run with `make bench` "
                         f"(or `python -m bench run`){reference}")
    return own


def _loadable(paths: list[Path]) -> list[Path]:
    """The files that load as results files; one line on stderr for each that does not
    (an empty file a shell redirection is writing, another tool's file, a damaged one)."""
    import sys

    from bench.cases import results

    kept = []
    for path in paths:
        try:
            results.load(path)
        except results.ResultsError as exc:
            print(f"parabench: skipped one file: {exc}", file=sys.stderr)
            continue
        kept.append(path)
    return kept


def cmd_report(args) -> int:
    from bench.cases import results
    from bench.report import pages

    paths = inputs(args)
    try:
        out = pages.write_report(paths, Path(args.out), every_run=args.all)
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report in {args.out} ({exc.strerror or exc}): "
                         "choose a writable --out") from None
    whose = f"; from the reference runs committed in {Path(args.results_dir) / REFERENCE}, not your own" \
        if args.reference else ""
    print(f"report written to {out} (tables and figures in {out.parent}{whose})")
    return 0


def add_inputs(parser) -> None:
    parser.add_argument("files", nargs="*", help="results files or folders (default: your own runs under "
                        "--results-dir, its reference/ folder left out)")
    parser.add_argument("--results-dir", default=str(RESULTS_DIR))
    parser.add_argument("--reference", action="store_true", help=f"the reference runs committed in "
                        f"<results-dir>/{REFERENCE} instead of your own")
    parser.add_argument("--all", action="store_true", help="every run of the inputs, each run's answer apart "
                        "(default: the newest run only)")


def add_parser(sub) -> None:
    rep = sub.add_parser("report", help="plots/REPORT.md (the answer first), tables and figures from results files")
    add_inputs(rep)
    rep.add_argument("--out", default="plots", help="output folder (default plots/)")
    rep.set_defaults(func=cmd_report)
