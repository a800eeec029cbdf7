"""Nothing measured is ever lost: one test per fault an adversarial user found, each on the
CPU. Process checks look only at the processes
that carry this test's own tag (PARABENCH_TEST_TAG, inherited by every worker)."""
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from bench.cases import results
from tests.conftest import REPO, TEST_STRATEGIES, rows_of, run_cli

FAST = ["--gpus", "", "--warmup", "0", "--steps", "2", "--trials", "1"]
FAULTY = ["--strategies", "faulty", "--cpu-replicas", "1", *FAST]


def tagged():
    return {**TEST_STRATEGIES, "PARABENCH_TEST_TAG": uuid.uuid4().hex}


def processes_with(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and proc.environ().get("PARABENCH_TEST_TAG") == tag:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            pass
    return found


def start(args, env):
    return subprocess.Popen([sys.executable, "-m", "bench", "run", *args], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(predicate, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.3)
    return False


def good_rows(**changes):
    row = {c: None for c in results.COLUMNS}
    row.update(strategy="single", precision="fp32", model="resnet18-small", device="cpu", gpus="", n_gpus=0,
               n_replicas=1, batch_per_gpu=2, global_batch=2, status="ok", gpu_name="cpu", cpu="x", host="h",
               items_per_s=10.0, items_per_s_p10=9.0, items_per_s_p90=11.0, step_ms_p10=180.0, step_ms_p50=200.0,
               step_ms_p90=220.0, warmup=0, steps=2, trials=1, seed=0, options="{}")
    row.update(changes)
    rates = [row[k] for k in ("items_per_s", "items_per_s_p10", "items_per_s_p90")]
    if "step_ms_p50" not in changes and all(isinstance(r, float) and 0 < r < float("inf") for r in rates):
        # The steps its rate comes from (a reader checks the rate is the global batch over the median step).
        batch_ms = 1000.0 * row["global_batch"]
        row.update(step_ms_p10=batch_ms / row["items_per_s_p90"], step_ms_p50=batch_ms / row["items_per_s"],
                   step_ms_p90=batch_ms / row["items_per_s_p10"])
    return [row]


# 1. Two sweeps on one file: the second is refused while the first holds the lock.
def test_a_second_sweep_on_the_same_file_is_refused(tmp_path):
    out, env = tmp_path / "r.json", tagged()
    first = start([*FAULTY, "--batch-sizes", "1", "--option", "fault=hang", "--case-timeout", "60",
                   "--out", str(out)], env)
    try:
        assert wait_for(lambda: (tmp_path / "r.json.lock").exists())
        proc = run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(out), "--resume", env=env)
        assert proc.returncode == 2 and "being written by another parabench run (PID" in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    finally:
        first.kill()
        first.communicate()
    assert wait_for(lambda: not processes_with(env["PARABENCH_TEST_TAG"]), 20)


# 2. Workers die with their parent, torchrun's whole tree included, at every moment of their
# start-up, also where orphans go to a subreaper rather than PID 1; nothing stays on disk.
def worker_processes(tag: str) -> list[str]:
    """Command lines of the tagged worker processes (torchrun's agent names the worker too)."""
    found = []
    for proc in processes_with(tag):
        try:
            found.append(" ".join(proc.cmdline()))
        except psutil.Error:
            pass
    return [c for c in found if "bench.run.worker" in c]


MOMENTS = {
    # The worker's first process exists: it is still starting Python and importing torch.
    "worker starting": lambda tag, mark: bool(worker_processes(tag)),
    # torchrun has started both ranks (they import torch now); local: the one process.
    "ranks starting": lambda tag, mark: len([c for c in worker_processes(tag)
                                             if "torch.distributed.run" not in c]) >= 2,
    # The case is under way (the fault fired): the worker hangs in it.
    "case running": lambda tag, mark: mark.exists(),
}


def kill_sweep_at(tmp_path, launcher, replicas, moment):
    env = tagged()
    tag, mark = env["PARABENCH_TEST_TAG"], tmp_path / "fault-fired"
    sweep = start(["--strategies", "faulty", "--cpu-replicas", replicas, *FAST, "--batch-sizes", "1",
                   "--option", f"launcher={launcher}", "--option", "fault=hang", "--case-timeout", "300",
                   "--out", str(tmp_path / "r.json")],
                  {**env, "TMPDIR": str(tmp_path), "PARABENCH_FAULTY_MARK": str(mark)})
    try:
        assert wait_for(lambda: MOMENTS[moment](tag, mark), 300), \
            sweep.stderr.read() if sweep.poll() is not None else ""
    finally:
        sweep.send_signal(signal.SIGKILL)
        sweep.communicate()
    return tag


@pytest.mark.parametrize("launcher, replicas, moment", [
    ("local", "1", "worker starting"), ("local", "1", "case running"),
    ("torchrun", "2", "worker starting"), ("torchrun", "2", "ranks starting"), ("torchrun", "2", "case running"),
])
def test_workers_die_with_a_killed_sweep(tmp_path, launcher, replicas, moment):
    tag = kill_sweep_at(tmp_path, launcher, replicas, moment)
    assert wait_for(lambda: not processes_with(tag), 60), [p.cmdline() for p in processes_with(tag)]
    # The workers' folder (spec, events) went with the sweep: nothing is left in the temp folder.
    # torchrun's own run folders (torchelastic_*) went with the workers' folder too.
    assert wait_for(lambda: not [*tmp_path.glob("parabench-*"), *tmp_path.glob("torchelastic_*")], 60), \
        list(tmp_path.rglob("*"))


@pytest.fixture
def subreaper():
    """This test's process adopts orphans (as a container's init or systemd --user does), so an
    orphaned rank's parent is not PID 1; orphans that end here are reaped here."""
    import ctypes

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    assert prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    try:
        yield
    finally:
        prctl(36, 0, 0, 0, 0)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass


@pytest.mark.parametrize("moment", ["ranks starting", "case running"])
def test_ranks_die_with_a_killed_sweep_under_a_subreaper(tmp_path, subreaper, moment):
    tag = kill_sweep_at(tmp_path, "torchrun", "2", moment)

    def none_left():
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:  # orphans come here now: reap the ones that ended
                pass
        except ChildProcessError:
            pass
        return not processes_with(tag)

    assert wait_for(none_left, 60), [p.cmdline() for p in processes_with(tag)]
    assert wait_for(lambda: not list(tmp_path.glob("parabench-*")), 60)


def test_a_stale_scratch_folder_is_removed_by_the_next_sweep(tmp_path, monkeypatch):
    """A folder is live while its sweep holds its lock, whatever PID its owner file names: a
    sweep in another PID namespace (a container, `unshare --pid`) writes PIDs that name
    nothing, or another process, here."""
    import fcntl
    import tempfile

    from bench.run import procs

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    live = procs.Scratch()  # this process holds its lock
    try:
        # Its owner file as a sweep that is PID 1 of its own namespace writes it.
        (Path(live.path) / procs.OWNER).write_text(json.dumps({"pid": 1, "create_time": 0.0}))
        dead = tmp_path / f"{procs.SCRATCH_PREFIX}dead"  # its sweep and guard were killed: nobody holds the lock
        (dead / "worker-x").mkdir(parents=True)
        (dead / procs.LIVE).touch()
        (dead / procs.OWNER).write_text(json.dumps({"pid": os.getpid(), "create_time": psutil.Process().create_time()}))
        unknown = tmp_path / f"{procs.SCRATCH_PREFIX}unknown"  # no lock file: whose it is cannot be told
        unknown.mkdir()
        assert procs.remove_stale(str(tmp_path)) == [str(dead)]
        assert Path(live.path).exists() and unknown.exists() and not dead.exists()
        fd = os.open(Path(live.path) / procs.LIVE, os.O_RDONLY)
        with pytest.raises(BlockingIOError):  # the lock is held, not merely present
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.close(fd)
    finally:
        live.close()
    assert not Path(live.path).exists()


# The clean-up after the first takes milliseconds: the second lands during it or after it.
@pytest.mark.parametrize("second_after_s", [0.0, 0.05, 0.5])
def test_a_second_interrupt_during_clean_up_leaves_nothing_running(tmp_path, second_after_s):
    env = tagged()
    sweep = start(["--strategies", "faulty", "--cpu-replicas", "2", *FAST, "--batch-sizes", "1", "--option",
                   "launcher=torchrun", "--option", "fault=hang", "--out", str(tmp_path / "r.json")], env)
    assert wait_for(lambda: len(processes_with(env["PARABENCH_TEST_TAG"])) >= 4)
    time.sleep(2)
    sweep.send_signal(signal.SIGINT)
    time.sleep(second_after_s)
    sweep.send_signal(signal.SIGINT)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130 and "interrupted" in err
    assert wait_for(lambda: not processes_with(env["PARABENCH_TEST_TAG"]), 20)


# The sweep's parent never imports torch (seconds of start-up; a Ctrl-C inside it was a
# 40-line traceback), also when it looks for GPUs on a host that has none.
PARENT_WITHOUT_TORCH = """
import sys
from bench.cli import main
from bench.cli.common import resolve_gpus
gpus = resolve_gpus(None)
status = main(sys.argv[1:])
assert "torch" not in sys.modules, "the parent imported torch"
print("gpus", gpus, "status", status)
"""


def test_the_sweeps_parent_never_imports_torch(tmp_path):
    proc = subprocess.run([sys.executable, "-c", PARENT_WITHOUT_TORCH, "run", *FAULTY, "--batch-sizes", "1",
                           "--out", str(tmp_path / "r.json")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO), **tagged()}, timeout=600)
    assert proc.returncode == 0 and "status 0" in proc.stdout, proc.stderr
    row, = rows_of(tmp_path / "r.json")
    assert row["status"] == "ok"
    assert row["caveat"].startswith("no warm-up: the first timed step includes one-time work")  # --warmup 0
    assert "; caveat: no warm-up: the first timed step" in proc.stderr  # and the sweep's own line says so


