"""The reporter on a small fixture of results, including oom, skipped and error rows."""
import json
from pathlib import Path

import pandas as pd
import pytest

import strategies
from bench.report import frame as report
from bench.report import pages, sections
from bench.cases import results
from tests.conftest import REPO, run_cli

ENV = {"gpu_name": "NVIDIA H200", "device": "cuda", "cpu": "x", "torch": "2.11", "cuda": "13.0", "cudnn": "91900",
       "nccl": "2.28.9", "data": "device", "tf32": "default", "channels_last": False, "compile": False,
       "model": "resnet18-small", "options": "{}", "warmup": 1, "steps": 2, "trials": 1, "seed": 0,
       "optimizer_impl": "foreach", "execution": "eager"}


def row(strategy, n, batch, precision="fp32", status="ok", ips=None, reason="", cudnn=None, **extra):
    r = {**ENV, "strategy": strategy, "precision": precision, "n_gpus": n, "n_replicas": n,
         "gpus": ",".join(map(str, range(n))),
         "batch_per_gpu": batch, "global_batch": batch * n, "status": status, "reason": reason,
         "cudnn_benchmark": cudnn if cudnn is not None else strategy not in strategies.threaded(),
         "date": "2026-11-21", **extra}
    if status == "ok":
        step = batch * n / ips * 1000
        r.update(items_per_s=ips, items_per_s_p10=ips * 0.95, items_per_s_p90=ips * 1.05, step_ms_p50=step,
                 step_ms_p10=step * 0.95, step_ms_p90=step * 1.05, peak_alloc_mib=100.0 * batch,
                 peak_alloc_mib_min=90.0 * batch, peak_reserved_mib=120.0 * batch, tflops=1.0)
    return r


def everything(out: Path) -> str:
    """REPORT.md and every details page."""
    return "\n".join(p.read_text() for p in [out / "REPORT.md", *sorted(out.glob("*/*.md"))])


@pytest.fixture
def fixture_file(tmp_path):
    rows = [
        row("single", 1, 64, ips=10000), row("single", 1, 128, ips=18000),
        row("single", 1, 256, status="oom", reason="CUDA out of memory"),
        row("ddp", 2, 64, ips=19000), row("ddp", 2, 128, ips=35000),
        row("ddp", 2, 256, status="skipped", reason="not attempted"),
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
    assert "**resnet18-small on NVIDIA H200**" in text and "**resnet18-small on NVIDIA A100**" in text
    assert (out / "nvidia-h200" / "resnet18-small.md").exists()
    # Status cells, never blanks or zeros.
    assert "oom" in text and "skipped: not attempted" in text and "error: worker died" in text
    assert "x1.90 (95%)" in text  # ddp 19000 / single 10000 over 2 GPUs
    assert "fastest is ddp (2 GPU)" in text
    assert "dp reaches 32-32% of ddp's throughput" in text
    assert "cudnn.benchmark on" in text and "30x faster off" in text
    assert "single (1 GPU) 128 (OOM at 256)" in text
    csv_tables = [p for p in out.glob("*-throughput.csv") if "-fp32-" in p.name]
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
        row("single", 1, 64, ips=10000, optimizer_impl="foreach"), row("single", 1, 64, ips=12000,
                                                                       optimizer_impl="fused"),
        row("ddp", 2, 64, ips=19000, optimizer_impl="foreach"), row("ddp", 2, 64, ips=22800, optimizer_impl="fused"),
    ]).assign(hardware="NVIDIA H200", variant=lambda f: f.apply(report.variant, axis=1))
    merged = report.add_speedups(frame).set_index(["strategy", "optimizer_impl"])
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
    folder = Path(__file__).resolve().parent.parent / "results" / "reference" / "h200" / "anatomy"
    pages.write_report(sorted(folder.glob("*.json")), tmp_path, every_run=True)
    text = everything(tmp_path)
    assert text.count("## Step anatomy") == 3  # REPORT.md's pointer, and one section on each details page
    assert (tmp_path / "nvidia-h200-resnet18-anatomy-amp-fp16-b256.svg").exists()
    assert ("ddp (2 GPU, channels_last) takes +1.83 ms per profiled step against single (1 GPU, channels_last): "
            "idle +1.20") in text
    assert "dp (2 GPU, channels_last) is host-bound" in text


# --- the answer, first ------------------------------------------------------------------
def answer_frame(rows, source="run.json"):
    frame = pd.DataFrame(rows).assign(hardware="NVIDIA H200", variant=lambda f: f.apply(report.variant, axis=1))
    return report.add_regimes(report.add_speedups(frame.assign(source=source)))


def one_group(frame, where="2 GPUs"):
    from bench.report import answer

    return [r for r in answer.records(frame) if r["where"] == where]


def test_the_answer_names_the_fastest_and_the_runner_up_with_the_gap():
    from bench.report import answer_text

    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000), row("dp", 2, 64, ips=6000),
                          row("zero1", 2, 64, ips=18500)])
    (rec,) = one_group(frame)
    assert rec["strategy"] == "ddp" and rec["speedup"] == pytest.approx(1.9) and rec["peak_alloc_mib"] == 6400
    # 19000 vs 18500: 2.7% apart, and the spreads (+-5%) overlap: a tie, said so.
    assert rec["runner_up"] == "zero1" and rec["gap_pct"] == 2.7 and rec["tie"] and not rec["unstable"]
    (line,) = answer_text.table([rec]).to_dict("records")
    assert (line["recommended"] == "ddp" and line[f"vs {strategies.baseline()}"] == "x1.90 (95%)"
            and line["gap"] == "+2.7%, tie")
    assert line["images/s (p10-p90)"] == "19.0k (18.1k-19.9k)" and line["MiB/GPU"] == "6400"


