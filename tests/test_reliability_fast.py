"""Reliability, fast: each fault an adversarial user or a new user found, proved without a
measuring sweep where possible (the sweep-level faults are in test_reliability.py)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cases import fileio, results
from tests.conftest import REPO, run_cli


# A worker's output is read in time proportional to its length, and one line of it is kept
# to its last part: a 32 MiB line without a newline took 9 s (quadratic) and was kept whole.
def test_a_huge_output_line_is_read_in_linear_time_and_kept_short():
    from bench.run.procs import Worker, _LineTail

    started = time.monotonic()
    worker = Worker([sys.executable, "-c", "import sys; sys.stdout.write('ab' * 16 * 2**20 + 'END'); "
                     "sys.stdout.write('\\nlast line')"], dict(os.environ), str(REPO))
    worker.proc.wait()
    worker._reader.join(timeout=60)
    assert time.monotonic() - started < 5
    lines = list(worker.tail)
    assert lines[-1] == "last line"
    assert lines[-2].startswith(f"[{32 * 2**20 + 3 - _LineTail.LIMIT} characters cut] ") and lines[-2].endswith("abEND")
    assert len(lines[-2]) < _LineTail.LIMIT + 40


# --- A user's model factory ------------------------------------------------------------

FACTORIES = '''
import sys, time

def noisy():
    import torch
    sys.stdout.write("loading weights...")  # no newline, as progress messages go
    return {"model": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)), "input_shape": (3, 8, 8)}

def sleepy():
    time.sleep(600)

def detached():
    import subprocess
    import torch
    # A helper in a session of its own: the probe's process group does not reach it.
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "parabench-test-detached"],
                     start_new_session=True)
    return {"model": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)), "input_shape": (3, 8, 8)}
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def test_a_factory_that_prints_without_a_newline_resolves(factories):
    from bench.workloads.probing import probe

    found = probe(["userfactories:noisy"])
    assert (found["userfactories:noisy"]["num_classes"] == 10
            and found["userfactories:noisy"]["input_shape"] == [3, 8, 8])


def test_a_sweep_killed_while_a_factory_resolves_leaves_a_folder_the_next_sweep_removes(factories):
    """SIGKILL runs no clean-up: the resolving folder stays, and its lock, released by the kernel
    with the process, tells the next sweep (remove_stale) that no one is using it."""
    import signal

    from bench.run import procs

    temp = factories / "tmp"
    temp.mkdir()
    sweep = subprocess.Popen([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "single",
                              "--models", "userfactories:sleepy", "--out", str(factories / "r.json")], cwd=REPO,
                             env={**os.environ, "TMPDIR": str(temp)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not list(temp.glob("parabench-sweep-probe-*/live.lock")) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = list(temp.glob("parabench-sweep-probe-*"))
        assert left, "no resolving folder appeared"
    finally:
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=30)
    time.sleep(0.5)  # the probe dies with the sweep (its parent-death signal)
    assert left[0].exists()
    assert procs.remove_stale(str(temp)) == [str(left[0])] and not left[0].exists()


def detached_helpers(under: str, but: str = "") -> list:
    """The `detached` factory's helpers whose TMPDIR lies under `under` (a path prefix; not followed
    by `but` where given): this test's own, not those of a test running beside it (make test runs
    several at once)."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            tmpdir = os.path.realpath(p.environ().get("TMPDIR", "/"))
            prefix = os.path.realpath(under)
            if "parabench-test-detached" in (p.info["cmdline"] or []) and tmpdir.startswith(prefix) \
                    and not (but and tmpdir[len(prefix):].startswith(but)):
                found.append(p)
        except psutil.Error:  # it ended while being looked at
            continue
    return found


def test_a_helper_a_factory_starts_in_a_session_of_its_own_ends_with_the_resolving(factories, monkeypatch):
    import tempfile

    from bench.workloads.probing import probe

    temp = factories / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # the probe's folder under this test's TMPDIR

    def helpers():
        return detached_helpers(str(temp))

    assert probe(["userfactories:detached"])["userfactories:detached"]["num_classes"] == 10
    deadline = time.monotonic() + 10
    while helpers() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = helpers()
    for p in left:
        p.kill()
    assert not left, [p.pid for p in left]


def test_resolving_a_factory_keeps_to_the_start_up_limit(factories):
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--models", "userfactories:sleepy",
                   "--startup-timeout", "2", "--out", str(factories / "r.json"),
                   env={"PYTHONPATH": os.environ["PYTHONPATH"]}, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "parabench: error: resolving userfactories:sleepy took over 2 s: give its factory more time with a larger "
        "--startup-timeout (--models)")
    assert not (factories / "r.json").exists()


@pytest.mark.parametrize("result, said", [(42, "int 42"), (None, "NoneType None"), ("resnet", "str 'resnet'"),
                                          ({"model": "resnet"}, "dict {'model': 'resnet'} whose 'model' is str")])
def test_a_factory_that_returns_no_model_is_named_with_what_it_returned(result, said):
    from bench.workloads import WorkloadError
    from bench.workloads.resolve import from_factory_result

    with pytest.raises(WorkloadError) as caught:
        from_factory_result(result, "mine:build")
    assert str(caught.value) == (f"model 'mine:build': its factory returned {said}: it must return an nn.Module, "
                                 "or a dict or object whose 'model' is one")


