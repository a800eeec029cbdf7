"""What the answer, the report and the CLI say is true of what they show."""
import json

import pandas as pd

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
    monkeypatch.setattr(figures, "_envelope_panels", lambda rows, title, *rest: titles.append(title) or [])
    one = pd.DataFrame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)]).assign(
        variant="", nnodes=1, hardware="NVIDIA H200")
    figures.figure_throughput(one, tmp_path, "one")
    two = pd.concat([one, pd.DataFrame([row("ddp", 2, 64, ips=21000)]).assign(
        variant="sgd=fused", nnodes=1, hardware="NVIDIA H200")])
    figures.figure_throughput(two, tmp_path, "two")
    assert "knobs figure" not in titles[0] and "every setting: the knobs figure" in titles[1], titles
    assert figures.figure_knobs(one, tmp_path, "one") == [] and figures.figure_knobs(two, tmp_path, "two")


def test_a_short_sweep_never_reads_as_measuring_nothing():
    """Cases of a few tenths of a second: the time line keeps a decimal, not 'measuring 0 s (warm-up 0, timed 0)'."""
    from bench.report.phases import summary

    rows = [{"status": "ok", "worker_start_s": 1.2, "build_s": 0.4, "warmup_s": 0.05, "timed_s": 0.3,
             "counters_s": 0.2}]
    line = summary(rows, 4.0)
    assert line == ("4 s in all: measuring 0.3 s (warm-up 0.1, timed 0.3), worker start-up 1 s, "
                    "building and compiling 0.4 s, counting 0.2 s, the rest 2 s"), line
    assert summary([{"status": "skipped"}], 2.0) == "2 s in all (no case recorded where its time went)"


def cpu_rows():
    cpu = {"gpu_name": "", "device": "cpu", "gpus": ""}
    return [{**row("single", 1, 4, ips=46.0), **cpu, "peak_alloc_mib": None, "peak_alloc_mib_min": None,
             "tflops": 0.01},
            {**row("ddp", 2, 4, ips=35.0), **cpu, "n_gpus": 0, "peak_alloc_mib": None, "peak_alloc_mib_min": None,
             "tflops": 0.01}]


def test_a_cpu_answer_speaks_of_replicas_and_leaves_out_what_a_cpu_lacks(tmp_path, capsys):
    from bench.cases import results
    from bench.cli import main

    path = tmp_path / "run.json"
    results.write(path, cpu_rows())
    assert main(["answer", str(path)]) == 0
    out = capsys.readouterr().out
    assert "4/replica" in out and "batch/replica" in out, out
    assert "/GPU" not in out and "MFU" not in out and "MiB" not in out, out


def test_a_cpu_report_has_no_device_memory_table_and_no_zero_tflops():
    from bench.report import pages

    frame = pd.DataFrame(cpu_rows()).assign(hardware="CPU x", variant="", nnodes=1)
    tables = pages.tables(frame)
    assert not any(title.startswith("peak memory per GPU") for title in tables), list(tables)
    assert set(tables["achieved TFLOP/s"]["batch 4"]) == {"0.01"}
    gpu = pd.DataFrame([row("single", 1, 64, ips=10000)]).assign(variant="", nnodes=1, hardware="NVIDIA H200")
    assert any(title.startswith("peak memory per GPU") for title in pages.tables(gpu))


def test_a_fit_sentence_names_the_counts_it_measured():
    """One count is 'at n = 8', not 'at every n measured (8-8)'."""

    from bench.fit import fit

    def doc(counts):
        return {"settings": {"gpus": [], "resolution": 0.02, "memory_budget_mib": 300},
                "rows": [{"hardware": "CPU x"}],
                "outcomes": [{"model": "m", "precision": "fp32", "strategy": "ddp", "devices": n, "largest_fit": 53,
                              "said": "53"} for n in counts]}

    (one,) = fit.sentences(doc([8]))
    assert "ddp fits 53 per rank at n = 8 (" in one and "8-8" not in one, one
    (several,) = fit.sentences(doc([1, 2, 8]))
    assert "ddp fits 53 per rank at every n measured (1-8)" in several, several
    # Within the search's 2% of each other is still two figures: each n says its own.
    apart = doc([1, 2])
    apart["outcomes"][0].update(largest_fit=793, said="793")
    apart["outcomes"][1].update(largest_fit=778, said="778")
    (two,) = fit.sentences(apart)
    assert "ddp fits 793 at 1, 778 at 2" in two and "every n" not in two, two


