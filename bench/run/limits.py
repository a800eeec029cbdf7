"""How many CPU replicas this host can hold, decided before anything starts: a count the
host cannot hold is refused with one line, not found by the OOM killer.

Cores: more replicas than the CPU cores this process may use (its affinity) share cores and
measure each other; allowed only on purpose (`--oversubscribe`). Memory: never more replicas
than the available memory (the host's, within its memory cgroup's limit) holds at the
measured size of one rank, whatever the flags.
Threads: a thread-count variable that is no count (OMP_NUM_THREADS=0) is refused, not left
to slow every CPU row down unseen.
"""
from __future__ import annotations

import os
import re

# Peak resident memory of one rank (MiB), per workload, measured: the larger of the two ranks
# of a `ddp` sweep on the CPU (torchrun, gloo, fp32, batch 2 per rank, one warm-up step and 2
# timed steps), sampled every 50 ms with psutil; torch 2.13.0+cpu, Python 3.11, a 2-core AMD
# EPYC: 643 and 593 MiB for resnet18-small, 816 and 716 MiB for resnet18. A rank's resident
# memory counts torch's shared libraries again in every rank, so N times it over-estimates
# what N ranks take: a safe bound. Larger batches need more; each case checks its own batch
# (bench/run/worker.py, Job.data).
RANK_MEMORY_MIB = {"resnet18-small": 650, "resnet18": 820}


class LimitError(ValueError):
    """A replica count this host cannot hold; the message names the fix."""


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_memory() -> int:
    """What a new allocation may take: the host's available memory, within the room left in
    this process's memory cgroup (a container's or a job's limit; bench/run/hostmemory.py)."""
    from bench.run import hostmemory

    return hostmemory.available()


def rank_memory_mib(model: str) -> tuple[int, str]:
    """One rank's memory and the workload it was measured on (the largest measured one for a
    workload without its own figure)."""
    if model in RANK_MEMORY_MIB:
        return RANK_MEMORY_MIB[model], model
    largest = max(RANK_MEMORY_MIB, key=RANK_MEMORY_MIB.get)
    return RANK_MEMORY_MIB[largest], largest


def check_cpu_replicas(replicas: int, models: list[str], oversubscribe: bool, cores: int | None = None,
                       available: int | None = None) -> None:
    """Raise LimitError where `replicas` CPU replicas of `models` do not fit this host."""
    if replicas <= 1:
        return
    per_rank, measured = max(rank_memory_mib(m) for m in models)
    check_ranks("--cpu-replicas", replicas, per_rank, f"one {measured} rank; bench/run/limits.py", oversubscribe,
                cores, available)


def check_ranks(flag: str, count: int, per_rank_mib: float, measured: str, oversubscribe: bool,
                cores: int | None = None, available: int | None = None) -> None:
    """The one guard of every CPU rank count (`bench run --cpu-replicas`, `bench probe-comm
    --devices`): LimitError where `count` ranks of `per_rank_mib` (the measured peak of
    `measured`) outgrow the available memory, always, or the usable cores, unless `oversubscribe`."""
    cores = usable_cores() if cores is None else cores
    available = available_memory() if available is None else available
    fits = int(available // (per_rank_mib * 2**20))
    if count > fits:
        # The count that also passes the check below: a fix that fails next is no fix.
        fix = (f"use at most {fits}" if oversubscribe or fits <= cores else
               f"use at most {cores} (the CPU cores this process may use), or up to {fits} with --oversubscribe")
        raise LimitError(f"{flag} {count} needs about {count * per_rank_mib / 1024:,.1f} GiB of memory "
                         f"({per_rank_mib:,.0f} MiB per rank, the measured peak of {measured}) "
                         f"and {available / 2**30:.1f} GiB is available: {fix}")
    if count > cores and not oversubscribe:
        raise LimitError(f"{flag} {count} is more than the {cores} CPU cores this process may use: the "
                         f"ranks would share cores and slow each other down; use at most {cores}, or pass "
                         "--oversubscribe to measure that on purpose")


# Variables that set the CPU threads of every rank; OpenMP's may list one count per nesting level.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")
_COUNTS = re.compile(r"^[1-9][0-9]*(,[1-9][0-9]*)*$")


def check_thread_variables(environ: dict) -> None:
    """Raise LimitError where a thread-count variable is set to something that is no count:
    the libraries then fall back to a count of their own choosing (MKL_NUM_THREADS=abc: one
    thread), and every CPU row is slower with nothing to say why."""
    for name in THREAD_VARIABLES:
        value = environ.get(name)
        if value is not None and not _COUNTS.match(value):
            raise LimitError(f"{name}={value!r} is not a thread count: unset it, or set a positive whole number "
                             f"(e.g. {name}=1)")