def test_a_wide_row_is_ranked_by_its_interval_and_leaves_the_order_open_only_where_it_matters():
    """A row of an older file (no median's interval: its p10-p90 stands in) with a 38% spread ties
    with ddp; 2.5% behind, it changes nothing and ddp, the simpler, is named. 8% ahead, its interval
    cannot tell whether it is faster: the order is open, said so."""
    wide = row("zero1", 2, 64, ips=11700)
    wide.update(items_per_s_p10=9500.0, items_per_s_p90=13900.0)  # 38% of the median
    (rec,) = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=12000), wide]))
    assert rec["strategy"] == "ddp" and rec["recommended"] and not rec["unstable"] and not rec["left_out"]
    assert rec["runner_up"] == "zero1" and rec["tie"]
    faster = {**wide, "items_per_s": 13000.0, "items_per_s_p10": 10000.0, "items_per_s_p90": 15000.0}
    (rec,) = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=12000), faster]))
    assert rec["strategy"] == "ddp" and rec["unstable"]  # a faster case could not be ranked: the order is open
    assert [x["label"] for x in rec["unjudged"]] == ["zero1"] and "+8.3%" in rec["unjudged"][0]["why"]


def test_a_stopped_case_is_not_recommended_and_the_headline_says_unstable():
    from bench.report import answer_text

    # The wall clock says the steps were stopped or starved (trials that took 9 and 4 times what
    # their steps add up to): neither can lead until measured again.
    shaky = row("allreduce-scratch", 1, 64, ips=72.0, wall_items_per_s=8.1)
    shaky.update(items_per_s_p10=70.0, items_per_s_p90=74.0)
    stopped = row("dp-fn", 1, 64, ips=75.0, wall_items_per_s=18.0)
    frame = answer_frame([row("single", 1, 64, ips=59.0), shaky, stopped])
    (rec,) = one_group(frame, "1 GPU")
    assert rec["strategy"] == "single" and rec["unstable"]
    whys = {x["label"]: x["why"] for x in rec["left_out"]}
    assert "wall-clock" in whys["allreduce-scratch"] and "stopped or starved" in whys["dp-fn"]
    line = answer_text.actions(frame, one_group(frame, "1 GPU"))
    # Neither may be faster beyond what disturbed it, nor be ruled out: unjudged, said so, nothing recommended.
    assert line.startswith("Unjudged: the simplest configuration nothing beats is `single`") and "re-run" in line
    assert "`dp-fn` measured 75 img/s and may be faster" in line and "Recommended" not in line
    assert answer_text.table([rec]).to_dict("records")[0]["gap"] == "unjudged, re-run"


def test_an_unjudged_configuration_slower_by_its_median_is_not_called_faster():
    """A CPU run: `allreduce-scratch` tied with the pick, its median 54% lower, its interval overlapping;
    the answer said it "may be faster"."""
    from bench.report import answer_text

    slower = row("allreduce-scratch", 1, 64, ips=27.0)
    slower.update(items_per_s_p10=10.0, items_per_s_p90=70.0, items_per_s_ci_lo=12.0, items_per_s_ci_hi=66.0)
    pick = row("single", 1, 64, ips=59.0)
    pick.update(items_per_s_ci_lo=40.0, items_per_s_ci_hi=62.0)
    frame = answer_frame([pick, slower])
    (rec,) = one_group(frame, "1 GPU")
    assert rec["strategy"] == "single" and [x["label"] for x in rec["unjudged"]] == ["allreduce-scratch"], rec
    said = answer_text.actions(frame, [rec])
    assert "`allreduce-scratch` measured 27 img/s and may be as fast" in said and "may be faster" not in said, said


def test_ties_at_one_device_go_to_single():
    """A run where single and dp-fn tie at one device (dp-fn 0.3% ahead, spreads overlapping) is
    answered single: every wrapper only adds host work there."""
    (rec,) = one_group(answer_frame([row("single", 1, 2048, ips=75500), row("dp-fn", 1, 2048, ips=75800),
                                     row("allreduce-scratch", 1, 2048, ips=75700)]), "1 GPU")
    assert rec["strategy"] == "single" and rec["recommended"]
    assert rec["fastest"]["label"] == "dp-fn" and rec["fastest"]["pick_vs_fastest_pct"] == -0.4
    assert set(rec["ties"]) == {"dp-fn", "allreduce-scratch"} and rec["tie"]
    # One pair, one figure: the sentence said "+0.4%" (dp-fn over the pick), the table "-0.4%" (the pick over it).
    from bench.report import answer_text

    assert answer_text.table([rec]).to_dict("records")[0]["gap"] == "-0.4%, tie"
    assert "`single` measured -0.4% against `dp-fn` (within the intervals" in answer_text.actions(
        answer_frame([row("single", 1, 2048, ips=75500), row("dp-fn", 1, 2048, ips=75800)]),
        [rec])


def test_a_lever_that_beats_the_spread_is_recommended_and_its_gain_carried():
    """A run where ddp with compile beats eager ddp beyond the spread at 2 devices is answered
    with compile, and the record carries each lever's measured gain."""
    rows = [row("single", 1, 256, ips=10000), row("ddp", 2, 256, ips=19000),
            row("ddp", 2, 256, ips=25000, execution="compile"),
            row("ddp", 2, 256, ips=19100, optimizer_impl="fused")]
    (rec,) = one_group(answer_frame(rows))
    assert rec["strategy"] == "ddp" and rec["config"] == {"execution": "compile"}
    gains = {(lever["on"], lever["lever"]): lever for lever in rec["levers"]}
    assert gains[("ddp", "execution=compile")]["gain"] == pytest.approx(25000 / 19000, abs=1e-4)
    assert gains[("ddp", "execution=compile")]["kept"]
    assert gains[("ddp", "sgd=fused")]["verdict"] == "within the intervals" and not gains[("ddp", "sgd=fused")]["kept"]
    # Within the spread, the lever is not worth its knob: eager is named.
    rows[2] = row("ddp", 2, 256, ips=19500, execution="compile")
    (rec,) = one_group(answer_frame(rows))
    assert rec["strategy"] == "ddp" and rec["config"] == {} and rec["fastest"]["label"] == "ddp+compile"


