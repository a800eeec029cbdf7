"""What `bench fit` hands its worker (bench/fit/fit.py writes it, bench/fit/worker.py reads it):
the model, the device, the memory it may use and the plan, one item per (precision, strategy).
Typed and versioned as every message that crosses a process (bench/core/message.py)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from bench.core.message import Message
from bench.core.step import CaseSpec


@dataclass(frozen=True)
class FitItem(Message):
    """One (precision, strategy): its case at each device count, searched in increasing order."""

    KIND: ClassVar[str] = "fit plan item"
    VERSION: ClassVar[int] = 2  # 2: `after`
    precision: str
    strategy: str
    devices: tuple[int, ...]
    cases: dict[str, CaseSpec]  # str(n) -> the case at n devices (batch set by each probe)
    search: dict = field(default_factory=dict)  # bench.fit.search.Search's fields other than the limit
    done: dict = field(default_factory=dict)  # str(n) -> the probes already measured there
    # The first strategy of this precision, its probes at the first count, measured by an earlier
    # worker: where this one starts its own search there (bench.fit.search.start_after).
    after: tuple[dict, ...] = ()


@dataclass(frozen=True)
class FitWorkerSpec(Message):
    KIND: ClassVar[str] = "fit worker spec"
    model: str
    gpus: tuple[int, ...]  # the one GPU the worker sees (0), or none: the CPU
    budget_mib: float | None  # the memory a probe may use; None: the device's free memory
    seed: int
    plan: tuple[FitItem, ...]
    reserve_mib: float = 0.0  # held back at n >= 2 for what a real world holds outside the allocator
    headroom: float = 0.0  # the share of the usable memory a probe that fits must leave free
