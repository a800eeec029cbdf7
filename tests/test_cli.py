"""The CLI end to end on the CPU, and its one-line errors for bad input."""
import json
import os
import subprocess
import sys

import pytest

from bench.cases import results
from tests.conftest import REPO, rows_of, run_cli

TINY = ["--gpus", "", "--batch-sizes", "1,2", "--warmup", "0", "--steps", "2", "--trials", "2"]


def test_tiny_sweep_writes_well_formed_rows(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single,allreduce-scratch,dp", *TINY, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert len(rows) == 6 and set(rows[0]) == set(results.COLUMNS)
    ok = [r for r in rows if r["status"] == "ok"]
    assert {(r["strategy"], r["batch_per_gpu"]) for r in ok} == {(s, b) for s in ("single", "allreduce-scratch")
                                                                 for b in (1, 2)}
    for r in ok:
        assert r["step_ms_p10"] <= r["step_ms_p50"] <= r["step_ms_p90"]
        assert r["items_per_s"] == pytest.approx(r["global_batch"] / (r["step_ms_p50"] / 1000))
        assert r["global_batch"] == r["batch_per_gpu"] * r["n_replicas"]
        assert r["n_timed_steps"] == 4 and r["tflops"] > 0 and r["torch"] and r["date"] and r["python"]
    assert all(r["status"] == "skipped" and "CUDA" in r["reason"] for r in rows if r["strategy"] == "dp")
    # Where each case's time went: the parts fit inside the case, the worker's start-up is in
    # the first case it ran (one local worker serves both strategies).
    for r in ok:
        parts = [r[k] for k in ("build_s", "warmup_s", "timed_s", "counters_s")]
        assert all(p >= 0 for p in parts) and sum(parts) <= r["elapsed_s"] + 1e-3
    assert [r["worker_start_s"] is not None for r in ok] == [True, False, False, False]
    # The CSV beside it holds the same rows.
    assert len(results.load(out.with_suffix(".csv"))) == 6
    assert str(out) in proc.stdout


def test_list_says_what_runs_here_each_reason_once_and_the_knobs():
    proc = run_cli("list", "--gpus", "")
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    single = lines[lines.index(next(line for line in lines if line.lstrip().startswith("single "))) + 1]
    # No CUDA here: a CUDA graph is not offered, though single declares it.
    assert "runs fp32, amp-fp16, amp-bf16; executions eager, compile" in single and "cuda-graph" not in single
    assert "  dp, dp-fn, dp-manual: needs CUDA GPUs" in proc.stdout
    assert sum("Apex is not installed" in line for line in lines) == 1
    from bench.core.knobs import KNOBS

    for knob in KNOBS:
        assert any(line.lstrip().startswith(knob.flag + " ") for line in lines), knob.flag


@pytest.mark.parametrize("args, message", [
    (["--strategies", "nope"], "unknown strategy 'nope': choose from single"),
    (["--precisions", "fp8"], "unknown precision 'fp8': choose from fp32"),
    (["--models", "vgg"], "unknown model 'vgg': choose from resnet18-small, resnet18"),
    (["--gpus", "7"], "GPU id 7 does not exist: this host has"),
    (["--gpus", "", "--global-batch-sizes", "5"], "global batch 5 does not split across 2 devices"),
    (["--batch-sizes", "0"], "--batch-sizes must be positive"),
    (["--option", "bucket_cap_mb"], "--option takes NAME=VALUE"),
    (["--strategies", "single", "--option", "bucket_cap_mb=5"], "no selected strategy has option 'bucket_cap_mb'"),
    (["--gpus", "", "--cpu-replicas", "0"], "--cpu-replicas must be at least 1"),
    (["--gpus", "", "--case-timeout", "0"], "--case-timeout and --startup-timeout must be positive"),
    # Flags that were dropped without a word: --execution eager lost to the alias, a one-host rank,
    # GPU counts on the CPU.
    (["--gpus", "", "--compile", "--execution", "eager"], "--compile is --execution compile, and --execution says"),
    (["--gpus", "", "--node-rank", "3"], "--node-rank joins hosts into one run"),
    (["--gpus", "", "--gpu-counts", "1,4"], "--gpu-counts picks GPUs of --gpus, and this run has none"),
])
def test_bad_input_gives_one_line_and_nonzero_exit(args, message):
    proc = run_cli("run", *args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_existing_output_is_never_overwritten(tmp_path):
    out = tmp_path / "r.json"
    out.write_text('{"schema": "parabench-results/1", "rows": []}')
    proc = run_cli("run", "--strategies", "single", *TINY, "--out", str(out))
    assert proc.returncode == 2 and "already exists: pass --resume" in proc.stderr
    assert json.loads(out.read_text())["rows"] == []


def test_rows_record_the_thread_setting_the_launcher_gave(tmp_path):
    """torchrun gives each of several processes one OpenMP thread (its own rule) and the local
    worker keeps the default pool; the user's setting wins; rows say what was in force."""
    import os

    from bench.engine.launchers import LOCAL, TORCHRUN, worker_environment
    from strategies.base import Placement

    assert LOCAL.variables(Placement((0,), 1)) == {} and LOCAL.variables(Placement((), 2)) == {}
    assert TORCHRUN.variables(Placement((0,), 1)) == {} and TORCHRUN.variables(Placement((), 1)) == {}
    assert TORCHRUN.variables(Placement((0, 1), 2)) == TORCHRUN.variables(Placement((), 2)) == {"OMP_NUM_THREADS": "1"}
    assert worker_environment(TORCHRUN, Placement((0, 1), 2), {"OMP_NUM_THREADS": "8"})["OMP_NUM_THREADS"] == "8"
    # A CPU case sees no GPU (PowerSGD's hook would take its CUDA path on a GPU host); a GPU case's are kept.
    assert worker_environment(TORCHRUN, Placement((), 2), {"CUDA_VISIBLE_DEVICES": "0"})["CUDA_VISIBLE_DEVICES"] == ""
    assert worker_environment(LOCAL, Placement((0,), 1), {"CUDA_VISIBLE_DEVICES": "3"})["CUDA_VISIBLE_DEVICES"] == "3"

    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single,ddp", *TINY, "--batch-sizes", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    threads = {r["strategy"]: json.loads(r["environment"]).get("OMP_NUM_THREADS") for r in rows_of(out)}
    users = os.environ.get("OMP_NUM_THREADS")
    assert threads == {"single": users, "ddp": users or "1"}, threads


def test_a_cpu_sweeps_parent_never_imports_torch(tmp_path):
    # Importing torch costs the parent 1.4 s on a 2-core machine, and an import while a worker
    # measures would share that worker's CPU; the workers report the libraries they loaded.
    out = tmp_path / "r.json"
    code = ("import sys; from bench import cli; rc = cli.main(sys.argv[1:]); "
            "print('TORCH_IN_PARENT', 'torch' in sys.modules); sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code, "run", "--strategies", "single", "--gpus", "",
                           "--batch-sizes", "1", "--warmup", "0", "--steps", "1", "--trials", "1", "--out", str(out)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "TORCH_IN_PARENT False" in proc.stdout
    [row] = rows_of(out)
    assert row["status"] == "ok" and row["torch"] and row["torch_git"]


@pytest.mark.parametrize("visible, count", [(None, 4), ("", 0), ("1,3", 2), ("2,7,1", 1), ("5", 0)])
def test_gpu_count_follows_cuda_visible_devices_without_torch(monkeypatch, visible, count):
    from bench.measure import envinfo

    monkeypatch.setattr(envinfo, "gpus_on_host", lambda: [{"index": i} for i in range(4)])
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert envinfo.gpu_count() == count


@pytest.mark.slow
def test_worker_scope_case_gives_every_case_a_fresh_worker(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single", "--precisions", "fp32,amp-bf16", *TINY, "--worker-scope", "case",
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert len(rows) == 4 and all(r["status"] == "ok" and r["worker_scope"] == "case" for r in rows), \
        [(r["status"], r["reason"]) for r in rows]
    assert all(r["worker_start_s"] is not None for r in rows)  # each case was its worker's first
    proc = run_cli("run", "--strategies", "single", "--precisions", "fp32,amp-bf16", *TINY, "--worker-scope", "series",
                   "--out", str(tmp_path / "s.json"))
    assert proc.returncode == 0, proc.stderr
    firsts = {(r["precision"], r["batch_per_gpu"]) for r in rows_of(tmp_path / "s.json")
              if r["worker_start_s"] is not None}
    assert firsts == {("fp32", 1), ("amp-bf16", 1)}  # one worker per series, its ladder inside


def test_a_list_with_an_empty_item_is_refused_not_read_as_shorter():
    """`--batch-sizes 8,,16` ran 8 and 16; a doubled comma is a typo the user should see."""
    done = run_cli("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "8,,16")
    assert done.returncode == 2 and ("has an empty item between its commas: write each one once, e.g. 8,16"
                                     in done.stderr)
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