def test_mfu_is_taken_against_the_gpus_dense_peak_for_the_precision():
    from bench.core.peaks import dense_peak
    from bench.report import answer

    r = {**row("single", 1, 256, precision="amp-bf16", ips=100000, flops_per_item=2.73e9), "device": "cuda",
         "gpu_name": "NVIDIA H100 80GB HBM3"}
    share, peak = answer.mfu(r)
    assert share == pytest.approx(2.73e9 * 1e5 / 1e12 / 989.4) and "989.4 TFLOP/s" in peak
    assert dense_peak("NVIDIA H100 PCIe", "fp32")[0] == 378.0  # convolutions in TF32 by default
    assert dense_peak("NVIDIA H100 PCIe", "fp32", "off")[0] == 51.2
    assert dense_peak("Some Future GPU", "amp-bf16") is None  # never guessed
    assert answer.mfu({**r, "device": "cpu"}) == (None, "")


def test_a_clear_gap_is_not_a_tie_and_knobs_get_a_short_label():
    from bench.report import answer
    from bench.report.labels import Legend

    legend = Legend()
    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000, channels_last=True,
                                                                execution="cuda-graph", optimizer_impl="fused"),
                          row("ddp", 2, 64, ips=17000), row("dp", 2, 64, ips=6000)])
    (rec,) = [r for r in answer.records(frame, legend) if r["where"] == "2 GPUs"]
    # The runner-up is another strategy, not the same one with other knobs.
    assert rec["label"] == "ddp+graph+CL+fused" and rec["runner_up"] == "dp" and rec["gap_pct"] == 216.7
    assert rec["config"] == {"execution": "cuda-graph", "channels_last": True, "sgd": "fused"}
    assert "`ddp+graph+CL+fused` = ddp (execution=cuda-graph, channels_last, sgd=fused)" in legend.lines()[0]
    long = row("ddp", 2, 64, ips=1, channels_last=True, execution="compile", compile_mode="max-autotune-no-cudagraphs",
               optimizer_impl="fused", tf32="on", data="host", options='{"bucket_cap_mb": 100, "static_graph": true}')
    assert len(legend.short(pd.Series({**long, "variant": report.variant(long)}))) <= 40


def test_at_one_device_the_baseline_competes():
    (rec,) = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 1, 64, ips=9800,
                                                                          optimizer_impl="fused")]),
                       "1 GPU")
    assert rec["strategy"] == "single" and rec["runner_up"] == "ddp+fused"


def test_missing_and_out_of_memory_cells_say_so():
    from bench.report import answer_text

    frame = answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000),
                          row("ddp", 2, 128, status="oom", reason="CUDA out of memory"),
                          row("dp", 2, 128, status="oom", reason="CUDA out of memory"),
                          row("ddp", 2, 256, ips=40000), row("dp", 2, 256, status="oom", reason="CUDA out of memory")])
    lines = {line["batch/GPU"]: line for line in answer_text.table(one_group(frame)).to_dict("records")}
    assert lines[64]["runner-up"] == "only one strategy" and lines[64]["gap"] == ""
    assert lines[128]["recommended"] == "none ran (OOM)"
    assert lines[256][f"vs {strategies.baseline()}"] == "no single"  # none at 256 in this run: no speed-up invented
    sentence = answer_text.actions(frame, one_group(frame))
    assert sentence.startswith("Recommended: `ddp` (fp32, 2 GPUs, 256/GPU): 40.0k img/s")
    assert "At 64/GPU every fastest case is host-bound" in sentence


def test_efficiency_above_100_percent_is_flagged():
    from bench.report import answer_text

    for ips, expected in ((20400, "x2.04 (102%, noise)"), (24000, "x2.40 (120%, above linear)")):
        recs = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=ips)]))
        assert answer_text.table(recs).to_dict("records")[0][f"vs {strategies.baseline()}"] == expected


def test_small_rates_keep_their_digits():
    from bench.report import findings

    assert findings.rate(0.7) == "0.7" and findings.rate(3.14) == "3.1" and findings.rate(47.2) == "47"
    assert findings.rate(19000) == "19.0k"


def ladder(strategy, n, steps_ms: dict, **extra):
    """Rows of one series with the given median step times (ms) per batch."""
    return [row(strategy, n, b, ips=b * n / t * 1000, **extra) for b, t in steps_ms.items()]


def test_the_regime_comes_from_the_batch_ladder_or_the_anatomy():
    # A ladder shaped like eager single's, bf16 + CL (docs/findings.md, finding 8): flat, then growing.
    frame = answer_frame(ladder("single", 1, {32: 6.0, 256: 7.0, 512: 8.0, 1024: 12.9})
                         + ladder("ddp", 2, {32: 6.0, 64: 6.2})  # flat: host-bound throughout
                         + [row("dp", 2, 64, ips=3000, anatomy_idle_ms=1.0, anatomy_step_ms=10.0)])
    got = {(r["strategy"], r["batch_per_gpu"]): r["regime"] for _, r in frame.iterrows()}
    assert got[("single", 32)] == got[("single", 256)] == "host-bound"
    assert got[("single", 512)] == got[("single", 1024)] == "GPU-bound"
    assert got[("ddp", 32)] == got[("ddp", 64)] == "host-bound"
    assert got[("dp", 64)] == "GPU-bound"  # measured: idle 10% of the step


