"""The reporter on a small fixture of results, including oom, skipped and error rows."""
import json
from pathlib import Path

import pandas as pd
import pytest

from bench.report import page as report
from bench.cases import results
from tests.conftest import run_cli

ENV = {"gpu_name": "NVIDIA H200", "device": "cuda", "cpu": "x", "torch": "2.11", "cuda": "13.0", "cudnn": "91900",
       "nccl": "2.28.9", "data": "device", "tf32": "default", "channels_last": False, "compile": False,
       "model": "resnet18-small", "options": "{}", "warmup": 1, "steps": 2, "trials": 1, "seed": 0,
       "sgd_impl": "foreach", "execution": "eager"}


def row(strategy, n, batch, precision="fp32", status="ok", ips=None, reason="", cudnn=None, **extra):
    r = {**ENV, "strategy": strategy, "precision": precision, "n_gpus": n, "n_replicas": n, "gpus": ",".join(map(str, range(n))),
         "batch_per_gpu": batch, "global_batch": batch * n, "status": status, "reason": reason,
         "cudnn_benchmark": cudnn if cudnn is not None else strategy not in report.THREADED, "date": "2026-11-21", **extra}
    if status == "ok":
        step = batch * n / ips * 1000
        r.update(img_per_s=ips, img_per_s_p10=ips * 0.95, img_per_s_p90=ips * 1.05, step_ms_p50=step,
                 step_ms_p10=step * 0.95, step_ms_p90=step * 1.05, peak_alloc_mib=100.0 * batch,
                 peak_alloc_mib_min=90.0 * batch, peak_reserved_mib=120.0 * batch, tflops=1.0)
    return r


def everything(out: Path) -> str:
    """REPORT.md and every details page."""
    return "\n".join(p.read_text() for p in [out / "REPORT.md", *sorted(out.glob("*/*.md"))])


@pytest.fixture
def fixture_file(tmp_path):
    rows = [
        row("single", 1, 64, ips=10000), row("single", 1, 128, ips=18000), row("single", 1, 256, status="oom", reason="CUDA out of memory"),
        row("ddp", 2, 64, ips=19000), row("ddp", 2, 128, ips=35000), row("ddp", 2, 256, status="skipped", reason="not attempted"),
        row("dp", 2, 64, ips=6000), row("dp", 2, 128, status="error", reason="worker died"),
        row("dp", 2, 64, ips=200, cudnn=True),
        row("single", 1, 64, precision="amp-bf16", ips=16000), row("ddp", 2, 64, precision="amp-bf16", ips=30000),
        row("ddp", 2, 64, ips=5000, gpu_name="NVIDIA A100"),  # other hardware: never compared with the H200 rows
    ]
    path = tmp_path / "fixture.json"
    results.write(path, rows)
    return path