def test_a_run_on_a_busy_host_says_so_and_its_rows_record_the_load(tmp_path, capsys):
    from bench.cases import results
    from bench.cli import main

    busy = [{**r, "load_avg_start": 4.4, "load_avg_end": 5.1, "host_cpus": 2} for r in cpu_rows()]
    path = tmp_path / "busy.json"
    results.write(path, busy)
    assert results.load(path)[0]["load_avg_start"] == 4.4  # a column of its own, read back
    assert main(["answer", str(path)]) == 0
    out = capsys.readouterr().out
    assert "The host was busy when run busy.json started: load average 4.4 on 2 CPUs (5.1 at its end)" in out, out
    idle = [{**r, "load_avg_start": 0.2, "load_avg_end": 2.0, "host_cpus": 2} for r in cpu_rows()]
    results.write(tmp_path / "idle.json", idle)
    assert main(["answer", str(tmp_path / "idle.json")]) == 0
    assert "busy" not in capsys.readouterr().out


def test_a_sweep_records_the_load_average_in_every_row(tmp_path):
    from tests.conftest import rows_of, run_cli

    out = tmp_path / "r.json"
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--warmup", "0", "--steps", "1",
                   "--trials", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (row,) = rows_of(out)
    assert row["load_avg_start"] >= 0 and row["load_avg_end"] >= 0 and row["host_cpus"] >= 1, row


def test_list_fits_a_screenful_or_two_and_ends_its_sentences():
    from bench.core.precision import PRECISIONS
    from tests.conftest import run_cli

    proc = run_cli("list", "--gpus", "")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    strategies_part = lines[:lines.index("Models (FLOPs: one forward+backward pass, torch.utils.flop_counter):")]
    assert len(strategies_part) <= 45, len(strategies_part)  # a screen (each reason per strategy: 75)
    assert "runs fp32, amp-fp16, amp-bf16" in proc.stdout and "single (apex-O1, apex-O2), ddp" in proc.stdout
    for precision in PRECISIONS.values():
        if precision.declined:
            assert not precision.declined.rstrip(".)").endswith((" are", " is", " and", " or")), precision.declined


def test_ddp_builds_without_a_deprecation_warning_and_keeps_the_buffer_option(tmp_path):
    """broadcast_buffers on or off: DDP is built without torch's FutureWarning, and off still turns
    the per-forward buffer broadcast off."""
    import warnings

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from strategies.ddp import buffer_sync

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        for on in (True, False):
            with warnings.catch_warnings():
                warnings.simplefilter("error", FutureWarning)
                ddp = DistributedDataParallel(torch.nn.BatchNorm1d(4), **buffer_sync(on))
            assert (ddp.forward_sync_buffers is on if hasattr(ddp, "forward_sync_buffers")
                    else ddp.broadcast_buffers is on)
    finally:
        dist.destroy_process_group()


def test_listing_a_torchvision_model_prints_no_warning_of_torchvision_io():
    import importlib.util

    import pytest

    from tests.conftest import run_cli

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision is not installed here (make setup-models)")
    proc = run_cli("list", "--models", "torchvision:resnet18")
    assert proc.returncode == 0, proc.stderr
    assert "Failed to load image Python extension" not in proc.stderr + proc.stdout, proc.stderr


def test_the_readme_is_a_manual_not_a_lab_book():
    """README.md at most 300 lines: the proofs, the list of tests and the reliability details live
    in docs/ (proofs.md, measuring.md, reliability.md), which it links."""
    from tests.conftest import REPO

    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    assert all(f"docs/{page}" in text for page in ("proofs.md", "measuring.md", "reliability.md"))
