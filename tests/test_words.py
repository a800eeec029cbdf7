"""What the answer, the report and the CLI say is true of what they show."""
import json

import pandas as pd

from bench.report import frame as report
from tests.test_report import row


def test_answer_help_says_what_it_prints_and_what_it_picks(capsys):
    from bench.cli import build_parser

    parser = build_parser()
    answer = parser._subparsers._group_actions[0].choices["answer"]
    json_help = next(a.help for a in answer._actions if a.dest == "json")
    assert json_help.startswith("one JSON array with an object for each run"), json_help
    listed = {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}
    assert listed["answer"].startswith("at each batch, the simplest configuration that nothing measured beats"), listed
    assert "fastest configuration" not in listed["answer"]


def test_the_answer_json_is_one_array_of_objects(tmp_path, capsys):
    from bench.cases import results
    from bench.cli import main

    path = tmp_path / "run.json"
    results.write(path, [row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)])
    assert main(["answer", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert isinstance(printed, list) and all(isinstance(r, dict) for r in printed) and len(printed) == 2


def test_the_throughput_title_names_the_knobs_figure_only_where_one_is_drawn(monkeypatch, tmp_path):
    from bench.report import figures

    titles = []
    monkeypatch.setattr(figures, "_batch_panels", lambda group, title, *rest: titles.append(title) or [])
    one = pd.DataFrame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)]).assign(variant="", nnodes=1, hardware="NVIDIA H200")
    figures.figure_throughput(one, tmp_path, "one")
    two = pd.concat([one, pd.DataFrame([row("ddp", 2, 64, ips=21000)]).assign(variant="sgd=fused", nnodes=1, hardware="NVIDIA H200")])
    figures.figure_throughput(two, tmp_path, "two")
    assert "knobs figure" not in titles[0] and "others: knobs figure" in titles[1], titles
    assert figures.figure_knobs(one, tmp_path, "one") == [] and figures.figure_knobs(two, tmp_path, "two")