def test_report_produces_every_figure_and_table(fixture_file, tmp_path):
    out = tmp_path / "plots"
    proc = run_cli("report", str(fixture_file), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    text = everything(out)
    for kind in ("throughput", "memory", "efficiency", "amp-speedup"):
        assert (out / f"nvidia-h200-resnet18-small-{kind}.png").stat().st_size > 10_000
        assert (out / f"nvidia-h200-resnet18-small-{kind}.svg").exists()
        assert f"](../nvidia-h200-resnet18-small-{kind}.png)" in text  # from the details page, one folder down
    assert "## resnet18-small on NVIDIA H200" in text and "## resnet18-small on NVIDIA A100" in text
    assert (out / "nvidia-h200" / "resnet18-small.md").exists()
    # Status cells, never blanks or zeros.
    assert "oom" in text and "skipped: not attempted" in text and "error: worker died" in text
    assert "x1.90 (95%)" in text  # ddp 19000 / single 10000 over 2 GPUs
    assert "fastest is ddp (2 GPU)" in text
    assert "dp reaches 32-32% of DDP's throughput" in text
    assert "cudnn.benchmark on" in text and "30x faster off" in text
    assert "single (1 GPU) 128 (OOM at 256)" in text
    csv_tables = list(out.glob("*images-s.csv"))
    assert csv_tables and "batch 64" in csv_tables[0].read_text()


def test_speedups_never_cross_hardware(fixture_file):
    frame = report.add_speedups(report.load_frame([fixture_file]))
    a100 = frame[frame["gpu_name"] == "NVIDIA A100"]
    assert a100["speedup"].isna().all()  # no single baseline on the A100: no speed-up invented


@pytest.mark.parametrize("content, message", [
    ("", "is empty"), ("{not json", "corrupt or truncated"), ('{"rows": []}', "not a parabench results file"),
])
def test_bad_input_files_are_named(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    proc = run_cli("report", str(bad), "--out", str(tmp_path / "p"))
    assert proc.returncode == 2 and message in proc.stderr and str(bad) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_missing_file_is_named(tmp_path):
    proc = run_cli("report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "p"))
    assert proc.returncode == 2 and "nope.json: no such results file" in proc.stderr


def test_a_run_where_every_case_failed_still_reports(tmp_path):
    path = tmp_path / "failed.json"
    results.write(path, [row("single", 1, 64, status="error", reason="worker died"),
                         row("ddp", 2, 64, status="oom", reason="CUDA out of memory")])
    proc = run_cli("report", str(path), "--out", str(tmp_path / "plots"))
    assert proc.returncode == 0, proc.stderr
    text = everything(tmp_path / "plots")
    assert "error: worker died" in text and "oom" in text


def test_speedups_pair_rows_with_the_same_sgd_kernels():
    frame = pd.DataFrame([
        row("single", 1, 64, ips=10000, sgd_impl="foreach"), row("single", 1, 64, ips=12000, sgd_impl="fused"),
        row("ddp", 2, 64, ips=19000, sgd_impl="foreach"), row("ddp", 2, 64, ips=22800, sgd_impl="fused"),
    ]).assign(hardware="NVIDIA H200", variant=lambda f: f.apply(report.variant, axis=1))
    merged = report.add_speedups(frame).set_index(["strategy", "sgd_impl"])
    assert merged.loc[("ddp", "foreach"), "speedup"] == pytest.approx(1.9)
    assert merged.loc[("ddp", "fused"), "speedup"] == pytest.approx(1.9)
    # PyTorch's choice on GPUs (foreach) is unmarked; anything else is named in the label.
    assert merged.loc[("ddp", "foreach"), "variant"] == "" and merged.loc[("ddp", "fused"), "variant"] == "sgd=fused"


def test_achieved_tflops_are_set_against_the_measured_peak(fixture_file, tmp_path):
    (fixture_file.parent / "h200.probe.json").write_text(json.dumps({"gpu": "NVIDIA H200", "bf16_matmul_tflops": 4.0}))
    out = tmp_path / "plots"
    assert run_cli("report", str(fixture_file), "--out", str(out)).returncode == 0
    text = (out / "REPORT.md").read_text()
    assert "## Achieved TFLOP/s on NVIDIA H200 against its dense bf16 matrix rate" in text
    # The fixture's rows all have 1.0 TFLOP/s in total: single 1.0 per GPU (25% of 4.0), ddp 0.5 (12.5%).
    section = text.split("## Achieved TFLOP/s")[1].split("\n## ")[0]
    cells = {line.split("|")[1].strip(): line.split("|")[-2].strip() for line in section.splitlines()
             if line.startswith("| ") and "strategy" not in line}
    assert cells["single"] == "25" and cells["ddp"] == "12.5"
    assert "NVIDIA A100 against" not in text  # no probe for that GPU


def test_the_report_shows_the_step_anatomy_of_the_committed_h200_rows(tmp_path):
    """Rows with a breakdown get a stacked-bar figure per precision and batch and findings
    computed from it, even where a later run of the same cases had no --anatomy."""
    from bench.report import page as report

    folder = Path(__file__).resolve().parent.parent / "results" / "reference" / "h200" / "anatomy"
    report.write_report(sorted(folder.glob("*.json")), tmp_path)
    text = everything(tmp_path)
    assert text.count("## Step anatomy") == 2
    assert (tmp_path / "nvidia-h200-resnet18-anatomy-amp-fp16-b256.svg").exists()
    assert "ddp (2 GPU, channels_last) takes +1.83 ms per profiled step against single (1 GPU, channels_last): idle +1.20" in text
    assert "dp (2 GPU, channels_last) is host-bound" in text


# --- the answer, first ------------------------------------------------------------------
def answer_frame(rows):
    frame = pd.DataFrame(rows).assign(hardware="NVIDIA H200", variant=lambda f: f.apply(report.variant, axis=1))
    return report.add_speedups(frame.assign(source="run.json"))


def test_the_answer_names_the_fastest_and_the_runner_up_with_the_gap():
    from bench.report import answer

    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000), row("dp", 2, 64, ips=6000),
                          row("zero1", 2, 64, ips=18500)])
    ((precision, where, group),) = list(answer.answer_groups(frame))
    assert (precision, where) == ("fp32", "2 GPUs")
    (line,) = answer.answer_table(group).to_dict("records")
    assert line["fastest"] == "ddp" and line["speed-up (efficiency)"] == "x1.90 (95%)"
    assert line["images/s"] == "19.0k (18.1k-19.9k)" and line["memory/GPU MiB"] == "6400"
    # 19000 vs 18500: 2.7% apart, and the spreads (+-5%) overlap: a tie, said so.
    assert line["runner-up"] == "zero1" and line["gap"] == "2.7% (tie)"