def test_summaries_name_their_regime():
    from bench.report import findings

    rows = (ladder("single", 1, {32: 6.0, 1024: 40.0})
            + ladder("single", 1, {32: 6.3, 1024: 25.0}, precision="amp-bf16"))
    text = " ".join(findings.sentences(answer_frame(rows)))
    assert ("Mixed precision over fp32" in text and "over 1 GPU-bound cases" in text
            and "over 1 host-bound cases" in text)
    assert "where the host sets the pace" in text


def write_run(path, rows, date):
    results.write(path, [{**r, "date": date} for r in rows])
    return path


def answer_json(*args):
    proc = run_cli("answer", "--json", *map(str, args))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_answer_json_names_single_at_one_gpu_and_the_fastest_at_two(tmp_path):
    path = write_run(tmp_path / "run.json", [row("single", 1, 64, ips=10000), row("ddp", 1, 64, ips=9000),
                                             row("ddp", 2, 64, ips=19000), row("zero1", 2, 64, ips=15000)],
                     "2026-11-21")
    recs = {r["devices"]: r for r in answer_json(path)}
    assert recs[1]["strategy"] == "single" and recs[1]["runner_up"] == "ddp"
    assert recs[2]["strategy"] == "ddp" and recs[2]["speedup"] == pytest.approx(1.9) and recs[2]["runner_up"] == "zero1"
    for key in ("hardware", "model", "precision", "batch_per_gpu", "config", "items_per_s", "peak_alloc_mib", "gap_pct",
                "tie", "regime", "unstable"):
        assert key in recs[2]


def test_no_ratio_divides_rows_of_two_runs(tmp_path):
    old = write_run(tmp_path / "old.json", [row("single", 1, 64, ips=10000), row("dp", 2, 64, ips=6000)], "2026-11-20")
    new = write_run(tmp_path / "new.json", [row("ddp", 2, 64, ips=30000), row("zero1", 2, 64, ips=20000)], "2026-11-21")
    recs = answer_json(old, new, "--all")
    by_run = {(r["run"], r["devices"]): r for r in recs}
    # The newer run has no single: no speed-up, and the runner-up is of its own run.
    assert by_run[("new.json", 2)]["speedup"] is None and by_run[("new.json", 2)]["runner_up"] == "zero1"
    assert by_run[("old.json", 2)]["speedup"] == pytest.approx(0.6) and by_run[("old.json", 2)]["runner_up"] is None
    # By default: the newest run alone.
    assert {r["run"] for r in answer_json(old, new)} == {"new.json"}


def test_a_strategy_skipped_in_the_newest_run_is_not_named_from_an_older_one(tmp_path):
    cpu = {"device": "cpu", "gpu_name": None, "cpu": "AMD EPYC (2 threads)", "peak_alloc_mib": None}

    def cpu_row(strategy, n, **kw):
        r = row(strategy, n, 4, **kw)
        return {**r, **cpu, "gpus": "", "n_gpus": 0, "cudnn_benchmark": None,
                **({"peak_alloc_mib": None, "peak_alloc_mib_min": None} if r["status"] == "ok" else {})}

    write_run(tmp_path / "run-old.json", [cpu_row("single", 1, ips=50), cpu_row("mxnet-gluon", 2, ips=200)],
              "2026-11-01")
    write_run(tmp_path / "run-new.json", [cpu_row("single", 1, ips=56), cpu_row("allreduce-scratch", 2, ips=47),
                                          cpu_row("mxnet-gluon", 2, status="skipped", reason="MXNet not installed")],
              "2026-11-22")
    recs = answer_json("--results-dir", tmp_path)
    assert all(r["strategy"] != "mxnet-gluon" and r["runner_up"] != "mxnet-gluon" for r in recs)
    (multi,) = [r for r in recs if r["devices"] == 2]
    assert multi["strategy"] == "allreduce-scratch" and multi["speedup"] == pytest.approx(47 / 56)
    out = tmp_path / "plots"
    assert run_cli("report", "--results-dir", str(tmp_path), "--out", str(out)).returncode == 0
    head = "\n".join((out / "REPORT.md").read_text().splitlines()[:40])
    assert "run-new.json" in head and "mxnet-gluon" not in head.split("## The answer")[1].split("Configurations")[0]


def cells(lines):
    return [c.strip() for line in lines if line.startswith("|") and not set(line) <= set("|-: ")
            for c in line.strip("|").split("|")]


def test_the_first_screen_is_the_answer(fixture_file, tmp_path):
    out = tmp_path / "plots"
    assert run_cli("report", str(fixture_file), "--out", str(out)).returncode == 0
    lines = (out / "REPORT.md").read_text().splitlines()
    assert lines[0].startswith("# parabench report")
    first = "\n".join(lines[:40])
    assert "- **resnet18-small on NVIDIA H200**: Recommended: `ddp` (fp32, 2 GPUs, 128/GPU): 35.0k img/s" in first
    assert "Avoid dp at 64/GPU" in first and "cudnn.benchmark on: up to 30x slower" in first
    assert any(line.startswith("| ") and "recommended" in line and "runner-up" in line for line in lines[:40])
    assert max(map(len, cells(lines[:40]))) <= 40
    text = "\n".join(lines)
    assert "[resnet18-small on NVIDIA H200](nvidia-h200/resnet18-small.md)" in text
    assert "DataParallel-style strategies (dp, dp-fn, dp-manual) reach 32-32% of ddp's throughput" in text
    assert "cuDNN 9.19" in (out / "nvidia-h200" / "resnet18-small.md").read_text()


def test_a_section_is_one_function_in_a_list(fixture_file, tmp_path, monkeypatch):
    def toy(rep):
        return ["## Toy section", "", f"{len(rep.frame)} cases seen.", ""]

    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + [toy])
    pages.write_report([fixture_file], tmp_path)
    assert "## Toy section\n\n12 cases seen." in (tmp_path / "REPORT.md").read_text()


