"""The message a sweep hands a worker: its launcher, its devices and its cases (bench/run/sweep.py
writes it, bench/run/worker.py, the launchers and the followers of a multi-node sweep read it).
Typed and versioned as every message that crosses a process (bench/core/message.py); no torch at
import."""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar

from bench.core.message import Message
from bench.core.placement import Placement
from bench.core.step import CaseSpec


@dataclass(frozen=True)
class RaceRule(Message):
    """Under a search's survey: a racing case's first trial is `short_steps` long; where its interval
    lies below the interval of its group's leader (`leaders`, by group, this run's rows so far;
    the worker adds its own), it stops there (bench/run/worker.py `race`)."""

    KIND: ClassVar[str] = "race rule"
    short_steps: int
    leaders: dict = field(default_factory=dict)  # group (CaseSpec.group) -> {items_per_s, lo, hi}


@dataclass(frozen=True)
class LaunchSpec(Message):
    """One worker: the launcher that starts its processes, the device set (the first case's), the
    launcher's options and the cases it runs in order."""

    KIND: ClassVar[str] = "launch spec"
    VERSION: ClassVar[int] = 2  # 2: `race` in place of the screen rule
    launcher: str
    gpus: tuple[int, ...]
    n_replicas: int
    nnodes: int
    launcher_options: dict  # the strategy options its launcher declares (Launcher.options)
    cases: tuple[CaseSpec, ...]
    race: RaceRule | None = None

    @classmethod
    def local(cls, launcher: str, gpus=(), n_replicas: int = 1, cases=()) -> "LaunchSpec":
        """A spec made in the process that runs it (a fit's fake world, a check's own step)."""
        return cls(launcher=launcher, gpus=tuple(gpus), n_replicas=n_replicas, nnodes=1, launcher_options={},
                   cases=tuple(cases))

    @property
    def placement(self) -> Placement:
        return Placement(self.gpus, self.n_replicas, self.nnodes)

    def on_gpus(self, gpus: tuple[int, ...]) -> "LaunchSpec":
        """The same worker on other GPU ordinals (a follower node's own)."""
        return replace(self, gpus=tuple(gpus), cases=tuple(replace(c, gpus=tuple(gpus)) for c in self.cases))
