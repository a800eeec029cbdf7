"""What a strategy's hooks receive and return: the worker's context for one case, and one
training step ready to be timed. No torch at import (the worker brings it)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from bench.core.knobs import BY_NAME, KNOBS, Knob
from bench.core.message import Message, SpecError  # noqa: F401 - SpecError: the error a reader raises
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


# How a step runs: as written, under torch.compile, or captured whole in a CUDA graph (an axis of
# every case; a strategy declares which it supports).
EXECUTIONS = ("eager", "compile", "cuda-graph")

# The layout of a CaseSpec across the process boundary. A worker refuses another version: the
# parent and the worker would then be running different code.
SPEC_VERSION = 4  # 2: the parity check's fields left the case; 3: the anatomy request typed; 4: `race`


# How a case's trials run under a search's survey (bench/run/worker.py `race`): every trial; a
# short first trial and the rest only where it may lead its group; the short trial alone (the
# survey's share of the budget was spent: a first look rather than no row).
RACES = ("full", "race", "short")
# How a row's `screened` begins where the survey stopped the case after its short first trial
# (bench/run/worker.py `race`): far behind its group's leader, or a tie at best.
RACED_OUT, SETTLED = "raced out", "settled"
FIRST_LOOK = "a first look"  # in the `screened` of a row that ran its short trial alone


@dataclass(frozen=True)
class AnatomyRequest(Message):
    """Where a case's step anatomy goes (bench/measure/anatomy.py): `steps` profiled steps,
    traces under `folder`, recorded in the row as `record` (relative to the results folder)."""

    KIND: ClassVar[str] = "anatomy request"
    steps: int
    folder: str
    record: str


@dataclass(frozen=True)
class CaseSpec(KnobFields, Message):
    """One case as a worker runs it: made by bench.cases.case.Case.spec() in the parent, written
    as JSON (`to_json`) and read back as this object in the worker (`from_json`), which reads its
    fields, never string keys. The knobs are fields too (KnobFields), typed by their declaration;
    `options` are the strategy's own (declared by it), `extra` what its prepare_launch adds."""

    KIND: ClassVar[str] = "case spec"
    VERSION: ClassVar[int] = SPEC_VERSION
    strategy: str
    precision: str
    model: str
    gpus: tuple[int, ...]
    n_replicas: int
    nnodes: int
    batch_per_gpu: int
    global_batch: int
    execution: str
    knobs: dict  # every knob, resolved for the strategy (bench/core/knobs.py)
    options: dict  # every option of the strategy
    warmup: int
    steps: int
    trials: int
    seed: int
    key: tuple[str, ...]  # the case's identity, as the parent matches results to cases
    # Set by the sweep for one worker: the case's group (what it races against), how its trials
    # run (RACES), and the step-anatomy request.
    group: str | None = None
    race: str = "full"
    anatomy: AnatomyRequest | None = None
    # What the strategy's prepare_launch adds for its worker (MXNet: the exported weights' files).
    extra: dict = field(default_factory=dict)

    def _knob(self, name: str):
        return BY_NAME[name].read(self.knobs.get(name))

    @property
    def placement(self) -> Placement:
        return Placement(self.gpus, self.n_replicas, self.nnodes)


@dataclass
class WorkerContext(KnobFields):
    """What one worker process knows about the case it is running and its place in the job."""

    spec: CaseSpec  # the case
    placement: Placement
    precision: Any  # bench.core.precision.Precision
    options: dict
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    state: dict = field(default_factory=dict)  # per-worker state a launcher keeps (process group...)
    criterion: Any = None  # the workload's loss module (Workload.criterion()); every strategy's step takes it

    def _knob(self, name: str):
        return self.spec._knob(name)

    @property
    def execution(self) -> str:
        return self.spec.execution

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
