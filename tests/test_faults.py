"""Fault injection: one bad case never costs the others, and nothing is left running.

The test-only `faulty` strategy (tests/strategies/faulty.py) trains like `single` or
`ddp` and fails on command at one per-GPU batch size.
"""
import os
import shlex
import signal
import subprocess
import sys
import time
import uuid

import psutil
import pytest

from tests.conftest import REPO, TEST_STRATEGIES, rows_of, run_cli

FAST = ["--strategies", "faulty", "--gpus", "", "--warmup", "0", "--steps", "2", "--trials", "1"]
# Every process this module's sweeps start carries this tag (workers inherit it): the
# leftover checks look at these only, so a sweep running beside the tests is no failure.
TAG = uuid.uuid4().hex
ENV = {**TEST_STRATEGIES, "PARABENCH_TEST_TAG": TAG}


def sweep(tmp_path, *extra, batch_sizes="1,2,3"):
    out = tmp_path / "r.json"
    proc = run_cli("run", *FAST, "--batch-sizes", batch_sizes, "--out", str(out), *extra, env=ENV)
    assert proc.returncode == 0, proc.stderr
    return {r["batch_per_gpu"]: r for r in rows_of(out)}


def leftover_processes(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            mine = p.environ().get("PARABENCH_TEST_TAG") == TAG
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        cmd = " ".join(p.info["cmdline"] or [])
        if mine and marker in cmd and p.pid != os.getpid():
            found.append(p)
    return found


def assert_others_measured(rows, bad):
    for batch, row in rows.items():
        if batch != bad and row["status"] == "ok":
            assert row["items_per_s"] > 0 and row["step_ms_p50"] > 0
    assert [b for b, r in rows.items() if b != bad and r["status"] != "ok"] == []


@pytest.mark.parametrize("fault, status, reason", [
    ("raise", "error", "RuntimeError: injected failure"),
    ("sigkill", "error", "killed by SIGKILL"),
    ("segfault", "error", "killed by SIGSEGV"),
    ("exit", "error", "exit code 3"),
])
@pytest.mark.slow
def test_a_crash_costs_only_its_case(tmp_path, fault, status, reason):
    rows = sweep(tmp_path, "--cpu-replicas", "1", "--option", f"fault={fault}", "--option", "at_batch=2")
    assert rows[2]["status"] == status and reason in rows[2]["reason"]
    assert_others_measured(rows, 2)


@pytest.mark.parametrize("scope", ["group", "case"])  # case: the skip crosses workers
def test_out_of_memory_is_recorded_and_larger_batches_are_skipped(tmp_path, scope):
    rows = sweep(tmp_path, "--cpu-replicas", "1", "--option", "fault=oom", "--option", "at_batch=2",
                 "--worker-scope", scope)
    assert rows[1]["status"] == "ok"
    assert rows[2]["status"] == "oom" and "out of memory" in rows[2]["reason"]
    assert rows[3]["status"] == "skipped" and "batch 2 per GPU already ran out of memory" in rows[3]["reason"]


@pytest.mark.slow
def test_a_hang_times_out_and_leaves_no_process(tmp_path):
    started = time.monotonic()
    rows = sweep(tmp_path, "--cpu-replicas", "1", "--option", "fault=orphan", "--option", "at_batch=2",
                 "--case-timeout", "30")  # the good cases must finish within it on a loaded machine too
    assert rows[2]["status"] == "timeout" and "no result within 30 s" in rows[2]["reason"]
    assert_others_measured(rows, 2)
    assert time.monotonic() - started < 120
    # The hung worker had started a detached child in a session of its own: it is gone too.
    assert leftover_processes("time.sleep(600)") == []


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["sigkill", "hang"])
def test_ddp_rank_failure_does_not_hang_the_sweep(tmp_path, fault):
    rows = sweep(tmp_path, "--cpu-replicas", "2", "--option", "launcher=torchrun", "--option", f"fault={fault}",
                 "--option", "fault_rank=1", "--option", "at_batch=2", "--option", "timeout_s=20",
                 "--case-timeout", "40")
    assert rows[2]["status"] in ("error", "timeout")
    assert_others_measured(rows, 2)
    assert leftover_processes("bench.run.worker") == []


