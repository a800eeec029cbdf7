"""Reliability, fast: each fault an adversarial user or a new user found, proved without a
measuring sweep where possible (the sweep-level faults are in test_reliability.py)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cases import results
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
'''


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "userfactories.py").write_text(FACTORIES)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    return tmp_path


def test_a_factory_that_prints_without_a_newline_resolves(factories):
    from bench import workloads

    found = workloads.probe(["userfactories:noisy"])
    assert found["userfactories:noisy"]["num_classes"] == 10 and found["userfactories:noisy"]["input_shape"] == [3, 8, 8]


def test_resolving_a_factory_keeps_to_the_start_up_limit(factories):
    proc = run_cli("run", "--gpus", "", "--strategies", "single", "--models", "userfactories:sleepy", "--startup-timeout",
                   "2", "--out", str(factories / "r.json"), env={"PYTHONPATH": os.environ["PYTHONPATH"]}, timeout=60)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        "parabench: error: resolving userfactories:sleepy took over 2 s: give its factory more time with a larger "
        "--startup-timeout (--models)")
    assert not (factories / "r.json").exists()


@pytest.mark.parametrize("result, said", [(42, "int 42"), (None, "NoneType None"), ("resnet", "str 'resnet'"),
                                          ({"model": "resnet"}, "dict {'model': 'resnet'} whose 'model' is str")])
def test_a_factory_that_returns_no_model_is_named_with_what_it_returned(result, said):
    from bench import workloads

    with pytest.raises(workloads.WorkloadError) as caught:
        workloads.from_factory_result(result, "mine:build")
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
            return [p for p in psutil.Process(sweep.pid).children(recursive=True) if "bench.workloads._probe" in p.cmdline()]
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
