"""How much every entry point measures where it is not told, in one table: the flags of `bench
run`, `bench fit` and `bench probe-comm` say these defaults, and a `Settings` or `Case` made in
code (the checks, the tests, the instruction counts) starts from the run's CPU column.

Each entry: (on GPUs, on the CPU), the least the flag takes, and what it counts. bench run: 12
timed steps on the CPU are enough for a spread (bench/cases/caveats.py); bench fit: one step after
one warm-up holds a step's peak memory."""
from __future__ import annotations

MEASUREMENT = {
    "run": {"warmup": ((10, 1), 0, "warm-up steps per case"),
            "steps": ((20, 6), 1, "timed steps per trial"),
            "trials": ((3, 2), 1, "trials per case")},
    # At least 1 each: the optimiser's state, part of the peak, exists after the first step.
    "fit": {"warmup": ((1, 1), 1, "steps before the peak is read"),
            "steps": ((1, 1), 1, "steps whose peak is the probe's")},
    "probe-comm": {"warmup": ((5, 1), 0, "untimed calls per size"),
                   "reps": ((20, 5), 1, "timed repetitions per size"),
                   "inner": ((5, 1), 1, "back-to-back calls per repetition")},
}


# The seed of the weights and the synthetic data, and how long a process may take before it is
# killed, seconds: a case in a sweep's worker, a worker's start, one probe of a fit.
SEED = 0
TIMEOUT_S = {"case": 600.0, "startup": 300.0, "probe": 300.0}

# The search's budget, minutes (`bench run --search`, `make bench BUDGET=`): what the whole job takes
# on 2 H200s (docs/search.md): every strategy surveyed at every batch, then each regime's executions
# at every batch of both device counts, with room to measure a two-mode compiled row again. Replayed
# at the seconds each case took there (tests/test_search.py), 7 minutes leave a first-tier execution
# out, as the real run did, and 9 hold it all.
BUDGET_MIN = 9.0


# What a sweep measures where not told, (on GPUs, on the CPU): `bench run` with no flags, `make bench`
# (which passes only what the user set) and `bench fit` read these. On GPUs it asks what the hardware
# can do: bf16 autocast, and the search (bench/run/search.py) within BUDGET_MIN; on the CPU, fp32 and
# the plain sweep. The per-GPU batches are each kind of data's own (bench/workloads/data.py `batches`).
SWEEP = {"precisions": ("amp-bf16", "fp32"),
         "search": (True, False)}


def sweep_default(name: str, on_gpu: bool):
    """The table's SWEEP default for `name` on GPUs or on the CPU."""
    gpu, cpu = SWEEP[name]
    return gpu if on_gpu else cpu


def said(name: str) -> str:
    """A SWEEP default as --help says it."""
    gpu, cpu = ({True: "on", False: "off"}.get(v, v) for v in SWEEP[name])
    return f"{gpu} on GPUs, {cpu} on the CPU"


def default(command: str, name: str, on_gpu: bool) -> int:
    """The table's default for `command`'s `name` on GPUs or on the CPU."""
    (gpu, cpu), _, _ = MEASUREMENT[command][name]
    return gpu if on_gpu else cpu