def test_a_clear_gap_is_not_a_tie_and_knobs_name_the_configuration():
    from bench.report import answer

    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000, channels_last=True),
                          row("ddp", 2, 64, ips=17000), row("dp", 2, 64, ips=6000)])
    ((_, _, group),) = list(answer.answer_groups(frame))
    (line,) = answer.answer_table(group).to_dict("records")
    # The runner-up is another strategy, not the same one with other knobs.
    assert line["fastest"] == "ddp (channels_last)" and line["runner-up"] == "dp" and line["gap"] == "216.7%"


def test_missing_and_out_of_memory_cells_say_so():
    from bench.report import answer

    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000),
                          row("ddp", 2, 128, status="oom", reason="CUDA out of memory"),
                          row("dp", 2, 128, status="oom", reason="CUDA out of memory"),
                          row("ddp", 2, 256, ips=40000), row("dp", 2, 256, status="oom", reason="CUDA out of memory")])
    ((_, _, group),) = list(answer.answer_groups(frame))
    lines = {line["batch/GPU"]: line for line in answer.answer_table(group).to_dict("records")}
    assert lines[64]["runner-up"] == "only one strategy ran" and lines[64]["gap"] == ""
    assert lines[128]["fastest"] == "none ran (out of memory: ddp, dp)"
    assert lines[256]["runner-up"] == "only one strategy ran; out of memory: dp"
    # No single at 256 in this run: no speed-up invented.
    assert lines[256]["speed-up (efficiency)"] == ""


def test_efficiency_above_100_percent_is_flagged():
    from bench.report import answer

    noisy = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=20400)])
    tight = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=24000)])
    for frame, expected in ((noisy, "x2.04 (102%, noise)"), (tight, "x2.40 (120%, above linear)")):
        ((_, _, group),) = list(answer.answer_groups(frame))
        assert answer.answer_table(group).to_dict("records")[0]["speed-up (efficiency)"] == expected


def test_small_rates_keep_their_digits():
    from bench.report import answer

    assert answer.rate(0.7) == "0.7" and answer.rate(3.14) == "3.1" and answer.rate(47.2) == "47"
    assert answer.rate(19000) == "19.0k"


def test_the_first_screen_is_the_answer(fixture_file, tmp_path):
    out = tmp_path / "plots"
    assert run_cli("report", str(fixture_file), "--out", str(out)).returncode == 0
    lines = (out / "REPORT.md").read_text().splitlines()
    # Title, one paragraph, then the first answer table within the first screen (40 lines).
    assert lines[0].startswith("# parabench report")
    first_table = next(i for i, line in enumerate(lines) if line.startswith("|"))
    assert first_table < 12 and "fastest" in lines[first_table] and "runner-up" in lines[first_table]
    text = "\n".join(lines)
    assert ("Details, figures and every table: [resnet18-small on NVIDIA H200](nvidia-h200/resnet18-small.md)"
            in text)
    assert "DataParallel-style strategies (dp, dp-fn, dp-manual) reach 32-32% of ddp's throughput" in text
    assert "cuDNN 9.19" in text and "91900" not in text


def test_the_parameter_counts_are_the_models():
    from bench.workloads import facts, names

    for name in names():  # counted on the meta device (vit-large's weights are 1.2 GB)
        assert report.PARAMETERS[name] == facts(name)["parameters"]


def test_the_memory_section_bounds_what_sharding_can_save():
    rows = [row("ddp", 2, 64, ips=19000, model="resnet18"), row("zero1", 2, 64, ips=15000, model="resnet18"),
            row("fsdp2", 2, 64, ips=12000, model="resnet18")]
    rows[1]["peak_alloc_mib"], rows[2]["peak_alloc_mib"] = 6378.0, 6300.0
    frame = answer_frame(rows)
    text = "\n".join(report.memory_section(frame))
    assert "its model state (fp32 weights, gradients and SGD momentum) is 134 MiB per replica" in text
    cells = {c[3]: c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in text.splitlines()
                                if line.startswith("| fp32"))}
    # ZeRO-1 shards the momentum (44.6 MiB): on 2 GPUs at most 22 MiB; FSDP2 all of it: 67 MiB.
    assert cells["zero1 (2 GPU)"][4:9] == ["6378", "6400", "22", "22", "79% (71-87)"]
    assert cells["fsdp2 (2 GPU)"][4:9] == ["6300", "6400", "100", "67", "63% (57-70)"]


def test_a_gap_between_two_runs_says_so():
    from bench.report import answer

    frame = pd.concat([answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)]),
                       answer_frame([row("dp", 2, 64, ips=6000)]).assign(source="other.json")])
    ((_, _, group),) = list(answer.answer_groups(frame))
    (line,) = answer.answer_table(group).to_dict("records")
    assert line["runner-up"] == "dp" and line["gap"] == "216.7% (different runs)"
    # Sentences divide cases of one run only: dp and ddp ran in different files here.
    assert not any("DataParallel" in s for s in answer.sentences(frame))