@pytest.mark.slow
def test_interrupt_keeps_finished_cases_and_resume_completes(tmp_path):
    out = tmp_path / "r.json"
    args = [sys.executable, "-m", "bench", "run", *FAST, "--cpu-replicas", "1", "--batch-sizes", "1,2,3",
            "--option", "fault=hang", "--option", "at_batch=2", "--out", str(out)]
    env = {**os.environ, **ENV, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and len(rows_of(out)) >= 1):
        time.sleep(0.5)
    time.sleep(3)  # batch 2 is hanging now
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "--resume" in err
    rows = rows_of(out)
    assert [(r["batch_per_gpu"], r["status"]) for r in rows] == [(1, "ok")]
    assert leftover_processes(str(out)) == [] and leftover_processes("bench.run.worker") == []

    # Resume without the fault: batch 1 is not measured again, 2 and 3 are. (The fault is
    # an option, so the resumed settings differ: resume under the same options instead,
    # with the fault firing at a batch that no longer exists.)
    first = rows[0]
    proc = run_cli("run", *FAST, "--cpu-replicas", "1", "--batch-sizes", "1,2,3", "--option", "fault=hang",
                   "--option", "at_batch=2", "--out", str(out), "--resume", "--case-timeout", "30", env=ENV)
    assert proc.returncode == 0, proc.stderr
    resumed = {r["batch_per_gpu"]: r for r in rows_of(out)}
    assert resumed[1] == first  # untouched
    assert resumed[2]["status"] == "timeout" and resumed[3]["status"] == "ok"


# SIGHUP (the terminal closed) stops a sweep as SIGTERM does: finished rows kept, the resume
# line printed, the lock removed, no worker left; with nothing finished, it says so.
@pytest.mark.parametrize("signum, status", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
@pytest.mark.parametrize("finished", [1, 0])
def test_sigterm_and_sighup_stop_cleanly(tmp_path, signum, status, finished):
    out, mark = tmp_path / "r.json", tmp_path / "hanging"
    args = [sys.executable, "-m", "bench", "run", *FAST, "--cpu-replicas", "1", "--batch-sizes", "1,2",
            "--option", "fault=hang", "--option", f"at_batch={finished + 1}", "--out", str(out)]
    proc = subprocess.Popen(args, cwd=REPO, env={**os.environ, **ENV, "PYTHONPATH": str(REPO),
                                                 "PARABENCH_FAULTY_MARK": str(mark)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not mark.exists():  # the hanging case is under way
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == status, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("parabench: stopped by SIG") and "Traceback" not in err
    if finished:
        assert rows_of(out)[0]["status"] == "ok"
        # The line works as printed: this interpreter, the same arguments (not every strategy), quoted.
        words = shlex.split(last.split("continue with: ", 1)[1])
        assert words == [sys.executable, "-m", "bench", *[w for w in args[3:] if w not in ("--out", str(out))],
                         "--resume", "--out", str(out)], last
    else:
        assert "nothing was written" in last and not out.exists() and str(out) not in err
    assert not (tmp_path / "r.json.lock").exists()
    assert leftover_processes("bench.run.worker") == []


@pytest.mark.parametrize("content, message", [
    ("", "the file is empty"),
    ('{"schema": "parabench-results/1", "rows": [{"strat', "corrupt or truncated"),
    ('{"schema": "parabench-results/0", "rows": []}', "results schema 'parabench-results/0'"),
    ('{"hello": 1}', "not a parabench results file"),
])
def test_resume_refuses_a_bad_file_and_leaves_it_alone(tmp_path, content, message):
    out = tmp_path / "r.json"
    out.write_text(content)
    proc = run_cli("run", *FAST, "--cpu-replicas", "1", "--batch-sizes", "1", "--out", str(out), "--resume", env=ENV)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr and str(out) in proc.stderr
    assert out.read_text() == content