def test_make_plot_twice_gives_identical_files(fixture_file, tmp_path):
    import shutil
    import subprocess
    import sys

    if not shutil.which("make"):
        pytest.skip("no make here")
    out = tmp_path / "plots"

    def plot():
        proc = subprocess.run(["make", "-s", "plot", f"PY={sys.executable}", f"RESULTS={fixture_file.parent}",
                               f"PLOTS={out}"], cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                              text=True, env={**__import__("os").environ,
                                              "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
        assert proc.returncode == 0, proc.stderr
        return {p.relative_to(out): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    first, second = plot(), plot()
    assert first.keys() == second.keys() and len(first) > 10
    assert [p for p in first if first[p] != second[p]] == []


def test_the_memory_section_bounds_what_sharding_can_save():
    rows = [row("ddp", 2, 64, ips=19000, model="resnet18"), row("zero1", 2, 64, ips=15000, model="resnet18"),
            row("fsdp2", 2, 64, ips=12000, model="resnet18")]
    rows[1]["peak_alloc_mib"], rows[2]["peak_alloc_mib"] = 6378.0, 6300.0
    assert sections.memory_section(answer_frame(rows)) == []  # no parameter count in the rows: no bound
    frame = answer_frame([{**r, "parameters": 11_689_512} for r in rows])
    text = "\n".join(sections.memory_section(frame))
    assert "its model state (fp32 weights, gradients and SGD momentum) is 134 MiB per replica" in text
    cells_ = {c[3]: c for c in ([x.strip() for x in line.split("|")[1:-1]] for line in text.splitlines()
                                if line.startswith("| fp32"))}
    # ZeRO-1 shards the momentum (44.6 MiB): on 2 GPUs at most 22 MiB; FSDP2 all of it: 67 MiB.
    assert cells_["zero1 (2 GPU)"][4:9] == ["6378", "6400", "22", "22", "79% (71-87)"]
    assert cells_["fsdp2 (2 GPU)"][4:9] == ["6300", "6400", "100", "67", "63% (57-70)"]
    # What each strategy keeps and sends comes from its declaration (strategies/*.py), not its name.
    assert "zero1 shards the optimiser state (44.6 MiB) and sends per step: all-reduce of the gradients (44.6 MiB), " \
           "broadcast of the parameters (44.6 MiB)" in text
    assert "fsdp2 shards the parameters, gradients and optimiser state (133.8 MiB)" in text
    assert "ddp shards nothing and sends per step: all-reduce of the gradients (44.6 MiB)" in text


def test_sentences_divide_cases_of_one_run_only():
    from bench.report import findings

    frame = pd.concat([answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)]),
                       answer_frame([row("dp", 2, 64, ips=6000)], source="other.json")])
    assert not any("DataParallel" in s for s in findings.sentences(frame))


def test_the_end_of_a_sweep_says_where_its_time_went():
    from bench.report.phases import summary

    rows = [{"status": "ok", "worker_start_s": 5.0, "build_s": 2.0, "warmup_s": 10.0, "timed_s": 30.0,
             "counters_s": 3.0},
            {"status": "skipped"}]
    assert summary(rows, 60.0) == ("60 s in all: measuring 40 s (warm-up 10, timed 30), worker start-up 5 s, "
                                   "building and compiling 2 s, counting 3 s, the rest 10 s")


def test_noise_never_names_a_strategy_several_times_slower():
    """2 x H200, 256/GPU (a default search there): ddp read 42.6k with a 35% spread (p10 36.9k), fsdp2 14.8k
    (p90 16.7k). Even ddp's slow end is twice fsdp2's fast end: ddp is faster whatever its spread, and is
    named without a caveat (its steps spread; nothing stopped them)."""
    from bench.report import answer_text

    ddp = row("ddp", 2, 256, ips=42600, precision="amp-bf16")
    ddp.update(items_per_s_p10=36900.0, items_per_s_p90=51800.0)  # 35% of the median
    fsdp2 = row("fsdp2", 2, 256, ips=14800, precision="amp-bf16")
    fsdp2.update(items_per_s_p10=14100.0, items_per_s_p90=16700.0)
    frame = answer_frame([row("single", 1, 256, ips=27000, precision="amp-bf16"), ddp, fsdp2,
                          row("allreduce-scratch", 2, 256, ips=14000, precision="amp-bf16")])
    (rec,) = one_group(frame)
    assert rec["strategy"] == "ddp" and rec["recommended"] and not rec["disturbed"]
    assert rec["runner_up"] == "fsdp2" and not rec["unstable"]
    line = answer_text.actions(frame, one_group(frame))
    assert line.startswith("Recommended: `ddp`") and "disturbed" not in line
    assert answer_text.table([rec]).to_dict("records")[0]["recommended"] == "ddp"


def test_no_speed_up_over_a_baseline_that_was_left_out():
    """A loaded 2-core CPU: `single` came back with a 707% spread, zero1 stable at 17 img/s. The
    answer names zero1 but divides by no disturbed baseline ("x4.04 over single" was printed)."""
    from bench.report import answer, answer_text

    single = row("single", 1, 4, ips=4.2)
    single.update(items_per_s_p10=1.0, items_per_s_p90=30.7, n_gpus=0, gpus="", device="cpu")
    zero1 = row("zero1", 2, 4, ips=17.0, n_gpus=0, gpus="", device="cpu")
    frame = answer_frame([single, zero1])
    (rec,) = [r for r in answer.records(frame) if r["devices"] == 2]
    assert rec["strategy"] == "zero1" and rec["speedup"] is None and rec["efficiency"] is None
    assert "over single" not in answer_text.actions(frame, [rec])
    # The empty cell says why (it was left blank with no reason), and the sentence too.
    assert answer_text.table([rec]).to_dict("records")[0]["vs single"] == "single disturbed"
    assert "no speed-up: single disturbed at this batch" in answer_text.actions(frame, [rec])
    (alone,) = [r for r in answer.records(answer_frame([zero1])) if r["devices"] == 2]
    assert answer_text.table([alone]).to_dict("records")[0]["vs single"] == "no single"