def test_a_sweep_killed_while_resolving_a_factory_leaves_no_process(factories):
    import signal

    import psutil

    sweep = subprocess.Popen([sys.executable, "-m", "bench", "run", "--gpus", "", "--models", "userfactories:sleepy",
                              "--out", str(factories / "r.json")], cwd=REPO,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ["PYTHONPATH"]])},
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def probes():
        try:
            return [p for p in psutil.Process(sweep.pid).children(recursive=True)
                    if "bench.workloads._probe" in p.cmdline()]
        except psutil.NoSuchProcess:
            return []

    deadline = time.monotonic() + 60
    while not probes() and time.monotonic() < deadline:
        time.sleep(0.1)
    found = probes()
    assert found, "the sweep never started resolving the factory"
    sweep.send_signal(signal.SIGKILL)
    sweep.wait()
    gone, alive = psutil.wait_procs(found, timeout=10)
    assert not alive, [p.cmdline() for p in alive]


# A plug-in under a built-in's name would measure in its place, unseen.
def test_a_strategy_plug_in_cannot_take_a_built_in_name(tmp_path):
    (tmp_path / "myddp.py").write_text("from strategies import register\nfrom strategies.ddp import DDP\n\n\n"
                                       "@register\nclass MyDDP(DDP):\n    name = 'ddp'\n")
    proc = run_cli("list", "--gpus", "", env={"PARABENCH_STRATEGY_PATH": str(tmp_path)})
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip() == (f"parabench: error: strategy 'ddp' of {tmp_path / 'myddp.py'} has the name of the "
                                   f"strategy in {REPO / 'strategies' / 'ddp.py'}: give it a name of its own")


# A name with markup was listed and run, and its results file then refused whole by `answer` and
# `report` ("field strategy holds '<'"), the good rows with it.
@pytest.mark.parametrize("name", ["<img src=x onerror=alert(1)>", "my strategy", "a|b", ""])
def test_a_strategy_plug_in_whose_name_is_no_plain_word_is_refused_where_it_loads(tmp_path, name):
    (tmp_path / "odd.py").write_text("from strategies import register\nfrom strategies.ddp import DDP\n\n\n"
                                     f"@register\nclass Odd(DDP):\n    name = {name!r}\n")
    proc = run_cli("list", "--gpus", "", env={"PARABENCH_STRATEGY_PATH": str(tmp_path)})
    assert proc.returncode == 2 and not proc.stdout
    assert proc.stderr.strip() == (f"parabench: error: strategy {name!r} of {tmp_path / 'odd.py'}: a strategy's name "
                                   "is letters, digits, '.', '_' and '-', starting with a letter or digit: rename it")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(_cuda(), reason="on a GPU host these commands run")
@pytest.mark.parametrize("command", [["check", "bareloop"], ["peak"]])
def test_gpu_commands_on_a_cpu_host_are_one_line(command):
    proc = run_cli(*command)
    assert proc.returncode == 2 and not proc.stdout
    line, = proc.stderr.strip().splitlines()
    assert line.startswith(f"parabench: error: {' '.join(command)} runs on a GPU and this torch") and "GPU host" in line


# A thread count that is no count made CPU rows 3-7x slower, still "ok", with no word.
@pytest.mark.parametrize("name, value", [("OMP_NUM_THREADS", "0"), ("OMP_NUM_THREADS", "abc"),
                                         ("OMP_NUM_THREADS", ""), ("MKL_NUM_THREADS", "-1")])
def test_a_thread_count_that_is_no_count_is_refused(tmp_path, name, value):
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--out", str(tmp_path / "r.json"), env={name: value})
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"parabench: error: {name}={value!r} is not a thread count: unset it, or set a positive whole number "
        f"(e.g. {name}=1)")
    assert not list(tmp_path.iterdir())


def test_thread_counts_that_are_counts_pass():
    from bench.run import limits

    limits.check_thread_variables({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "16"})
    limits.check_thread_variables({"OMP_NUM_THREADS": "4,2"})  # OpenMP: one count per nesting level
    limits.check_thread_variables({})


# --- Readers of results files ------------------------------------------------------------

BASELINE = REPO / "results" / "reference" / "baselines" / "cpu-ci.json"


def cli(capsys, *args: str) -> tuple[int, str, str]:
    """`python -m bench ARGS` in this process (the readers import no torch): status, stdout, stderr."""
    from bench.cli import main

    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def results_file(path: Path, date: str) -> Path:
    """A copy of the committed CPU baseline (six ok rows) dated `date`."""
    doc = json.loads(BASELINE.read_text())
    for row in doc["rows"]:
        row["date"] = date
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


def test_answer_skips_a_file_that_is_no_results_file_with_one_line(tmp_path, capsys):
    results_file(tmp_path / "run-a.json", "2026-11-01T10:00:00")
    (tmp_path / "run-b.json").touch()  # a shell redirection writing the next run: no row yet, the newest name
    os.mkfifo(tmp_path / "run-c.json")  # reading a pipe would wait forever
    status, out, err = cli(capsys, "answer", str(tmp_path))
    assert status == 0, err
    assert err.splitlines() == [
        f"parabench: skipped one file: {tmp_path / 'run-b.json'}: the file is empty; re-run the sweep into a new file, "
        "or pass another results file",
        f"parabench: skipped one file: {tmp_path / 'run-c.json'} is not a regular file (a pipe, a device or a socket): "
        "pass a results file"]
    assert "(run run-a.json)" in out


