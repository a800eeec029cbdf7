"""`compare` and `dashboard`: regression tracking against a baseline, and the CI dashboard's files."""
from __future__ import annotations

import math
import sys
from pathlib import Path

from bench.cli.common import RESULTS_DIR, UsageError, fraction, write_json


def cmd_compare(args) -> int:
    from bench.report import compare
    from bench.cases import results

    try:
        currents = [results.load(path) for path in args.current]
        if args.baseline == "auto":
            args.baseline = str(compare.baseline_for(currents[0], Path(args.baselines)))
        baselines = [results.load(path) for path in [args.baseline, *args.baseline_repeat]]
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    th = compare.Thresholds(fraction(args.max_slowdown, "--max-slowdown"),
                            fraction(args.max_memory_growth, "--max-memory-growth"), noise_factor(args.noise_factor))
    verdicts = compare.judge(baselines, currents, th, across_hardware=args.across_hardware,
                             ratios_only=args.ratios_only, judge_timing=args.judge == "all")
    print(compare.render(verdicts, " + ".join([args.baseline, *args.baseline_repeat]), " + ".join(args.current)))
    if args.json:
        write_json(args.json, verdicts)
    status = compare.exit_status(verdicts)
    unusable = [v["case"] for v in verdicts if v["verdict"] == "unusable"]
    if status == 2 and unusable:
        print(f"parabench: error: {len(unusable)} case(s) of {args.current[0]} lack work counters that "
              f"{args.baseline} has ({unusable[0]}{', ...' if len(unusable) > 1 else ''}): re-measure them",
              file=sys.stderr)
    elif status == 2 and any(v["verdict"] == "not judged" for v in verdicts):
        noisy = [v["case"] for v in verdicts if v["verdict"] == "not judged"]
        print(f"parabench: error: no case of {args.current[0]} could be judged against {args.baseline}: "
              f"{len(noisy)} matched but were not judged ({noisy[0]}{', ...' if len(noisy) > 1 else ''}; the table "
              "says why): measure them again on a quieter host, or with more steps", file=sys.stderr)
    elif status == 2:
        print(f"parabench: error: no case of {args.current[0]} could be compared with {args.baseline} "
              "(different cases or hardware); pick the baseline for this hardware", file=sys.stderr)
    return status


# The noise allowance in p10-p90 widths: 0 judges on the threshold alone; 3 widths are ~7.7
# standard deviations of normal noise (one p10-p90 width is 2.56); beyond that, a spread
# wide enough to need it makes the allowance swallow any slowdown.
MAX_NOISE_FACTOR = 3.0


def noise_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and 0 <= value <= MAX_NOISE_FACTOR):
        raise UsageError(f"--noise-factor is 0 to {MAX_NOISE_FACTOR:g} (times the measured p10-p90 width), got {text}: "
                         "a larger allowance would let every slowdown pass")
    return value


def cmd_dashboard(args) -> int:
    from bench.report import compare
    from bench.cases import results

    try:
        files = [results.load(path) for path in args.files]
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    bigger, smaller = compare.dashboard(files)
    write_json(args.out, bigger)
    print(f"{args.out}: {len(bigger)} entries (customBiggerIsBetter: images/s or tokens/s, speed-ups)")
    if args.memory_out:
        write_json(args.memory_out, smaller)
        print(f"{args.memory_out}: {len(smaller)} entries (customSmallerIsBetter: peak memory per GPU)")
    return 0


def add_parser(sub) -> None:
    cmp_ = sub.add_parser("compare", help="compare results with a baseline; exit 0 pass, 1 regression, 2 unusable")
    cmp_.add_argument("baseline", help="baseline results file, or 'auto': the one for this hardware in --baselines")
    cmp_.add_argument("--baselines", default=str(RESULTS_DIR / "reference" / "baselines"), metavar="DIR",
                      help="where 'auto' finds <hardware>.json (default: results/reference/baselines, this "
                           "checkout's CI baselines)")
    cmp_.add_argument("current", nargs="+",
                      help="results file; with several (repeat runs), a repeat that measured a case without the "
                           "regression outvotes it")
    cmp_.add_argument("--baseline-repeat", action="append", default=[], metavar="FILE",
                      help="another run of the baseline (repeatable): a regression it does not show is outvoted, so "
                           "that a baseline measured while the host was disturbed cannot fail every later run")
    cmp_.add_argument("--max-slowdown", default="0.10",
                      help="allowed throughput drop, a fraction in (0, 1) or a percentage (default 0.10 = 10%%)")
    cmp_.add_argument("--max-memory-growth", default="0.10",
                      help="allowed peak-memory growth, a fraction in (0, 1) or a percentage (default 0.10)")
    cmp_.add_argument("--noise-factor", default="1.0",
                      help=f"x the measured p10-p90 width that is noise, 0 to {MAX_NOISE_FACTOR:g} (default 1.0)")
    cmp_.add_argument("--across-hardware", action="store_true", help="compare in-run ratios across hardware")
    cmp_.add_argument("--ratios-only", action="store_true",
                      help="judge throughput by in-run ratios alone (shared machines whose speed drifts)")
    cmp_.add_argument("--judge", choices=["all", "counters"], default="all",
                      help="all: timing, work counters and memory (dedicated hosts); counters: work counters, memory "
                           "and status only, timing shown unjudged (shared machines)")
    cmp_.add_argument("--json", help="write the verdicts here")
    cmp_.set_defaults(func=cmd_compare)

    dash = sub.add_parser("dashboard", help="export for github-action-benchmark: throughput and in-run speed-ups "
                          "(customBiggerIsBetter), peak memory (customSmallerIsBetter)")
    dash.add_argument("files", nargs="+")
    dash.add_argument("--out", required=True, help="throughput and speed-ups: [{name, unit, value, range, extra}]")
    dash.add_argument("--memory-out", help="peak memory per GPU, smaller is better")
    dash.set_defaults(func=cmd_dashboard)