def test_only_one_strategy_is_said_only_where_one_ran():
    """Four strategies ran at 2 GPUs, three came back stopped: the runner-up column names them
    (left out, stopped or starved), not "only one strategy"; with one strategy alone it says so."""
    from bench.report import answer_text

    shaky = []
    for name in ("zero1", "fsdp2", "allreduce-scratch"):
        r = row(name, 2, 64, ips=9000, wall_items_per_s=2000.0)
        shaky.append(r)
    (rec,) = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000), *shaky]))
    cell = answer_text.table([rec]).to_dict("records")[0]["runner-up"]
    assert cell == "no runner-up: allreduce-scratch, fsdp2, zero1 left out (stopped or starved)"
    (alone,) = one_group(answer_frame([row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)]))
    assert answer_text.table([alone]).to_dict("records")[0]["runner-up"] == "only one strategy"


def test_unjudged_cells_name_their_device_count():
    """"Unstable at 2/GPU, 4/GPU, 2/GPU" repeated a batch without its device count."""
    from bench.report import answer, answer_text

    rows = [row("single", 1, 64, ips=10000), row("single", 1, 128, ips=12000)]
    for n in (2, 4):
        for b in (64, 128):
            rows.append(row("ddp", n, b, ips=15000.0 * n))
            wide = row("zero1", n, b, ips=17000.0 * n)
            wide.update(items_per_s_p10=8000.0 * n, items_per_s_p90=20000.0 * n)
            rows.append(wide)
    frame = answer_frame(rows)
    line = answer_text.actions(frame, answer.records(frame))
    assert "64/GPU on 2 GPUs" in line and "128/GPU on 4 GPUs" in line and "Unstable at" not in line


def test_the_html_pages_show_what_a_results_file_holds_as_text(tmp_path):
    """A results row's text that looks like a tag (a strategy or reason `<script>alert(1)</script>`) was
    written raw into index.html. The pages escape everything the report did not write itself."""
    from bench.report.html import page

    shown = page("| strategy |\n| --- |\n| <script>alert(1)</script> |\n\n<img src=x onerror=alert(1)>", "<title>")
    assert "alert(1)</script>" not in shown and "<img src=x" not in shown
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in shown and "<title>&lt;title&gt;</title>" in shown
    path = tmp_path / "run.json"
    results.write(path, [row("single", 1, 64, ips=10000),
                         row("ddp", 2, 64, status="error", reason="<script>alert(1)</script> worker died")])
    out = tmp_path / "plots"
    assert run_cli("report", str(path), "--out", str(out)).returncode == 0
    pages = [p.read_text() for p in out.rglob("*.html")]
    assert pages and not any("<script>alert" in p for p in pages)


def test_a_cpu_run_speaks_of_replicas_not_gpus(tmp_path):
    """"Largest batch that ran, 4/GPU" and "levers at 2/GPU" on a CPU run: a CPU has replicas."""
    from bench.report import answer, answer_text

    cpu = {"gpu_name": "", "device": "cpu", "n_gpus": 0, "gpus": ""}
    frame = answer_frame([row("single", 1, 2, ips=10.0, **cpu), row("single", 1, 4, ips=12.0, **cpu),
                          row("ddp", 2, 2, ips=35.0, **cpu), row("ddp", 2, 4, ips=30.0, **cpu)])
    recs = answer.records(frame)
    text = answer_text.actions(frame, recs) + " ".join(answer_text.lever_lines(recs))
    assert "/GPU" not in text and "Largest batch that ran, 4/replica" in text


SEARCH = Path(__file__).resolve().parent.parent / "results" / "reference" / "h200x2" / "answer" / "search-1.json"


def test_the_figures_and_the_first_screen_show_the_answer(tmp_path):
    """From a real default search on 2 H200s (eager survey, CUDA graph and compile reduce-overhead
    levers): the throughput figure has a point for every strategy at every batch where any of its
    configurations ran ok, at that strategy's best there (its CSV is what it draws), the answer's
    picks starred; REPORT.md's first screen is the answer in at most 15 lines of 100 columns, no
    sentence twice, with the figure."""
    import re

    from bench.report import answer as answers
    from bench.report.frame import load_runs

    out = tmp_path / "plots"
    proc = run_cli("report", str(SEARCH), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in results.load(SEARCH) if r["status"] == "ok"]
    assert {"cuda-graph", "compile"} <= {r["execution"] for r in rows}
    best = {}
    for r in rows:
        key = (r["strategy"], int(r["n_gpus"]), int(r["batch_per_gpu"]))
        best[key] = max(best.get(key, 0.0), r["items_per_s"])
    drawn = pd.read_csv(out / "nvidia-h200-resnet18-small-throughput.csv")
    points = {(r["strategy"], r["gpus"], r["batch_per_gpu"]): r for r in drawn.to_dict("records")}
    assert points.keys() == best.keys()
    assert all(abs(points[k]["items_per_s"] / best[k] - 1) < 1e-9 for k in best)
    assert points[("ddp", 2, 256)]["configuration"] == "graph+CL+fused"  # the answer's pick there, drawn
    picks = {(r["strategy"], r["devices"], r["batch_per_gpu"]) for r in answers.records(load_runs([SEARCH]))}
    assert {k for k, r in points.items() if r["pick"]} == picks and len(picks) == 6

    head = (out / "REPORT.md").read_text().split("\n## ", 1)[0]
    lines = [line for line in head.splitlines() if line.strip()]
    assert len(lines) <= 15 and max(map(len, lines)) <= 100, lines
    sentences = [s for s in re.split(r"(?<=[.:])\s+", " ".join(lines)) if len(s) > 20]
    assert len(sentences) == len(set(sentences)), sentences
    assert "nvidia-h200-resnet18-small-throughput.png" in head
    assert "| 2 GPUs | 256 | `ddp+graph+CL+fused` | 115.5k | x1.78 |" in head