@pytest.mark.parametrize("named, says", [
    ("/dev/zero", "/dev/zero is not a regular file (a pipe, a device or a socket): pass a results file"),
    ("fifo.json", "fifo.json is not a regular file (a pipe, a device or a socket): pass a results file"),
    ("nested.json", "nested.json: JSON nested too deeply to be a results file"),
    ("binary.json", "binary.json: not text, so no results file"),
])
def test_a_named_file_that_is_no_results_file_is_one_line(tmp_path, capsys, named, says):
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "nested.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "binary.json").write_bytes(b"\xff\xfe\x00" * 100)
    path = named if named.startswith("/") else str(tmp_path / named)
    for command in (["answer", path], ["report", path, "--out", str(tmp_path / "plots")], ["compare", path, path],
                    ["dashboard", path, "--out", str(tmp_path / "d.json")]):
        status, _, err = cli(capsys, *command)
        assert status == 2, (command, err)
        line, = err.strip().splitlines()
        assert line.startswith(f"parabench: error: {path}") and says.split(" ", 1)[1] in line, line


def test_a_file_larger_than_any_results_file_is_refused_unread(tmp_path, monkeypatch):
    monkeypatch.setattr(fileio, "MAX_BYTES", 1000)
    big = results_file(tmp_path / "big.json", "2026-11-01")
    with pytest.raises(results.ResultsError, match=r"big.json is 0 MiB, more than any results file \(0 MiB at most\)"):
        results.load(big)


