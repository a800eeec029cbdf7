"""What a strategy's hooks receive and return: the worker's context for one case, and one
training step ready to be timed. No torch at import (the worker brings it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from bench.core.placement import Placement


class KnobFields:
    """Every knob of bench/cases/knobs.py as a read-only field, so that a reader (and an editor)
    sees them: on `Settings` as requested, on `Case` as resolved for its strategy, on
    `WorkerContext` and `CaseSpec` as the worker runs them. Each class says in `_knob(name)`
    where it keeps the values. A knob declared there has its field here (tests/test_cli.py)."""

    def _knob(self, name: str):
        raise NotImplementedError

    @property
    def compile_mode(self) -> str:
        """torch.compile's mode under --execution compile."""
        return self._knob("compile_mode")

    @property
    def data(self) -> str:
        """device (a batch resident on the devices) or host (copied from pinned memory every step)."""
        return self._knob("data")

    @property
    def channels_last(self) -> bool:
        return self._knob("channels_last")

    @property
    def cudnn_benchmark(self):
        """Requested: auto, on or off; resolved: a flag on GPUs, None on the CPU."""
        return self._knob("cudnn_benchmark")

    @property
    def tf32(self) -> str:
        """default (PyTorch's), on or off."""
        return self._knob("tf32")

    @property
    def sgd_impl(self) -> str:
        """auto, for-loop, foreach, fused (gluon-sgd: MXNet's own)."""
        return self._knob("sgd_impl")

    @property
    def cpu_bind(self) -> str:
        """none or exclusive (bench/run/affinity.py)."""
        return self._knob("cpu_bind")


class CaseSpec(KnobFields):
    """A case's spec (bench.cases.case.Case.spec(), the dict a worker gets) with its knobs as fields."""

    def __init__(self, spec: dict):
        self.spec = spec

    def _knob(self, name: str):
        return self.spec.get(name)


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
        return CaseSpec(self.spec)._knob(name)

    @property
    def channels_last(self) -> bool:
        return bool(self.spec.get("channels_last"))

    @property
    def execution(self) -> str:
        return self.spec.get("execution") or "eager"

    @property
    def compile_mode(self) -> str:
        return self.spec.get("compile_mode") or "default"

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
