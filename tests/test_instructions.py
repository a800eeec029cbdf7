"""Instruction counts under Callgrind (bench/checks/instructions.py): exact on any load, so a small
piece of extra work per step is caught where wall time on a shared CPU sees nothing. Each
count runs torch under valgrind (about a minute), so the counts this module needs are taken
once, side by side, by the `counted` fixture."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from bench.checks import instructions
from tests.conftest import REPO, TEST_STRATEGIES

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    shutil.which("valgrind") is None and not os.environ.get("PARABENCH_REQUIRE_VALGRIND"),
    reason="valgrind is not installed (apt-get install valgrind)")]

# Work injected into every step by the test-only `faulty` strategy, with no change of settings.
# Measured on the tiny step (38.3 M instructions): every parameter copied once more +4.8%;
# the last layer's forward once more +0.30% and one host read of a value +0.17%, which are
# within the counts' spread across runs (0.29%) and left to the exact operator and sync
# counters (tests/test_counters.py).
INJECTED = {"copy": "every parameter copied once more"}


def cli(*args, extra=None, env=None):
    return subprocess.Popen([sys.executable, "-m", "bench", *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, **TEST_STRATEGIES, "PARABENCH_FAULTY_EXTRA": extra or "", **(env or {})})


@pytest.fixture(scope="module")
def counted(tmp_path_factory):
    folder = tmp_path_factory.mktemp("instructions")
    runs = {name: folder / f"{name}.json" for name in ("base", "again", *INJECTED)}
    procs = {name: cli("instructions", "--strategies", "faulty", "--out", str(path),
                       extra=name if name in INJECTED else "") for name, path in runs.items()}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=1500)
        assert proc.returncode == 0, f"{name}: {out}{err}"
    return runs


def judge(baseline, current):
    passed, lines = instructions.compare(instructions.load(str(baseline)), instructions.load(str(current)))
    return passed, "\n".join(lines)


def test_unchanged_code_passes(counted):
    base, again = (instructions.load(str(counted[n])) for n in ("base", "again"))
    assert base["counts"]["faulty"] > 1_000_000
    passed, text = judge(counted["base"], counted["again"])
    assert passed, text


@pytest.mark.parametrize("extra", list(INJECTED))
def test_injected_work_is_flagged(counted, extra):
    passed, text = judge(counted["base"], counted[extra])
    assert not passed and "REGRESSION" in text, f"{INJECTED[extra]} not caught:\n{text}"


def test_counts_from_another_environment_are_refused(counted, tmp_path):
    record = json.loads(counted["base"].read_text())
    record["environment"]["torch"] = "0.0.0"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(record))
    with pytest.raises(instructions.InstructionsError, match="another environment.*torch 0.0.0"):
        judge(other, counted["base"])


def test_another_environment_is_refused_or_skipped_before_counting(counted, tmp_path):
    record = json.loads(counted["base"].read_text())
    record["environment"]["python"] = "2.7.0"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(record))
    proc = cli("instructions", "--strategies", "faulty", "--compare", str(other))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "another environment" in err and "python 2.7.0" in err and err.count("\n") == 1, err
    proc = cli("instructions", "--strategies", "faulty", "--compare", str(other), "--other-environment", "skip")
    out, err = proc.communicate(timeout=120)  # no valgrind run: seconds, not minutes
    assert proc.returncode == 0 and "NOT JUDGED" in out, out + err


def test_the_command_says_what_is_missing(tmp_path):
    # No valgrind on PATH: one line naming the fix, exit 2 (no count is attempted).
    proc = cli("instructions", "--strategies", "single", env={"PATH": str(tmp_path)})
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.count("\n") == 1 and "apt-get install valgrind" in err, err
    proc = cli("instructions", "--strategies", "ddp")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and "cannot count ddp" in err, err
    # Bad input is refused before minutes of counting.
    for args, message in ((["--tolerance", "-0.1"], "--tolerance is a fraction"),
                          (["--out", str(tmp_path / "no" / "such" / "c.json")], "its folder is missing")):
        proc = cli("instructions", "--strategies", "single", *args)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and message in err and err.count("\n") == 1, err
