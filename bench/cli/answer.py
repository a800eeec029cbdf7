"""`answer`: which configuration to use, from the newest run (or the runs named)."""
from __future__ import annotations

from bench.cli.common import UsageError
from bench.cli.report import add_inputs, inputs


def cmd_answer(args) -> int:
    from bench.cases import results
    from bench.report import answer, answer_text
    from bench.report.frame import load_runs, newest, run_name
    from bench.report.hostload import busy_line
    from bench.report.labels import Legend

    paths = inputs(args)
    try:
        shown = paths if args.all else newest(paths)
        runs = load_runs(shown)
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    if args.reference and not args.json:
        print(f"The reference runs committed with parabench ({args.results_dir}/reference), not your own:\n")
    legend = Legend()
    recs = answer.records(runs, legend)
    if args.json:
        print(answer.to_json(recs))
        return 0
    for (source, hw, model), run in runs.groupby(["source", "hardware", "model"], sort=True):
        mine = [r for r in recs if (r["run"], r["hardware"], r["model"]) == (run_name(source), hw, model)]
        busy = busy_line(run.to_dict("records"), f"run {run_name(source)}")
        absent = "".join(f"Not measured: {', '.join(who)}: {why}.\n" for why, who in answer.not_measured(run).items())
        print(f"{model} on {hw} (run {run_name(source)}): {answer_text.actions(run, mine)}\n"
              + (f"{busy}\n" if busy else "") + absent)
        for where in dict.fromkeys((r["precision"], r["where"]) for r in mine):
            print(f"{where[0]}, {where[1]}:")
            group = [r for r in mine if (r["precision"], r["where"]) == where]
            print(answer_text.table(group).to_string(index=False) + "\n")
            for line in answer_text.lever_lines(group):
                print(f"  levers at {line}")
            if answer_text.lever_lines(group):
                print()
    for line in legend.lines():
        print(line)
    for path, name in sorted({(r["source"], r["run"]) for r in recs}):
        for line in answer_text.search_lines(path, name):
            print(line)
    from bench.report import fitted

    for line in fitted.said_in_answer(shown, set(runs["model"]) if "model" in runs else None,
                                      set(runs["precision"]) if "precision" in runs else None):
        print("\n" + line)
    return 0


def add_parser(sub) -> None:
    cmd = sub.add_parser("answer", help="at each batch, the simplest configuration that nothing measured beats, "
                         "from the newest run's results")
    add_inputs(cmd)
    cmd.add_argument("--json", action="store_true", help="one JSON array with an object for each run, hardware, "
                     "model, precision, device count and batch")
    cmd.set_defaults(func=cmd_answer)