# Ctrl-C while the command starts (here: while it looks for GPUs): one line, exit 130.
CTRL_C_AT_START = """
import os, signal, sys
import bench.cli.run as run
def interrupted(text):
    signal.raise_signal(signal.SIGINT)  # handled in this thread before the call returns
    raise AssertionError("SIGINT was not delivered (is it ignored? tests/conftest.py restores it)")
run.resolve_gpus = interrupted
from bench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_at_start_up_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-c", CTRL_C_AT_START, "run", "--out", str(tmp_path / "r.json")],
                          cwd=REPO, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)},
                          timeout=300)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip() == "parabench: interrupted before any case finished: nothing was written"
    assert not list(tmp_path.iterdir())


# 3. User output on stdout cannot break or fake the results.
def test_output_without_a_newline_does_not_break_the_protocol(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1,2", "--option", "fault=print", "--out", str(out), env=tagged())
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert [(r["batch_per_gpu"], r["status"]) for r in rows] == [(1, "ok"), (2, "ok")]


# 4. compare and report: unusable figures exit 2, naming file, row and field.
@pytest.mark.parametrize("changes, field", [
    ({"items_per_s": float("nan")}, "items_per_s"), ({"items_per_s": 0.0}, "items_per_s"),
    ({"items_per_s": None}, "items_per_s"),
    ({"items_per_s": -885.0}, "items_per_s"), ({"step_ms_p50": float("inf")}, "step_ms_p50"),
])
def test_compare_and_report_refuse_unusable_figures(tmp_path, changes, field):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    results.write(good, good_rows())
    results.write(bad, good_rows(**changes))
    for args in (["compare", str(good), str(bad)], ["report", str(bad), "--out", str(tmp_path / "p")]):
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{bad}: row 0" in proc.stderr and field in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


# 5. --resume never picks another machine's file, and refuses one given by name.
def test_resume_ignores_and_refuses_files_of_other_hosts(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    results.write(folder / "run-20260101-000000-elsewhere.json", good_rows(host="elsewhere"))
    proc = run_cli("run", *FAULTY, "--batch-sizes", "2", "--results-dir", str(folder), "--resume", env=tagged())
    assert proc.returncode == 2 and "found no run-*.json written on this host" in proc.stderr
    proc = run_cli("run", *FAULTY, "--batch-sizes", "2", "--out", str(folder / "run-20260101-000000-elsewhere.json"),
                   "--resume", env=tagged())
    assert proc.returncode == 2 and "was measured on host elsewhere" in proc.stderr


def test_resume_refuses_a_file_of_another_torch(tmp_path):
    """A file whose rows claim torch 9.9.9 was resumed, its rows beside new ones of this torch."""
    from bench.measure import envinfo

    path = tmp_path / "r.json"
    results.write(path, good_rows(host=envinfo.collect_light()["host"], torch="9.9.9"))
    proc = run_cli("run", *FAULTY, "--batch-sizes", "2", "--out", str(path), "--resume", env=tagged())
    assert proc.returncode == 2 and f"{path} was measured with torch 9.9.9, this is torch " in proc.stderr, proc.stderr
    assert len(results.load(path)) == 1


# 6. Host out of memory is this case's `oom`; larger batches are skipped, smaller ones measured.
def test_host_out_of_memory_is_oom_and_skips_larger_batches(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1,2,3", "--option", "fault=hostoom", "--option", "at_batch=2",
                   "--out", str(out), env=tagged())
    assert proc.returncode == 0, proc.stderr
    rows = {r["batch_per_gpu"]: r for r in rows_of(out)}
    assert rows[1]["status"] == "ok" and rows[2]["status"] == "oom" and rows[3]["status"] == "skipped"


def test_a_batch_the_host_cannot_hold_fails_only_its_case(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single", *FAST, "--batch-sizes", "1,1000000000", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {r["batch_per_gpu"]: r for r in rows_of(out)}
    assert rows[1]["status"] == "ok"
    assert rows[1000000000]["status"] == "oom" and "host out of memory" in rows[1000000000]["reason"]


def test_each_rank_builds_only_its_shard():
    from bench.engine import launchers
    from bench.workloads import get_workload

    workload = get_workload("resnet18-small")
    whole = workload.synthetic_batch(12)
    for rank in range(3):
        start_row, stop_row = launchers.TORCHRUN.rows(rank, 3, 12)
        inputs, targets = workload.synthetic_rows(start_row, stop_row)
        assert inputs.shape[0] == 4 and bool((inputs == whole[0][rank * 4:(rank + 1) * 4]).all())
        assert bool((targets == whole[1][rank * 4:(rank + 1) * 4]).all())
    assert launchers.LOCAL.rows(0, 1, 12) == (0, 12)


# 7. Unwritable output is found before the first case; JSON and CSV are checked together.
def test_an_unwritable_folder_is_found_before_measuring(tmp_path):
    # A folder that cannot be made (a file stands in its way): root can write anywhere else.
    (tmp_path / "blocker").write_text("")
    env = tagged()
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(tmp_path / "blocker" / "r.json"), env=env)
    assert proc.returncode == 2 and "cannot write results in" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not processes_with(env["PARABENCH_TEST_TAG"])  # nothing was started, nothing measured


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "f.json"
    target.write_text("old")

    def broken(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        results.atomic_write_bytes(target, b"new")
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_an_existing_csv_is_not_overwritten(tmp_path):
    (tmp_path / "r.csv").write_text("precious")
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(tmp_path / "r.json"), env=tagged())
    assert proc.returncode == 2 and "r.csv already exists" in proc.stderr
    assert (tmp_path / "r.csv").read_text() == "precious"


# 8. Duplicates: the latest ok row wins, in resume, compare and report alike.
def test_duplicates_keep_the_latest_ok_measurement(tmp_path):
    from bench.report import compare

    ok = good_rows()[0]
    err = dict(ok, status="error", reason="later failure", items_per_s=None, items_per_s_p10=None, items_per_s_p90=None,
               step_ms_p10=None, step_ms_p50=None, step_ms_p90=None)
    assert results.latest([ok, err]) == [ok]
    newer = dict(ok, items_per_s=12.0)
    assert results.latest([ok, err, newer]) == [newer]
    # Files come in name order: a newer measurement read first still wins over an older one.
    older, later = dict(ok, date="2026-01-01T00:00:00+00:00"), dict(ok, date="2026-02-01T00:00:00+00:00",
                                                                    items_per_s=9.0)
    assert results.latest([later, older]) == [later]
    verdicts = compare.compare([ok], [ok, err], compare.Thresholds())
    assert [v["verdict"] for v in verdicts] == ["pass"]


# 9. A DDP start-up failure records the failing rank's own cause.
def test_ddp_start_up_failure_keeps_the_rank_traceback(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "ddp", *FAST, "--batch-sizes", "1", "--option", "backend=nccl",
                   "--startup-timeout", "120", "--out", str(out), env=tagged())
    assert proc.returncode == 3, proc.stderr  # its only case failed: nothing measured
    row = rows_of(out)[0]
    assert row["status"] == "error" and "rank" in row["reason"]
    assert "Traceback" in row["output_tail"] and "init_process_group" in row["output_tail"]


# 10. Figures are written whole, and the same results give byte-identical figures.
def test_report_figures_are_deterministic(tmp_path):
    rows = good_rows() + good_rows(strategy="ddp", n_replicas=2, global_batch=4, items_per_s=15.0, items_per_s_p10=14.0,
                                   items_per_s_p90=16.0)
    results.write(tmp_path / "r.json", rows)
    for name in ("a", "b"):
        assert run_cli("report", str(tmp_path / "r.json"), "--out", str(tmp_path / name)).returncode == 0
    svgs = sorted(p.name for p in (tmp_path / "a").glob("*.svg"))
    assert svgs and all((tmp_path / "a" / n).read_bytes() == (tmp_path / "b" / n).read_bytes() for n in svgs)
    assert not list((tmp_path / "a").glob(".*tmp*"))


# 11. --resume with other measurement settings is refused, naming the difference.
def test_resume_with_other_settings_is_refused(tmp_path):
    out = tmp_path / "r.json"
    assert run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(out), env=tagged()).returncode == 0
    proc = run_cli("run", *FAULTY[:-2], "--trials", "1", "--steps", "3", "--batch-sizes", "1,2", "--out", str(out),
                   "--resume", env=tagged())
    assert proc.returncode == 2 and "steps 2 (file) vs 3 (now)" in proc.stderr
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1,2", "--out", str(out), "--resume", env=tagged())
    assert proc.returncode == 0 and "1 case(s) measured already, 1 to run" in proc.stderr
    assert len(rows_of(out)) == 2


# 13. A folder given to report stands for the results in it.
def test_report_reads_a_folder(tmp_path):
    results.write(tmp_path / "in" / "r.json", good_rows())
    assert run_cli("report", str(tmp_path / "in"), "--out", str(tmp_path / "p")).returncode == 0
    (tmp_path / "empty").mkdir()
    proc = run_cli("report", str(tmp_path / "empty"), "--out", str(tmp_path / "p2"))
    assert proc.returncode == 2 and "no results files in" in proc.stderr
    # Other tools' JSON kept beside the results (pytest-benchmark's saves) is not a results
    # file; a results file that does not parse is skipped, saying so in one line.
    (tmp_path / "in" / "pytest-benchmark.json").write_text('{"machine_info": {}, "benchmarks": []}')
    assert run_cli("report", str(tmp_path / "in"), "--out", str(tmp_path / "p3")).returncode == 0
    (tmp_path / "in" / "cut.json").write_text('{"schema": "parabench-results/1", "rows": [')
    proc = run_cli("report", str(tmp_path / "in"), "--out", str(tmp_path / "p4"))
    assert proc.returncode == 0 and proc.stderr.startswith(
        f"parabench: skipped one file: {tmp_path / 'in' / 'cut.json'}: corrupt or truncated")
    assert len(proc.stderr.splitlines()) == 1


# 14. Every numeric input and option value is validated, with the fix named.
@pytest.mark.parametrize("args, message", [
    (["--warmup", "-1"], "--warmup must be at least 0"),
    (["--steps", "0"], "--steps must be at least 1"),
    (["--seed", "-3"], "--seed must be at least 0"),
    (["--case-timeout", "nan"], "--case-timeout and --startup-timeout must be positive"),
    (["--startup-timeout", "inf"], "--case-timeout and --startup-timeout must be positive"),
    (["--strategies", "ddp", "--option", "launcher=nobody"], "option launcher takes one of torchrun, spawn"),
    (["--strategies", "ddp", "--option", "bucket_cap_mb=-5"], "option bucket_cap_mb must be a positive number"),
    (["--strategies", "ddp", "--option", "comm_hook=int8"], "option comm_hook takes one of none, fp16, bf16, powersgd"),
    (["--execution", "jit"], "unknown execution 'jit'"),
    (["--batch-sizes", ","], "--batch-sizes is empty"),
    # An empty list is not "everything", and an item named twice would be measured twice.
    (["--strategies", ""], "--strategies is empty: name at least one"),
    (["--precisions", " , "], "--precisions is empty"),
    (["--models", ""], "--models is empty"),
    (["--execution", ""], "--execution is empty"),
    (["--gpu-counts", ""], "--gpu-counts is empty"),
    (["--strategies", "single,single"], "--strategies lists single more than once"),
    (["--precisions", "fp32,fp32"], "--precisions lists fp32 more than once"),
    (["--batch-sizes", "2,02"], "--batch-sizes lists a number more than once"),
])
def test_bad_numbers_and_options_give_one_line(args, message):
    proc = run_cli("run", "--gpus", "", *args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


# A threshold that would switch its check off (a slowdown of 500% passes everything) is refused.
@pytest.mark.parametrize("flag, value", [
    ("--max-slowdown", "nan"), ("--max-slowdown", "5"), ("--max-slowdown", "1"), ("--max-slowdown", "0"),
    ("--max-slowdown", "-0.1"), ("--max-slowdown", "150%"), ("--max-slowdown", "fast"),
    ("--max-memory-growth", "5"), ("--max-memory-growth", "inf"), ("--noise-factor", "100"), ("--noise-factor", "-1"),
])
def test_compare_rejects_thresholds_that_switch_the_check_off(tmp_path, flag, value):
    results.write(tmp_path / "a.json", good_rows())
    proc = run_cli("compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"), flag, value)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert line.startswith(f"parabench: error: {flag} is ") and "would let every" in line


@pytest.mark.parametrize("args", [["--max-slowdown", "5%"], ["--max-slowdown", "0.05", "--max-memory-growth", "20%"],
                                  ["--noise-factor", "0"], ["--noise-factor", "3"]])
def test_compare_accepts_fractions_and_percentages(tmp_path, args):
    results.write(tmp_path / "a.json", good_rows())
    proc = run_cli("compare", str(tmp_path / "a.json"), str(tmp_path / "a.json"), *args)
    assert proc.returncode == 0, proc.stderr


def test_instructions_tolerance_is_a_fraction():
    from bench.cli.common import UsageError, fraction

    assert fraction("0", "--tolerance", zero_allowed=True) == 0.0 and fraction("2%", "--t") == pytest.approx(0.02)
    proc = run_cli("instructions", "--strategies", "single", "--tolerance", "5")
    assert proc.returncode == 2 and "--tolerance is a fraction with 0 <= x < 1" in proc.stderr
    with pytest.raises(UsageError):
        fraction("1.0", "--t")


# --cpu-replicas the host cannot hold is refused before anything starts: beyond the cores
# without --oversubscribe, beyond the memory (at the measured size of one rank) ever.
def test_too_many_cpu_replicas_are_refused_before_starting():
    env = tagged()
    proc = run_cli("run", "--strategies", "ddp", *FAST, "--batch-sizes", "2", "--cpu-replicas", "100000",
                   "--oversubscribe", env=env)
    assert proc.returncode == 2, proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert "--cpu-replicas 100000 needs about" in line and "MiB per rank, the measured peak" in line
    assert "use at most" in line
    assert not processes_with(env["PARABENCH_TEST_TAG"])


def test_replica_limits():
    from bench.run.limits import RANK_MEMORY_MIB, LimitError, check_cpu_replicas

    big = 64 * 2**30
    check_cpu_replicas(4, ["resnet18-small"], False, cores=4, available=big)
    with pytest.raises(LimitError, match="more than the 4 CPU cores.*pass --oversubscribe"):
        check_cpu_replicas(5, ["resnet18-small"], False, cores=4, available=big)
    check_cpu_replicas(5, ["resnet18-small"], True, cores=4, available=big)
    # Memory: the larger workload's rank decides, and no flag lifts it.
    room = 3 * RANK_MEMORY_MIB["resnet18"] * 2**20
    check_cpu_replicas(3, ["resnet18-small", "resnet18"], True, cores=1, available=room)
    with pytest.raises(LimitError, match=r"--cpu-replicas 4 needs about .* use at most 3$"):
        check_cpu_replicas(4, ["resnet18-small", "resnet18"], True, cores=64, available=room)
    # A workload without its own figure counts as the largest measured one.
    with pytest.raises(LimitError, match="one resnet18 rank"):
        check_cpu_replicas(4, ["another"], True, cores=64, available=room)
    check_cpu_replicas(1, ["resnet18"], False, cores=1, available=0)  # one process: nothing to share
    # The count a memory error suggests passes the cores' check too: 100000 on 2 cores said "at most 35",
    # and 35 then said "at most 2".
    with pytest.raises(LimitError, match=r"use at most 2 \(the CPU cores this process may use\), or up to 3 with "
                                         r"--oversubscribe$"):
        check_cpu_replicas(100_000, ["resnet18"], False, cores=2, available=room)


# --resume never destroys data: a results CSV without its JSON is resumed from, another
# file beside the results is refused and left as it was.
@pytest.mark.parametrize("out_name", ["r.csv", "r.json"])
def test_resume_from_the_csv_when_the_json_is_gone(tmp_path, out_name):
    out = tmp_path / "r.json"
    assert run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(out), env=tagged()).returncode == 0
    first = rows_of(out)[0]
    out.unlink()
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1,2", "--out", str(tmp_path / out_name), "--resume", env=tagged())
    assert proc.returncode == 0, proc.stderr
    assert "1 case(s) measured already, 1 to run" in proc.stderr
    rows = {r["batch_per_gpu"]: r for r in rows_of(out)}
    assert rows[1]["date"] == first["date"] and rows[1]["items_per_s"] == pytest.approx(first["items_per_s"])
    assert rows[2]["status"] == "ok"
    # The CSV twin reads as a results file of both rows (the reader knows `faulty` through the variable).
    read = run_cli("answer", "--json", str(tmp_path / "r.csv"), env=tagged())
    assert read.returncode == 0 and json.loads(read.stdout), read.stderr


@pytest.mark.parametrize("other, out_name", [("lone.csv", "lone.json"), ("lone.json", "lone.csv"),
                                             ("lone.csv", "lone.csv")])
def test_resume_refuses_to_overwrite_a_file_it_did_not_write(tmp_path, other, out_name):
    (tmp_path / other).write_text("name,notes\nx,precious\n" if other.endswith(".csv") else '{"precious": 1}')
    env = tagged()
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(tmp_path / out_name), "--resume", env=env)
    assert proc.returncode == 2, proc.stderr
    line, = proc.stderr.strip().splitlines()
    assert str(tmp_path / other) in line and "not a parabench results file" in line and "left untouched" in line
    assert [p.name for p in tmp_path.iterdir()] == [other] and not processes_with(env["PARABENCH_TEST_TAG"])


@pytest.mark.parametrize("name", ["notes.txt", "results", "r.json.bak"])
def test_out_takes_json_or_csv_only(tmp_path, name):
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1", "--out", str(tmp_path / name), env=tagged())
    assert proc.returncode == 2 and "--out takes a name ending in .json or .csv" in proc.stderr
    assert not list(tmp_path.iterdir())



# A sweep that measured nothing ok is no success: exit 3, the rows say why.
def test_a_sweep_where_every_case_failed_exits_3(tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", *FAULTY, "--batch-sizes", "1,2", "--option", "fault=raise", "--out", str(out), env=tagged())
    assert proc.returncode == 3, proc.stderr
    assert (proc.stderr.strip().splitlines()[-1]
            == "parabench: error: no case was measured ok (2 error): the rows say why")
    assert [r["status"] for r in rows_of(out)] == ["error", "error"]


# A strategy plug-in that does not load is one line naming its file.
@pytest.mark.parametrize("source, error", [("def broken(:\n", "SyntaxError"),
                                           ("import no_such_module\n", "ModuleNotFoundError")])
def test_a_broken_strategy_plug_in_is_one_line(tmp_path, source, error):
    (tmp_path / "mine.py").write_text(source)
    for args in (["run", *FAST, "--strategies", "single", "--batch-sizes", "1", "--out", str(tmp_path / "r.json")],
                 ["list", "--gpus", ""]):
        proc = run_cli(*args, env={"PARABENCH_STRATEGY_PATH": str(tmp_path)})
        assert proc.returncode == 2, proc.stderr
        line, = proc.stderr.strip().splitlines()
        assert f"strategy plug-in {tmp_path / 'mine.py'}" in line and error in line


# Two sweeps started in the same second into one folder write two files.
def test_new_results_files_have_unique_names(tmp_path, monkeypatch):
    import argparse
    import datetime
    import types

    import bench.cli.run_files as run_mod

    class Frozen(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(2026, 1, 2, 3, 4, 5)

    monkeypatch.setattr(run_mod, "datetime", types.SimpleNamespace(datetime=Frozen))
    args = argparse.Namespace(out=None, resume=False, results_dir=str(tmp_path))
    names = set()
    for pid in (1234, 1235):
        monkeypatch.setattr(run_mod.os, "getpid", lambda pid=pid: pid)
        names.add(run_mod.output_path(args).name)
    assert len(names) == 2 and all(n.startswith("run-20260102-030405-") for n in names)


# Node 0 says what it waits for, and how long it will wait, instead of waiting in silence.
class FakeStore:
    def __init__(self, nodes_):
        self.nodes, self.data = nodes_, {("seen", 1): True}

    def set(self, value, *parts):
        self.data[parts] = value

    def has(self, *parts):
        return parts in self.data

    def get(self, *parts):
        return self.data[parts]


@pytest.mark.slow
def test_node_0_says_what_it_waits_for(capsys):
    from bench.run import nodes

    store = FakeStore(nodes.Nodes(nnodes=3, node_rank=0, host="10.0.0.1", port=29400))
    store.set("same", "hash", 2)  # node 2 joined, node 1 never does
    with pytest.raises(nodes.NodesError, match=r"node\(s\) 1 did not join within 0.5 s"):
        nodes.agree(store, "same", 0.5)
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("node 0: waiting for node(s) 1 of 3 to join at 10.0.0.1:29400") and " s left)" in first
