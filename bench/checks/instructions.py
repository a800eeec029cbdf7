"""Instructions per training step, counted by Callgrind: the one regression signal that is
exact on any machine (PyTorch's own CI tracks its operators this way, benchmarks/instruction_counts).

`torch.utils.benchmark.Timer.collect_callgrind` runs the step under valgrind in a fresh
interpreter and counts the instructions of the timed statement only. Valgrind runs code
about 50x slower, so the step is the ResNet-18 of the suite at 1/8 width on 8x8 inputs,
batch 2: every layer, operator and optimiser call of the real step, with little
arithmetic, so that a count takes seconds after torch's import (~50 s under valgrind).
Only strategies that run in one process on the CPU can be counted this way.

Counts depend on the exact Python, torch and compiler builds: a baseline holds only for
the environment that recorded it, and `compare` refuses any other with one line.
"""
from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import sys
from pathlib import Path

from bench.workloads import Workload
from bench.workloads.data import Images
from bench.workloads.resnet18 import resnet18

SCHEMA = "parabench-instructions/1"
TINY = Workload("resnet18-tiny", Images((1, 8, 8), 10), resnet18(1, 10, True, width=8))
BATCH, REPLICAS, WARMUP, NUMBER = 2, 2, 3, 3
# Runs started together agree to within tens of instructions; runs at other times moved by
# up to 0.29% with unchanged code (cause not found), hence 1%.
TOLERANCE = 0.01


class InstructionsError(Exception):
    """Counting or comparing cannot be done; the message says why and what to do."""


class OtherEnvironment(InstructionsError):
    """The baseline was counted with another Python or torch build: not comparable."""


def countable() -> list[str]:
    """The strategies that run in one process on the CPU (asked of the registry)."""
    import strategies
    from bench.core.precision import get_precision
    from bench.core.placement import Placement

    found = []
    for name in strategies.names():
        strategy = strategies.get(name)
        launcher = strategy.launcher(dict(strategy.options))
        if launcher.multi_process or launcher.name != "local":  # torchrun, spawn, another interpreter
            continue
        if strategy.unavailable_reason(Placement((), _replicas(strategy)), get_precision("fp32")) is None:
            found.append(name)
    return found


def _replicas(strategy) -> int:
    return 1 if strategy.max_replicas == 1 else REPLICAS


def tiny_step(strategy: str):
    """One training step of `strategy` on the tiny network, warmed up; runs inside valgrind."""
    import torch

    import strategies
    from bench.cases.case import Case, Settings
    from bench.run.worker import configure_backends, make_context
    from bench.core.placement import Placement

    torch.set_num_threads(1)  # one thread: the count is the step's, not a thread pool's
    declared = strategies.get(strategy)
    replicas = _replicas(declared)
    # The case's settings as a sweep gives them (its model name only names a registered
    # workload; the network built below is the tiny one).
    spec = Case.make(strategy, "fp32", "resnet18-small", Placement((), replicas), BATCH, "eager", Settings()).spec()
    configure_backends(spec)
    step = declared.build(TINY.build(seed=0), make_context(spec))
    placed = step.place(*TINY.synthetic_batch(BATCH * replicas))
    for _ in range(WARMUP):  # allocator and lazy initialisation out of the count
        step.run(placed)
    return lambda: step.run(placed)


def environment() -> dict:
    import torch

    return {"python": platform.python_version(), "torch": torch.__version__,
            "torch_git": getattr(torch.version, "git_version", None), "machine": platform.machine()}


def count(strategy: str) -> int:
    """Instructions of one step of `strategy` (mean of NUMBER steps)."""
    from torch.utils.benchmark import Timer

    from bench.core import imports

    if shutil.which("valgrind") is None:
        raise InstructionsError("valgrind is not installed: apt-get install valgrind")
    setup = (f"import sys; sys.path.insert(0, {str(imports.ROOT)!r})\n"
             f"from bench.checks.instructions import tiny_step\nrun = tiny_step({strategy!r})")
    try:
        with clean_environment():
            stats = Timer("run()", setup=setup).collect_callgrind(number=NUMBER, collect_baseline=False)
    except Exception as exc:  # noqa: BLE001 - valgrind or the step under it failed: say which, in one line
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise InstructionsError(f"counting {strategy} under valgrind failed: {type(exc).__name__}: {first}") from None
    return int(stats.counts(denoise=True) // NUMBER)


@contextlib.contextmanager
def clean_environment():
    """The interpreter under valgrind inherits this process's environment; it gets a fixed,
    small one instead, so that the machine's variables are not a cause of difference: this
    Python first on PATH (Timer runs `python`), a fixed hash seed, one thread, and
    parabench's own variables."""
    saved = dict(os.environ)
    keep = {k: v for k, v in saved.items() if k.startswith("PARABENCH_")}
    os.environ.clear()
    os.environ.update(PATH=os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"]),
                      PYTHONHASHSEED="0", OMP_NUM_THREADS="1", LC_ALL="C.UTF-8", **keep)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def measure(names: list[str]) -> dict:
    counts = {}
    for name in names:
        try:
            counts[name] = count(name)
        except InstructionsError as exc:
            done = ", ".join(f"{k} {v:,}" for k, v in counts.items())
            raise InstructionsError(f"{exc}{'; counted before it: ' + done if done else ''}") from None
    return {"schema": SCHEMA, "environment": environment(), "model": TINY.name, "batch_per_replica": BATCH,
            "counts": counts}


def write(path: str, record: dict) -> None:
    from bench.cases.fileio import atomic_write_bytes

    atomic_write_bytes(Path(path), (json.dumps(record, indent=1, sort_keys=True) + "\n").encode())


def load(path: str) -> dict:
    from bench.cases.fileio import ResultsError, load_document

    try:
        return load_document(path, SCHEMA, "instruction-count file",
                             f"record it with `python -m bench instructions --out {path}`", lists=())
    except ResultsError as exc:
        raise InstructionsError(str(exc)) from None


def check_environment(baseline: dict, here: dict) -> None:
    """Raise OtherEnvironment where the baseline's Python or torch build is not `here`'s."""
    differs = {k: (baseline["environment"].get(k), v) for k, v in here.items() if baseline["environment"].get(k) != v}
    if differs:
        what = ", ".join(f"{k} {a} vs {b}" for k, (a, b) in differs.items())
        raise OtherEnvironment(f"the baseline was counted in another environment ({what}): counts are comparable "
                               f"only within one build; refresh it there with `make baseline-ci`")


def compare(baseline: dict, current: dict, tolerance: float = TOLERANCE) -> tuple[bool, list[str]]:
    """(passed, one line per strategy). Counts from another environment are not compared."""
    check_environment(baseline, current["environment"])
    lines, passed = [], True
    for name, now in current["counts"].items():
        before = baseline["counts"].get(name)
        if before is None:
            lines.append(f"{name:<20} {now:>14,} instructions/step  NEW: not in the baseline")
            continue
        change = now / before - 1
        bad = change > tolerance
        passed &= not bad
        verdict = f"REGRESSION: rose {change:+.2%} (allowed {tolerance:.0%})" if bad else f"pass ({change:+.3%})"
        lines.append(f"{name:<20} {before:>14,} -> {now:>14,} instructions/step  {verdict}")
    return passed, lines
