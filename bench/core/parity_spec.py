"""The parity check's launch spec: the sweep's (bench/core/launch_spec.py) with the section only
the parity entries read (bench/checks/parity_worker.py, strategies/gluon/parity.py): the dtype a
case is held in and the file each case's parameters go to. The production worker reads the plain
LaunchSpec, which refuses this section. No torch at import (MXNet's interpreter reads it)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from bench.core.launch_spec import LaunchSpec
from bench.core.message import Message


@dataclass(frozen=True)
class ParityRequest(Message):
    KIND: ClassVar[str] = "parity request"
    dtype: str  # float32, or float64: the same weights and data free of fp32's rounding
    outs: dict  # "|".join(case key) -> the file its parameters are saved to


@dataclass(frozen=True)
class ParityLaunchSpec(LaunchSpec):
    KIND: ClassVar[str] = "parity launch spec"
    parity: ParityRequest | None = None

    def out(self, key) -> str:
        return self.parity.outs["|".join(key)]
