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


def default(command: str, name: str, on_gpu: bool) -> int:
    """The table's default for `command`'s `name` on GPUs or on the CPU."""
    (gpu, cpu), _, _ = MEASUREMENT[command][name]
    return gpu if on_gpu else cpu
