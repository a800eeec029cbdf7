"""What a strategy's hooks receive and return: the worker's context for one case, and one
training step ready to be timed. No torch at import (the worker brings it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from bench.core.knobs import BY_NAME, KNOBS, Knob
from bench.core.placement import Placement


class KnobFields:
    """Every knob of bench/core/knobs.py as a read-only field, made from its declaration (the
    loop below): on `Settings` as requested, on `Case` as resolved for its strategy, on
    `WorkerContext` and `CaseSpec` as the worker runs them. Each class says in `_knob(name)`
    where it keeps the values."""

    def _knob(self, name: str):
        raise NotImplementedError


def _field(knob: Knob) -> property:
    return property(lambda self: self._knob(knob.name), doc=knob.help)


for _declared in KNOBS:
    setattr(KnobFields, _declared.name, _field(_declared))


class CaseSpec(KnobFields):
    """A case's spec (bench.cases.case.Case.spec(), the dict a worker gets) with its knobs as fields."""

    def __init__(self, spec: dict):
        self.spec = spec

    def _knob(self, name: str):
        return BY_NAME[name].read(self.spec.get(name))


@dataclass
class WorkerContext(KnobFields):
    """What one worker process knows about the case it is running and its place in the job."""

    spec: dict  # the case's spec (bench.cases.case.Case.spec())
    placement: Placement
    precision: Any  # bench.core.precision.Precision
    options: dict
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    state: dict = field(default_factory=dict)  # per-worker state a launcher keeps (process group...)
    criterion: Any = None  # the workload's loss module (Workload.criterion()); every strategy's step takes it

    def _knob(self, name: str):
        return BY_NAME[name].read(self.spec.get(name))

    @property
    def execution(self) -> str:
        return self.spec.get("execution") or "eager"

    def all_devices(self) -> list:
        """One device per replica, in replica order."""
        import torch

        if self.placement.gpus:
            return [torch.device("cuda", g) for g in self.placement.gpus]
        return [torch.device("cpu")] * self.placement.n_replicas

    def device(self):
        """This process's device: its local rank's where there are several processes."""
        devices = self.all_devices()
        return devices[self.local_rank % len(devices)] if self.world_size > 1 else devices[0]


@dataclass
class TrainStep:
    """One training step of a strategy, ready to be timed.

    `place` turns this process's part of the global batch (CPU tensors) into what `run`
    takes (copies to devices, scatter); `run` does forward, backward and the optimiser
    update. `model` is the module whose parameters represent the result (replica 0, or
    this rank's model); `devices` are the devices this process drives, synchronised
    around each step. `optimizer` is exposed for hooks that need it (CUDA-graph capture).
    """

    model: Any
    devices: list
    place: Callable[[Any, Any], Any]
    run: Callable[[Any], None]
    optimizer: Any = None
