"""The README's first block as a newcomer types it: every command exists as written and names
`answer`; the Makefile passes paths as one word each and echoes whole commands. The block itself
runs in order on a fresh clone in CI (`bash scripts/first_contact.sh`, a step of `.ci/run`)."""
import re
import shlex
import os
import subprocess
import sys

from tests.conftest import REPO


def first_block() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(r"^```sh\n(.*?)^```$", text, re.S | re.M).group(1)
    return [re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines() if line.strip()]


def make_n(*args: str) -> str:
    """What `make ARGS` would run (nothing runs; PY=python3 skips the setup step)."""
    proc = subprocess.run(["make", "-n", "--no-print-directory", "PY=python3", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_first_block_answers_and_every_command_in_it_exists():
    lines = first_block()
    commands = [c.strip() for line in lines for c in line.split("&&")]
    assert any(c.startswith("make answer") or c.startswith("parabench answer") for c in commands), lines
    for command in commands:
        words = shlex.split(command)
        if words[0] == "make":
            runs = {"bench": "-m bench run", "plot": "-m bench report", "answer": "-m bench answer",
                    "test": "-m pytest"}
            assert runs[words[1]] in make_n(words[1]), command
        elif words[0] == "parabench":
            # `parabench` comes from .venv (pyproject's [project.scripts]), after `. .venv/bin/activate`
            assert any(line.startswith(". .venv/bin/activate") for line in lines[:lines.index(command)]), lines
            scripts = (REPO / "pyproject.toml").read_text()
            assert 'parabench = "bench.cli:main"' in scripts
        else:
            assert command == ". .venv/bin/activate", f"a command the test does not know: {command}"


def test_make_says_how_long_the_tests_take_in_the_first_block():
    assert any(line.startswith("make test") for line in first_block())
    block = (REPO / "README.md").read_text().split("```")[1]
    said = re.search(r"make test .*(about \d+ minutes)", block)
    assert said, block
    assert said.group(1) in make_n("test"), "make test says the same duration as the README"
    # The duration is a measurement: the committed timing of a whole `make test` on 2 CPUs.
    timing = (REPO / "tests" / "timings" / "make-test.log").read_text()
    seconds = int(re.search(r"^EXIT 0 after (\d+) s$", timing, re.M).group(1))
    assert " 2 CPUs " in timing and abs(seconds / 60 - int(re.search(r"\d+", said.group(1)).group())) <= 0.5, timing


def test_make_test_on_a_fresh_clone_stays_within_ten_minutes_on_two_cores():
    """The committed timing of `make test` on a fresh clone, setup included, on 2 CPUs: within 10
    minutes, every test passing."""
    timing = (REPO / "tests" / "timings" / "make-test-fresh-clone.log").read_text()
    assert re.search(r"^# make test on a fresh clone of commit [0-9a-f]{7,}", timing, re.M) and " 2 CPUs " in timing
    assert "setting up .venv" in timing and re.search(r"^\d+ passed, \d+ skipped", timing, re.M), timing[-500:]
    seconds = int(re.search(r"^EXIT 0 after (\d+) s$", timing, re.M).group(1))
    assert seconds <= 600, seconds


def test_make_passes_a_folder_with_a_space_as_one_word():
    for target, flag in (("plot", "--results-dir"), ("bench", "--results-dir"), ("answer", "--results-dir")):
        words = shlex.split(make_n(target, "RESULTS=my results", "GPUS="))
        assert words[words.index(flag) + 1] == "my results", (target, words)
    words = shlex.split(make_n("plot", "PLOTS=it's mine"))
    assert words[words.index("--out") + 1] == "it's mine", words


def test_make_bench_echoes_one_whole_command():
    echoed = make_n("bench", "GPUS=", "STRATEGIES=single,ddp", "ARGS=--steps 3")
    assert [line for line in echoed.splitlines() if line.strip()] == [echoed.strip()], echoed
    assert not echoed.rstrip().endswith("\\") and "--strategies 'single,ddp' --steps 3" in echoed


def test_a_make_variable_is_text_never_make_syntax(tmp_path):
    """`make plot RESULTS='$(shell touch X)'` ran the command: make expanded the value. A value given on
    the command line or in the environment now reaches the command as written, one shell word."""
    planted = tmp_path / "ran"
    for given in ([f"RESULTS=$(shell touch {planted})"], [f"GPUS=$(shell touch {planted})"]):
        shown = make_n("plot" if given[0].startswith("RESULTS") else "list", *given)
        assert not planted.exists(), shown
        assert f"'$(shell touch {planted})'" in shown
    env = {**os.environ, "RESULTS": f"$(shell touch {planted})"}
    subprocess.run(["make", "-n", "PY=python3", "answer"], cwd=REPO, env=env, capture_output=True, text=True,
                   timeout=60)
    assert not planted.exists()


def test_a_make_variable_is_never_shell_syntax_either(tmp_path):
    """`make bench STRATEGIES='nonesuch;touch X'` ran `touch X` (so did PRECISION, BATCH_SIZES, and
    MODEL, FIT_STRATEGIES and FIT of fit-check): each value reaches its command as one quoted word."""
    planted = tmp_path / "ran"
    for name in ("STRATEGIES", "PRECISION", "BATCH_SIZES", "MODEL"):
        done = subprocess.run(["make", "bench", f"PY={sys.executable}", "GPUS=", f"{name}=x;touch {planted}"],
                              cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode != 0 and not planted.exists(), (name, done.stdout, done.stderr)
    for given in ("MODEL", "FIT_STRATEGIES", "FIT", "PRECISION"):
        shown = make_n("fit-check", "GPUS=0,1", f"{given}=x;touch {planted}")
        assert f"'x;touch {planted}'" in shown and " x;touch" not in shown, shown


def test_a_budget_on_the_cpu_reaches_the_command_line_that_refuses_it():
    """`make bench BUDGET=-1` on the CPU was dropped without a word (only GPUs search)."""
    assert "--budget '-1'" in make_n("bench", "GPUS=", "BUDGET=-1")
    done = subprocess.run([sys.executable, "-m", "bench", "run", "--gpus", "", "--budget", "-1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 2 and "--budget bounds a --search" in done.stderr


def test_args_are_flags_never_commands(tmp_path):
    """`make answer ARGS='; touch X'` ran `touch X`, and `ARGS='--json $(touch Y)'` ran it too: ARGS and
    PYTEST_ARGS are split into words as a shell splits them (quotes hold a word together), never run."""
    planted = tmp_path / "ran"
    for args in (f"; touch {planted}", f"--json $(touch {planted})", f"--json `touch {planted}`"):
        done = subprocess.run(["make", "answer", f"PY={sys.executable}", f"ARGS={args}",
                               f"RESULTS={tmp_path / 'none'}"], cwd=REPO, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        assert done.returncode != 0 and not planted.exists(), (args, done.stdout, done.stderr)
    assert shlex.split(make_n("bench", "GPUS=", "ARGS=--steps 3 --option 'a=b c'"))[-4:] == \
        ["--steps", "3", "--option", "a=b c"]
    assert "-k 'claims or words'" in make_n("test", "PYTEST_ARGS=-k 'claims or words'")