def test_a_stopped_case_alone_at_its_batch_is_not_said_to_hide_a_faster_one(tmp_path):
    """Where the only configuration at a batch was stopped, the answer says so, not that "a
    configuration that may be faster could not be ranked" (there is none)."""
    path = tmp_path / "r.json"
    results.write(path, [row("single", 1, 64, ips=10000), row("single", 1, 128, ips=18000, wall_items_per_s=9000)])
    proc = run_cli("answer", str(path))
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stdout.split())
    assert "At 128/GPU on 1 GPU: the one configuration measured was stopped or starved" in said, said
    assert "may be faster" not in said


def test_the_answer_says_what_it_never_measured_and_a_busy_host_in_every_form(tmp_path):
    """Strategies a run measured nowhere are said once per reason, and a busy host is said, in the
    terminal, in --json and on the report's first screen alike."""
    path = tmp_path / "r.json"
    skipped = [row(s, 2, 64, status="skipped", reason="needs CUDA GPUs (none selected or none on this host)")
               for s in ("dp", "dp-fn", "dp-manual")]
    busy = {"load_avg_start": 7.5, "load_avg_end": 6.0, "host_cpus": 2}
    results.write(path, [row("single", 1, 64, ips=10000, **busy), row("ddp", 2, 64, ips=19000, **busy), *skipped])
    said = run_cli("answer", str(path)).stdout
    assert said.count("Not measured: dp, dp-fn, dp-manual: needs CUDA GPUs (none selected or none on this host).") == 1
    assert "The host was busy when run r.json started: load average 7.5 on 2 CPUs" in said
    recs = json.loads(run_cli("answer", str(path), "--json").stdout)
    why = "needs CUDA GPUs (none selected or none on this host)"
    assert all(r["not_measured"] == [{"strategies": ["dp", "dp-fn", "dp-manual"], "why": why}]
               and r["host_busy"].startswith("The host was busy") for r in recs)
    assert run_cli("report", str(path), "--out", str(tmp_path / "p")).returncode == 0
    head = (tmp_path / "p" / "REPORT.md").read_text().split("\n## ", 1)[0]
    assert "Not measured: dp, dp-fn, dp-manual: needs CUDA GPUs" in head
    assert "The host was busy (load average 7.5" in head


def test_a_cpu_run_s_figures_say_batch_per_replica(tmp_path):
    cpu = {"n_gpus": 0, "gpus": "", "device": "cpu", "gpu_name": "cpu", "cpu": "x"}
    path = tmp_path / "r.json"
    results.write(path, [row("single", 1, 2, ips=10.0, **cpu), row("single", 1, 4, ips=18.0, **cpu),
                         row("ddp", 2, 2, ips=19.0, **cpu), row("ddp", 2, 4, ips=35.0, **cpu)])
    assert run_cli("report", str(path), "--out", str(tmp_path / "p")).returncode == 0
    svgs = " ".join(p.read_text() for p in (tmp_path / "p").glob("*.svg"))
    assert "batch per replica" in svgs and "batch per GPU" not in svgs


def test_figures_divide_within_a_run_skip_stopped_rows_and_a_failed_run_says_so(tmp_path):
    """With --all, a strategy's speed-up in the figures divides by its own run's single, never by
    another run's; a stopped row is no strategy's best where a steady one ran; a run where nothing
    ran ok says so on the first screen."""
    from bench.report.figures import envelope
    from bench.report.frame import load_frame

    first, second = tmp_path / "a.json", tmp_path / "b.json"
    results.write(first, [row("single", 1, 64, ips=10000, date="2026-11-21T10:00"),
                          row("ddp", 2, 64, ips=19000, date="2026-11-21T10:00")])
    results.write(second, [row("ddp", 2, 128, ips=30000, date="2026-11-22T10:00"),
                           row("ddp", 2, 128, ips=90000, wall_items_per_s=40000, optimizer_impl="fused",
                               date="2026-11-22T10:00")])
    rows = envelope(load_frame([first, second])).set_index(["strategy", "batch_per_gpu"])
    assert rows.loc[("ddp", 64), "vs_single"] == 1.9  # a.json's own single
    assert rows.loc[("ddp", 128), "items_per_s"] == 30000  # the steady row, not the stopped 90k
    assert pd.isna(rows.loc[("ddp", 128), "vs_single"])  # b.json has no single: no ratio across runs
    failed = tmp_path / "c.json"
    results.write(failed, [row("single", 1, 64, status="error", reason="boom")])
    assert run_cli("report", str(failed), "--out", str(tmp_path / "p")).returncode == 0
    head = (tmp_path / "p" / "REPORT.md").read_text().split("\n## ", 1)[0]
    assert "nothing ran ok (1 error)" in head