def test_closing_the_output_early_is_no_traceback(tmp_path):
    path = results_file(tmp_path / "run.json", "2026-11-01")
    proc = subprocess.Popen([sys.executable, "-m", "bench", "answer", "--json", str(path)], cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader leaves before a byte is written, as `| head -0` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141 and err == ""


# --- The user's own run, answered ---------------------------------------------------------

def test_answer_reads_your_own_run_not_a_newer_reference_run(tmp_path, capsys):
    results_file(tmp_path / "reference" / "h200" / "ref.json", "2026-12-31T00:00:00")
    results_file(tmp_path / "run-mine.json", "2026-01-01T00:00:00")
    status, out, _ = cli(capsys, "answer", "--results-dir", str(tmp_path))
    assert status == 0 and "(run run-mine.json)" in out and "ref.json" not in out
    status, out, _ = cli(capsys, "answer", "--results-dir", str(tmp_path), "--reference")
    assert status == 0 and "(run ref.json)" in out
    assert out.startswith(f"The reference runs committed with parabench ({tmp_path}/reference), not your own")


def test_with_no_run_of_your_own_answer_and_report_say_how_to_make_one(tmp_path, capsys):
    results_file(tmp_path / "reference" / "ref.json", "2026-12-31T00:00:00")
    for command in (["answer"], ["report", "--out", str(tmp_path / "plots")]):
        status, _, err = cli(capsys, *command, "--results-dir", str(tmp_path))
        assert status == 2 and err.strip() == (
            f"parabench: error: no results of your own in {tmp_path}: measure a run with `make bench` (or `python -m "
            f"bench run`), or pass --reference for the runs committed in {tmp_path / 'reference'}")
    assert not (tmp_path / "plots").exists()


# --- compare ------------------------------------------------------------------------------

def test_compare_reads_a_row_stopped_after_its_short_trial_as_the_trial_that_ran():
    """A survey row stopped after its short first trial keeps the asked protocol in its warmup, steps
    and trials columns (the case's identity); compare read them and held its 5 steps as 3 trials of 20."""
    from bench.report.compare import protocol_difference

    full = {"warmup": 10, "steps": 20, "trials": 3, "n_timed_steps": 60, "screened": ""}
    short = dict(full, n_timed_steps=5, screened="raced out: a short trial of 5 steps read 100 img/s")
    assert protocol_difference(full, short) == "steps 20 -> 5, trials 3 -> 1"
    assert protocol_difference(short, short) == "" and protocol_difference(full, dict(full)) == ""



def test_compare_counts_no_skipped_row_as_new_and_notes_another_protocol(tmp_path, capsys):
    baseline = results_file(tmp_path / "base.json", "2026-11-01")
    doc = json.loads(baseline.read_text())
    for row in doc["rows"]:
        row.update(warmup=0, steps=2)  # measured with another protocol than the baseline's 3 and 6
    skipped = dict(doc["rows"][0], strategy="dp", status="skipped", reason="needs GPUs", items_per_s=None)
    doc["rows"].append(skipped)
    current = tmp_path / "current.json"
    current.write_text(json.dumps(doc))
    status, out, _ = cli(capsys, "compare", str(baseline), str(current), "--json", str(tmp_path / "v.json"))
    verdicts = {v["case"]: v for v in json.loads((tmp_path / "v.json").read_text())}
    dp, = [v for case, v in verdicts.items() if case.startswith("dp ")]
    assert dp["verdict"] == "skipped" and dp["why"] == ["only in the current file, not run: needs GPUs"]
    assert "new" not in {v["verdict"] for v in verdicts.values()} and "NEW" not in out
    ok = [v for v in verdicts.values() if v is not dp]
    assert len(ok) == 6 and all(v["why"][-1] == "measured differently: warmup 3 -> 0, steps 6 -> 2" for v in ok)
    assert out.rstrip().splitlines()[-1] == (
        "note: 6 case(s) were measured with other warm-up, steps or trials than their baseline (warmup 3 -> 0, "
        "steps 6 -> 2): their timing differs by protocol as well as by code; measure both with the same --warmup, "
        "--steps and --trials")


# --- A protocol that cannot measure, and figures that disagree: said in the row ------------

def ok_row(**changes) -> dict:
    # warm-up 3, 6 steps x 3 trials, wall within the spread; a file written before units: today's names
    row = results.today(json.loads(BASELINE.read_text())["rows"][0])
    row.update(changes)
    return row


def test_a_row_says_what_makes_its_figures_mislead():
    from bench.cases.caveats import caveat

    assert caveat(ok_row()) == ""
    assert caveat(ok_row(warmup=0)) == ("no warm-up: the first timed step includes one-time work (allocator growth, "
                                        "autotuning, lazy loading)")
    assert caveat(ok_row(steps=1, trials=1, n_timed_steps=1)) == ("1 timed step: too few for a p10-p90 spread "
                                                                  "(it needs 11)")
    # A rank stopped (SIGSTOP) inside the timed steps: one step of minutes, the median untouched.
    stalled = ok_row(items_per_s=72.0, items_per_s_p10=70.0, items_per_s_p90=74.0, wall_items_per_s=8.1)
    assert caveat(stalled) == ("wall-clock 8.1 img/s is -89% off the median's 72, beyond the p10-p90 spread: "
                               "some steps stalled far beyond what the median shows; re-run")
    # Within 10% of the median, a wall-clock outside a tight spread is no disagreement (committed GPU rows: 5.3%).
    assert caveat(ok_row(items_per_s=100.0, items_per_s_p10=99.9, items_per_s_p90=100.1, wall_items_per_s=94.7)) == ""
    assert caveat(ok_row(status="error")) == ""


def test_every_reader_and_the_report_tables_show_the_caveat(tmp_path):
    from bench.report import frame, pages

    path = tmp_path / "run.json"
    # A row written before the caveat column: the reader says it too.
    batch = ok_row()["global_batch"]
    results.write(path, [ok_row(items_per_s=72.0, items_per_s_p10=70.0, items_per_s_p90=74.0, wall_items_per_s=8.1,
                                step_ms_p10=1000 * batch / 74.0, step_ms_p50=1000 * batch / 72.0,
                                step_ms_p90=1000 * batch / 70.0, items_per_s_ci_lo=71.0, items_per_s_ci_hi=73.0,
                                caveat=None)])
    row, = results.load(path)
    assert row["caveat"].startswith("wall-clock 8.1 img/s is -89% off")
    tables = pages.tables(frame.load_frame([path]))
    assert tables[pages.CAVEATS].iloc[0, 0].startswith("wall-clock 8.1 img/s")
    assert tables["throughput (median, p10-p90)"].iloc[0, 0].endswith("[caveat]")
    results.write(path, [ok_row()])
    assert pages.CAVEATS not in pages.tables(frame.load_frame([path]))


@pytest.mark.parametrize("execution", ["compile", "cuda-graph"])
def test_no_warm_up_before_compiled_or_captured_steps_is_refused(tmp_path, execution):
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--execution", execution, "--warmup", "0",
                   "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"parabench: error: --warmup 0 with --execution {execution} would time ")
    assert proc.stderr.strip().endswith("as a training step: give --warmup 1 or more") and not list(tmp_path.iterdir())


# Values that broke the figures (a traceback in answer, report, compare or dashboard) are one
# line naming file, row and field.
@pytest.mark.parametrize("changes, says", [
    ({"options": "[]"}, "field options is '[]', not a JSON object"),
    ({"environment": "5"}, "field environment is '5', not a JSON object"),
    ({"compile_mode": []}, "field compile_mode is a list, not a single value"),
    ({"items_per_s": 1e308}, "items_per_s 1e+308 lies outside items_per_s_p10-items_per_s_p90"),
    ({"step_ms_p50": 1e6}, "step_ms_p50 1e+06 lies outside step_ms_p10-step_ms_p90"),
    ({"anatomy_step_ms": 3.0}, "has a step anatomy without anatomy_compute_ms"),
    ({"precision": "fp64"}, "has unknown precision 'fp64' (this parabench knows fp32, amp-fp16, amp-bf16, apex-O1"),
])
def test_a_row_whose_values_break_the_figures_is_one_line(tmp_path, capsys, changes, says):
    path = tmp_path / "run.json"
    doc = json.loads(BASELINE.read_text())
    doc["rows"][1].update(changes)
    path.write_text(json.dumps(doc))
    for command in (["answer", str(path)], ["report", str(path), "--out", str(tmp_path / "p")],
                    ["compare", str(BASELINE), str(path)], ["dashboard", str(path), "--out", str(tmp_path / "d.json")]):
        status, _, err = cli(capsys, *command)
        line, = err.strip().splitlines()
        assert status == 2 and line.startswith(f"parabench: error: {path}: row 1") and says in line, (command, line)


def test_text_fields_are_read_as_text(tmp_path):
    doc = json.loads(BASELINE.read_text())
    doc["rows"][0].update(date=20261101, host=5)  # a hand-edited file: numbers where text belongs
    (tmp_path / "run.json").write_text(json.dumps(doc))
    row = results.load(tmp_path / "run.json")[0]
    assert row["date"] == "20261101" and row["host"] == "5"


# --- Memory: the batch's activations and the cgroup's limit counted, the OOM killer named --

def test_a_cpu_batch_whose_activations_cannot_fit_is_out_of_memory_before_allocating(monkeypatch):
    from bench.core.launch_spec import LaunchSpec
    from bench.run import limits
    from bench.run.worker import Job

    monkeypatch.setattr(limits, "available_memory", lambda: 2**30)
    from bench.cases.case import Case, settings
    from bench.core.placement import Placement

    def case(batch):
        return Case.make("single", "fp32", "resnet18-small", Placement((), 1), batch, "eager", settings()).spec()

    job = Job(LaunchSpec.local("local"), 0, 1, 0)
    inputs, _ = job.data(case(64))  # 0.2 GiB of saved activations
    assert inputs.shape[0] == 64
    with pytest.raises(MemoryError, match=r"host out of memory: the batch needs at least 1\.\d GiB \(inputs and the "
                                          r"activations autograd keeps, 1 rank\), 1\.0 GiB available"):
        job.data(case(512))  # inputs alone: 1.5 MiB


def test_the_cgroups_room_and_oom_kills_are_read(tmp_path, monkeypatch):
    from bench.run import hostmemory

    inner, outer = tmp_path / "job", tmp_path
    inner.mkdir()
    (inner / "memory.max").write_text("3221225472\n")  # 3 GiB
    (inner / "memory.current").write_text(str(2 * 2**30) + "\n")
    (inner / "memory.stat").write_text("anon 1\ninactive_file 536870912\n")  # 0.5 GiB of reclaimable cache
    (inner / "memory.events").write_text("low 0\nhigh 0\nmax 4\noom 1\noom_kill 2\n")
    (outer / "memory.max").write_text("max\n")
    (outer / "memory.current").write_text("1\n")
    monkeypatch.setattr(hostmemory, "cgroup_folders", lambda: [("v2", inner), ("v2", outer)])
    assert hostmemory.cgroup_room() == int(1.5 * 2**30)
    assert hostmemory.available() <= int(1.5 * 2**30)
    before = hostmemory.oom_kills()
    assert before["cgroup"] == 2
    (inner / "memory.events").write_text("oom_kill 3\n")
    assert hostmemory.oom_kills_since(before) == "this cgroup: 2 -> 3"


@pytest.fixture
def memory_cgroup():
    """A memory cgroup of 1.5 GiB below this process's own, or a skip where none can be made
    (not root, or cgroup v2 without a delegated memory controller)."""
    from bench.run import hostmemory

    folders = hostmemory.cgroup_folders()
    if not folders:
        pytest.skip("no memory cgroup here")
    version, mine = folders[0]
    group = mine / f"parabench-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / ("memory.limit_in_bytes" if version == "v1" else "memory.max")).write_text(str(3 * 2**29))
    except OSError as exc:
        group.rmdir() if group.exists() else None
        pytest.skip(f"cannot make a memory cgroup in {mine}: {exc.strerror}")
    yield group
    deadline = time.monotonic() + 30
    while (group / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.2)  # the sweep's guard leaves a moment after it
    group.rmdir()


def test_a_worker_the_oom_killer_ends_is_oom_and_larger_batches_are_skipped(tmp_path, memory_cgroup):
    def enter():
        (memory_cgroup / "cgroup.procs").write_text(str(os.getpid()))

    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "faulty",
                           "--cpu-replicas", "1", "--warmup", "1", "--steps", "2", "--trials", "1",
                           "--batch-sizes", "1,2", "--option", "fault=memhog", "--out", str(out)],
                          cwd=REPO, preexec_fn=enter, capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(REPO),
                                          "PARABENCH_STRATEGY_PATH": str(REPO / "tests" / "strategies")}, timeout=300)
    rows = {r["batch_per_gpu"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows[1]["status"] == "oom", (rows[1]["reason"], proc.stderr)
    assert rows[1]["reason"].startswith("host out of memory: the kernel's out-of-memory killer ended the worker "
                                        "(killed by SIGKILL; OOM kills in this cgroup: 0 -> 1")
    assert rows[2]["status"] == "skipped" and "batch 1 per GPU already ran out of memory" in rows[2]["reason"]


# --- Across hosts ----------------------------------------------------------------------------

class _Quiet:
    def begin(self, total): pass
    def preparing(self, label): pass
    def case_started(self, label): pass
    def case_done(self, row): pass


class _LeaderWithAFollowerGone:
    """Node 0's side of a sweep whose node 1 has stopped beating before the worker starts."""

    def __init__(self):
        import types

        from bench.run import nodes

        self.store = types.SimpleNamespace(nodes=nodes.Nodes(2, 0, "127.0.0.1", 9))  # nobody listens at port 9
        self.ended = []

    def begin(self, spec, options): return 0
    def end(self, launch): self.ended.append(launch)
    def silent(self): return [1]
    def gone(self, wait_s=3.0): return [1]
    def follower_reasons(self, launch): return ""


def test_a_follower_gone_before_a_worker_starts_stops_the_sweep_at_once(tmp_path):
    """Each worker used to wait a whole start-up limit for node 1, record its cases as timeouts
    and go on to the next (exit 3); the sweep now stops at once, the cases left unrecorded for
    --resume, and `run` exits 1."""
    from bench.cases.case import settings as make_settings
    from bench.cases.grid import build_cases
    from bench.run.attempt import NodeGone
    from bench.run.sweep import Sweep

    settings = make_settings(warmup=1, steps=2, trials=1, startup_timeout_s=60, case_timeout_s=60)
    cases = build_cases(["ddp"], ["fp32"], ["resnet18-small"], ["eager"], [], [2], 2, [2, 4], settings, nnodes=2)
    out, leader = tmp_path / "r.json", _LeaderWithAFollowerGone()
    started = time.monotonic()
    with pytest.raises(NodeGone, match=r"node\(s\) 1 stopped answering; 2 case\(s\) of this worker"):
        Sweep(cases, settings, str(out), _Quiet(), leader=leader).run()
    assert time.monotonic() - started < 30 and leader.ended == [0] and not out.exists()


def test_a_store_that_is_not_there_is_one_line_within_its_limit():
    from bench.run import nodes

    started = time.monotonic()
    with pytest.raises(nodes.NodesError) as caught:
        nodes.wait_for_port("127.0.0.1", 9, 1.5, "node 1")
    assert time.monotonic() - started < 3
    assert str(caught.value) == ("node 1 cannot reach the rendezvous store at 127.0.0.1:9 within 1.5 s: start node 0 "
                                 "first, check the address")


def test_a_followers_heartbeat_tells_whether_it_is_gone(monkeypatch):
    import types

    from bench.run import node_launches, nodes

    beats = {1: 0, 2: 0}
    store = types.SimpleNamespace(nodes=nodes.Nodes(3, 0, "h", 1), beats=lambda node: beats[node])
    leader, now = node_launches.Leader(store), [100.0]
    monkeypatch.setattr(node_launches.time, "monotonic", lambda: now[0])
    assert leader.silent() == []  # first look: nothing known yet
    now[0] += node_launches.Leader.SILENT_S
    beats[1] += 10  # node 1 beat meanwhile; node 2 did not
    assert leader.silent() == [2]
    now[0] += node_launches.Leader.SILENT_S - 1
    assert leader.silent() == [2]  # node 1 silent for less than the limit


def test_a_c10d_error_is_its_first_line():
    from bench.run import nodes

    error = RuntimeError("Connection reset by peer\nException raised from recvBytes at socket.cpp:670\nframe #0: ...")
    assert nodes._first_line(error) == "Connection reset by peer"


# --- First contact ------------------------------------------------------------------------------

def test_a_python_without_a_dependency_is_told_which_and_how(monkeypatch, capsys, tmp_path):
    import importlib.util

    from bench import cli

    monkeypatch.chdir(tmp_path)  # a folder without a .venv
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("psutil", "rich") else real(name, *a))
    assert cli.main(["list"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"parabench: error: this Python ({sys.executable}) lacks psutil, rich: {sys.executable} -m pip install psutil "
        "rich, or `make setup` (.venv with all of them, torch's CPU build where there is no GPU)")


def test_python_outside_the_venv_that_setup_made_is_told_to_use_it(monkeypatch, capsys, tmp_path):
    """After `make bench`, `python -m bench answer` with the system's Python: the .venv is the fix."""
    import importlib.util

    from bench import cli

    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "parabench").write_text("")
    monkeypatch.chdir(tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert cli.main(["answer", "--json"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"parabench: error: this Python ({sys.executable}) lacks torch: this folder's .venv has them: "
        "`. .venv/bin/activate` first, or run .venv/bin/parabench answer --json")


def test_an_instruction_count_file_that_is_a_device_is_one_line(capsys):
    status, _, err = cli(capsys, "instructions", "--compare", "/dev/zero")
    assert status == 2 and err.strip() == ("parabench: error: /dev/zero is not a regular file (a pipe, a device or a "
                                           "socket): pass an instruction-count file")


def test_an_oom_kill_outside_the_cgroup_is_not_the_workers(monkeypatch):
    from bench.run import hostmemory

    counts = iter([{"cgroup": 0, "host": 5}])
    monkeypatch.setattr(hostmemory, "oom_kills", lambda: next(counts))
    assert hostmemory.oom_kills_since({"cgroup": 0, "host": 4}) == ""  # the host's count rose, the cgroup's did not
    monkeypatch.setattr(hostmemory, "oom_kills", lambda: {"host": 5})
    assert hostmemory.oom_kills_since({"host": 4}) == "the host: 4 -> 5"  # no cgroup count: the host's says it


def test_what_counts_as_out_of_memory():
    """The allocator's error, the host's, and cuBLAS failing to allocate its workspace (as it did
    on an H100 at the edge of memory: a probe of results/reference/h100/fit/fit-h100.fit.json); not any error."""
    from bench.run.worker import is_oom

    assert is_oom(MemoryError("out of memory: 16.0 MiB of tensors"))
    assert is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"))
    assert is_oom(OSError(12, "Cannot allocate memory"))
    assert not is_oom(RuntimeError("CUDA error: CUBLAS_STATUS_EXECUTION_FAILED"))


@pytest.mark.parametrize("changes, said", [
    ({"items_per_s": 1e308, "items_per_s_p10": 1e308, "items_per_s_p90": 1e308, "flops_per_item": None,
      "items_per_s_ci_lo": None, "items_per_s_ci_hi": None}, "beyond what any device trains"),
    ({"items_per_s": 1e12, "items_per_s_p10": 1e12, "items_per_s_p90": 1e12, "flops_per_item": 2.73e9,
      "items_per_s_ci_lo": None, "items_per_s_ci_hi": None}, "FLOP/s per device, beyond any device"),
    ({"n_replicas": 10**9, "world_size": 10**9}, "more devices than any cluster has"),
    ({"device": "cuda", "gpus": "0,1,2,3", "n_gpus": 4, "gpu_count_host": 2, "gpu_name": "NVIDIA H200"},
     r"4 GPUs on 1 host\(s\) of 2 GPUs"),
    ({"strategy": "hyperdrive"}, "strategy 'hyperdrive', which no registered strategy is"),
    ({k: v * 1000 for k, v in ok_row().items() if k.startswith(("items_per_s", "wall_items_per_s", "trial_items_per_s"))
      and isinstance(v, float)}, "where its median step of"),
    ({"model": "m|x\n## injected"}, r"field model holds '\|', which no sweep writes there"),
    ({"cpu": "Xeon\x1b[31m"}, r"field cpu holds '\\x1b', which no sweep writes there"),
    ({"reason": "fine\x1b]0;title\x07"}, r"field reason holds '\\x1b'"),
], ids=["1e308", "beyond-peak", "a-billion-replicas", "more-gpus-than-the-host", "a-strategy-no-registry-knows",
        "a-rate-its-steps-do-not-make", "markdown-in-a-model-name", "an-escape-sequence-in-the-cpu",
        "an-escape-sequence-in-a-reason"])
def test_a_results_file_is_checked_for_sense_where_it_is_read(tmp_path, changes, said):
    """img/s of 1e308 printed a 309-digit answer and "+inf% PASS"; 10^9 replicas read "CPU x1000000000";
    a strategy no registry knows ("hyperdrive") was shown as a row; a model named 'm|x\n## injected'
    broke REPORT.md's tables and made a heading; an escape sequence in the CPU's name reached the
    terminal; img/s a thousand times what the row's own median step makes was named the answer.
    Each is one line naming the row and the field."""
    path = tmp_path / "bad.json"
    results.write(path, [ok_row(**changes)])
    with pytest.raises(results.ResultsError, match=said):
        results.load(path)
    done = run_cli("answer", str(path))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and said.split(" ")[1] in done.stderr


def test_two_rows_of_one_case_in_one_file_are_refused_with_both_named(tmp_path):
    """Two rows of one case that disagree (the second three times faster) were resolved silently, the
    last kept. A sweep writes one row per case; two in one file are an edit, and the reader says so."""
    path = tmp_path / "twice.json"
    first = ok_row()
    rates = {k: v * 3 for k, v in first.items() if k.startswith("items_per_s") and k != "items_per_sample"}
    results.write(path, [first, {**first, **rates,
                                 **{k: first[k] / 3 for k in ("step_ms_p10", "step_ms_p50", "step_ms_p90")}}])
    with pytest.raises(results.ResultsError, match="row 1 measures the same case as row 0"):
        results.load(path)


def test_an_integer_of_a_hundred_thousand_digits_is_one_line(tmp_path):
    path = tmp_path / "digits.json"
    path.write_text('{"schema": "parabench-results/1", "rows": [{"batch_per_gpu": ' + "9" * 100_000 + "}]}")
    done = run_cli("answer", str(path))
    assert done.returncode == 2 and "corrupt or truncated results file" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_torchrun_sweep_leaves_nothing_in_the_temp_folder(tmp_path):
    """torchrun makes a torchelastic_* folder in the temp folder for every launch and leaves it; a
    sweep's workers get their own folder as TMPDIR, removed with them."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = run_cli("run", "--gpus", "", "--strategies", "ddp", "--cpu-replicas", "2", "--batch-sizes", "2",
                   "--warmup", "0", "--steps", "1", "--trials", "1", "--out", str(tmp_path / "r.json"),
                   env={"TMPDIR": str(temp)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["rows"][0]["status"] == "ok"
    left = [p.name for p in temp.iterdir() if not p.name.startswith("torchinductor_")]
    assert left == [], left


def test_a_run_into_a_file_or_pipe_says_which_case_it_measures_now(tmp_path):
    """No live progress bar where the output is not a terminal: each case announces itself when
    it starts, so a minute-long case is not a minute of silence."""
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--warmup", "0", "--steps",
                   "1", "--trials", "1", "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    started = lines.index("measuring single fp32 resnet18-small CPU x1 batch 2 ...")
    assert any(line.startswith("single ") and "img/s" in line for line in lines[started + 1:]), lines


def test_a_markdown_table_keeps_every_text_cell_in_its_cell(tmp_path):
    """A failed case's reason quotes its traceback (`a | b`, `<lambda>`, two lines): in a Markdown table
    a pipe ended the cell, a line break the row, and `<...>` was markup in the HTML twin."""
    import pandas as pd

    from bench.report import mdtable

    table = pd.DataFrame([{"case": "ddp", "reason": "RuntimeError: a | b in <lambda>\nsecond line"}])
    lines = mdtable.markdown(table).splitlines()
    assert len(lines) == 3 and lines[2].count(" | ") == 1 and lines[2].count("\\|") == 1, lines
    assert "&lt;lambda&gt;" in lines[2] and "second line" in lines[2]
    path = tmp_path / "spans.json"  # line breaks stay where text spans lines (a reason, a topology)
    results.write(path, [ok_row(reason="a traceback\nover two lines", gpu_topology="GPU0\tX\nGPU1\tNV18")])
    assert results.load(path)[0]["reason"] == "a traceback\nover two lines"


def test_an_integer_of_a_hundred_thousand_digits_in_a_csv_is_one_short_line(tmp_path):
    """The CSV's error repeated the whole value: one line of 100,151 characters."""
    import csv

    from tests.conftest import REPO

    # The committed CI baseline's rows as a CSV of their own schema (written before units: img_per_s).
    rows = json.loads((REPO / "results" / "reference" / "baselines" / "cpu-ci.json").read_text())["rows"]
    rows = [{k: "" if v is None else v for k, v in r.items()} for r in rows]
    assert "img_per_s" in rows[0]
    path = tmp_path / "digits.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerow({**rows[0], "n_replicas": "9" * 100_000})
    done = run_cli("answer", str(path))
    assert "field n_replicas is" in done.stderr, done.stderr[:500]
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr[:500]
    assert "Traceback" not in done.stderr and len(done.stderr) < 500, done.stderr[:500]


def test_what_a_run_did_not_measure_says_why_not_that_it_was_not_measured():
    """`make bench GPUS=0 MODEL=timm:resnet50` answered "Not measured: dp, dp-fn, dp-manual: not
    measured.": the rows said why (the survey's share of the budget was spent), the answer dropped it."""
    import pandas as pd

    from bench.report.answer import not_measured

    why = ("not measured: the search's survey may take 60% of the budget (9 min), and it was spent; a larger "
           "--budget (make bench BUDGET=) measures it")
    run = pd.DataFrame([{"strategy": s, "status": "skipped", "reason": why} for s in ("dp", "dp-fn", "dp-manual")]
                       + [{"strategy": "single", "status": "ok", "reason": ""}])
    assert not_measured(run) == {"the search's survey may take 60% of the budget (9 min), and it was spent":
                                 ["dp", "dp-fn", "dp-manual"]}


def test_run_help_says_every_default():
    """`run --help` left out the defaults of --cpu-replicas, --seed, --case-timeout, --startup-timeout,
    --data and --compile-mode: each flag now says its own."""
    entries, current = {}, None
    for line in run_cli("run", "--help").stdout.splitlines():
        if line.startswith("  -"):  # an option's first line (argparse indents its help under it)
            current = line.split()[0].rstrip(",")
            entries[current] = line
        elif current and line.startswith("      "):
            entries[current] += " " + line.strip()
        else:
            current = None
    for flag, said in (("--cpu-replicas", "(default 2)"), ("--seed", "(default 0)"),
                       ("--case-timeout", "(default 600)"), ("--startup-timeout", "(default 300)"),
                       ("--data", "(default device)"),
                       ("--compile-mode", "(default default)"), ("--optimizer", "(default auto)"),
                       ("--channels-last", "(default auto)")):
        assert said in " ".join(entries[flag].split()), (flag, entries[flag])


def test_a_run_of_too_few_steps_shows_no_confidence_interval(tmp_path):
    """A one-step run printed "95% CI 0.72-0.72": an interval of one step. Where the steps are too few
    for a spread (the row's caveat says so), the answer shows none."""
    out = tmp_path / "one.json"
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--warmup", "1", "--steps", "1",
                   "--trials", "1", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    said = run_cli("answer", str(out)).stdout
    assert "(95% CI" not in said and "1 timed step: too few for a p10-p90 spread" in said, said


def test_a_helper_a_worker_starts_in_a_session_of_its_own_ends_with_a_sigkilled_sweep(factories):
    """The worker builds the model, so its factory starts a helper in a session of its own, which
    neither the worker's parent-death signal nor its process group reaches: it carries the worker's
    TMPDIR, and the sweep's guard ends it when the sweep is SIGKILLed."""
    import signal

    temp = factories / "tmp"
    temp.mkdir()

    def _detached_helpers():
        return detached_helpers(str(temp))

    sweep = subprocess.Popen([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "single",
                              "--models", "userfactories:detached", "--steps", "100000", "--warmup", "1",
                              "--trials", "1", "--out", str(factories / "r.json")], cwd=REPO,
                             env={**os.environ, "TMPDIR": str(temp)}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        # The worker's helper: one started with the worker's TMPDIR, inside the sweep's folder.
        # A worker's helper, not the probe's (its folder is parabench-sweep-probe-*, the workers' the sweep's).
        while time.monotonic() < deadline and not detached_helpers(str(temp / "parabench-sweep-"), but="probe-"):
            assert sweep.poll() is None, "the sweep ended before its worker started the helper"
            time.sleep(0.2)
        assert _detached_helpers(), "no worker started the helper"
    finally:
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=30)
    deadline = time.monotonic() + 20
    while (_detached_helpers() or list(temp.glob("parabench-sweep-*"))) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = _detached_helpers()
    for p in left:
        p.kill()
    assert not left, [p.pid for p in left]
    assert not list(temp.glob("parabench-sweep-*")), list(temp.iterdir())  # the guard's clean-up goes on


def test_a_folder_given_as_a_results_file_names_a_fix_the_command_takes(tmp_path):
    """`compare` used to suggest `--results-dir`, which it does not take (`answer` and `report` read
    a folder's files themselves)."""
    folder = tmp_path / "runs"
    folder.mkdir()
    proc = run_cli("compare", str(folder), str(folder), timeout=60)
    assert proc.returncode != 0 and f"{folder} is a folder: pass the results files in it ({folder}/*.json)" \
        in proc.stderr, proc.stderr
    assert "--results-dir" not in proc.stderr