def test_what_could_not_run_stays_whole_on_the_first_screen_with_its_fix(tmp_path):
    """The first screen cut each note at 100 columns: "run `make setup-..." left a code span open and
    the fix nowhere on the page, and "re-run on an idle..." its advice half said; a long reason was
    cut at its first bracket ("mxnet-gluon: NVIDIA H200")."""
    path = tmp_path / "r.json"
    why = "the MXNet environment is not installed (.venv-mxnet): run `make setup-mxnet`"
    results.write(path, [row("single", 1, 64, ips=10000, load_avg_start=7.5, load_avg_end=6.0, host_cpus=2),
                         row("ddp", 2, 64, ips=19000),
                         row("mxnet-gluon", 2, 64, status="skipped", reason=why),
                         row("dp", 2, 64, status="skipped", reason=(
                             "NVIDIA H200 (compute capability 9.0) is newer than MXNet runs: mxnet-cu117 1.9.1, the "
                             "newest MXNet CUDA wheel, has GPU code for sm_50-86 only (no PTX)"))])
    assert run_cli("report", str(path), "--out", str(tmp_path / "p")).returncode == 0
    head = (tmp_path / "p" / "REPORT.md").read_text().split("\n## ", 1)[0]
    lines = head.splitlines()
    assert "`make setup-mxnet`" in head and "..." not in head, head
    # A long reason is cut at its first colon, not inside its first bracket ("dp: NVIDIA H200").
    assert "Not measured: dp: NVIDIA H200 (compute capability 9.0) is newer than MXNet runs" in head, head
    assert all(len(line) <= 100 or line.startswith("![") for line in lines), lines
    assert all(line.count("`") % 2 == 0 for line in lines), lines


def test_a_report_stopped_while_it_draws_leaves_its_folder_as_it_was(tmp_path, monkeypatch):
    """A report of a large file was stopped (a time limit) while drawing figures and left half a
    report in its folder. It draws beside the folder and moves in once whole."""
    from bench.report import figures, pages

    source = REPO / "results/reference/h200x2/answer/search-1.json"
    out = tmp_path / "plots"
    out.mkdir()
    (out / "REPORT.md").write_text("the earlier report\n")
    calls = []

    def stopped(*args, **kwargs):
        calls.append(args)
        if len(calls) > 1:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    real = figures._save
    monkeypatch.setattr(figures, "_save", stopped)
    with pytest.raises(KeyboardInterrupt):
        pages.write_report([source], out)
    assert calls and [p.name for p in out.iterdir()] == ["REPORT.md"]  # no drawing folder left either
    assert (out / "REPORT.md").read_text() == "the earlier report\n"
    monkeypatch.setattr(figures, "_save", real)
    report = pages.write_report([source], out)
    assert report == out / "REPORT.md" and "the earlier report" not in report.read_text()
    assert (out / "index.html").exists() and list(out.glob("*-throughput.png"))


def test_the_largest_batch_line_names_the_fastest_there_and_a_cpu_caption_promises_no_gpu_columns(tmp_path):
    """A CPU run: "Largest batch that ran, 4/replica: `single` 1.8 img/s" while ddp ran 4/replica at 24
    (unjudged); the caption under the answer's tables promised MFU and memory columns they lack."""
    from bench.report import answer, answer_text

    cpu = {"n_gpus": 0, "gpus": "", "device": "cpu"}
    ddp, other = row("ddp", 2, 4, ips=24.0, **cpu), row("zero1", 2, 4, ips=20.0, **cpu)
    for wide in (ddp, other):  # their intervals overlap, their medians 20% apart: unjudged
        wide.update(items_per_s_p10=5.0, items_per_s_p90=40.0)
    rows = [row("zero1", 2, 2, ips=30.0, **cpu), row("single", 1, 2, ips=8.0, **cpu),
            row("single", 1, 4, ips=1.8, **cpu), ddp, other]
    frame = answer_frame(rows)
    said = answer_text.actions(frame, answer.records(frame))
    assert "Largest batch that ran, 4/replica: `ddp" in said and "(fp32, CPU x1, 4/replica): 1.8" not in said
    path = tmp_path / "cpu.json"
    results.write(path, rows)
    text = pages.write_report([path], tmp_path / "plots").read_text()
    assert "Per batch: the recommended configuration" in text and "MFU" not in text.split("Per batch:")[1][:600]


def test_a_cpu_report_speaks_of_replicas_not_gpus(tmp_path):
    """A CPU run's report said "per-GPU batch", "the GPU count" and "of the GPUs"."""
    cpu = {"n_gpus": 0, "gpus": "", "device": "cpu"}
    path = tmp_path / "cpu.json"
    results.write(path, [row("single", 1, 4, ips=8.0, **cpu), row("ddp", 2, 4, ips=14.0, **cpu)])
    text = pages.write_report([path], tmp_path / "plots").read_text()
    assert "at the same per-replica batch" in text and "over the replica count" in text
    assert "GPU" not in text, [line for line in text.splitlines() if "GPU" in line]


def test_a_report_validates_each_file_once_and_labels_a_thousand_batches_readably(tmp_path, monkeypatch):
    """`report` on a valid 19,998-row file did not finish in 120 s: it validated the file once
    for each of its parts and laid out a tick label for every batch measured. Counted, not timed."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from bench.report import figures

    validated = []
    real = results._load
    monkeypatch.setattr(results, "_load", lambda path: validated.append(path) or real(path))
    source = tmp_path / "run.json"
    source.write_bytes((REPO / "results/reference/h200x2/answer/search-1.json").read_bytes())
    pages.write_report([source], tmp_path / "plots")
    assert validated == [source]
    _, ax = plt.subplots()
    figures._log2_axis(ax, range(100, 1100))
    ticks = list(ax.get_xticks())
    assert len(ticks) <= 13 and ticks[0] == 100 and ticks[-1] == 1099
    plt.close("all")


def test_rows_read_again_are_the_files_own(tmp_path):
    """Validated rows are kept between reads of an unchanged file: a caller's change to its rows
    reaches no other caller, and a file written since is read again."""
    path = tmp_path / "run.json"
    results.write(path, [row("single", 1, 2, ips=10.0)])
    first = results.load(path)
    first[0]["items_per_s"] = -1.0
    assert results.load(path)[0]["items_per_s"] == 10.0
    results.write(path, [row("single", 1, 2, ips=10.0), row("single", 1, 4, ips=12.0)])
    assert [r["batch_per_gpu"] for r in results.load(path)] == [2, 4]
