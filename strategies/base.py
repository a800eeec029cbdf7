"""The strategy interface: what a strategy is, what it needs, and how it builds one training step.

The harness (bench/) owns seeding, data, warm-up, timing, memory and result rows. A
strategy says what it needs to run, which launcher starts its worker processes (a
`bench.launchers.Launcher`), and how to build a `TrainStep` from a freshly built model.
It also carries its own presentation facts (order, colour, whether it is the baseline),
so that the report and compare ask the registry instead of naming strategies.

This module and every strategy module import no torch at import time (torch is imported
inside the hooks that run in a worker), so reading and reporting results stays light.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Placement:
    """Where a case runs: CUDA ordinals, or the CPU when `gpus` is empty."""

    gpus: tuple[int, ...]  # on each node
    n_replicas: int  # model replicas in all (devices on GPU, replicas or processes on CPU), every node's
    nnodes: int = 1  # hosts the replicas span (one process group across them)

    @property
    def device_type(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def per_node(self) -> int:
        """Replicas (processes) on each node."""
        return self.n_replicas // self.nnodes

    def label(self) -> str:
        if self.nnodes > 1:
            what = f"{len(self.gpus)} GPU" if self.gpus else f"CPU x{self.per_node}"
            return f"{self.nnodes} nodes x {what}"
        if self.gpus:
            return f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} [{','.join(map(str, self.gpus))}]"
        return f"CPU x{self.n_replicas}"


@dataclass
class WorkerContext:
    """What one worker process knows about the case it is running and its place in the job."""

    spec: dict  # the case's spec (bench.case.Case.spec())
    placement: Placement
    precision: Any  # bench.precision.Precision
    options: dict
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    state: dict = field(default_factory=dict)  # per-worker state a launcher keeps (process group...)

    @property
    def channels_last(self) -> bool:
        return bool(self.spec.get("channels_last"))

    @property
    def execution(self) -> str:
        return self.spec.get("execution") or "eager"

    @property
    def compile_mode(self) -> str:
        return self.spec.get("compile_mode") or "default"

    @property
    def sgd_impl(self) -> str:
        return self.spec.get("sgd_impl") or "for-loop"

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


class Strategy:
    name: str = ""
    summary: str = ""
    # Presentation, asked for by the report and compare (never hard-coded there).
    order: int = 50  # position in tables and legends
    colour: str = "grey"
    baseline: bool = False  # the one-device reference that speed-ups divide by
    reference: bool = False  # the process-per-device strategy that threaded ones are set against
    # Strategies whose replicas run in fresh Python threads every step: cuDNN's plan
    # cache is thread-local, so cudnn.benchmark re-autotunes every convolution on every
    # step. The harness's `auto` policy turns benchmark off for them.
    replicas_in_threads: bool = False
    # What a sharded strategy splits across its ranks (the report's memory section bounds
    # its saving by it): "" (nothing), "optimizer" (optimiser state) or "all" (parameters,
    # gradients and optimiser state).
    shards: str = ""

    min_replicas: int = 1
    max_replicas: int | None = None  # 1 for strategies that use one device
    needs_cuda: bool = False
    supports_apex: bool = False
    executions: tuple[str, ...] = ("eager", "compile")  # what `--execution` values it supports
    options: dict[str, Any] = {}  # strategy knobs and their defaults (--option name=value)
    option_choices: dict[str, tuple] = {}  # options that take one of a fixed set of values
    # Options that belong to the launcher (process group, torchrun arguments): cases that
    # differ in them cannot share a worker.
    launcher_options: tuple[str, ...] = ()

    # --- what it needs -------------------------------------------------------------
    def unavailable_reason(self, placement: Placement, precision, execution: str = "eager",
                           options: dict | None = None) -> str | None:
        if self.needs_cuda and not placement.gpus:
            return "needs CUDA GPUs (none selected or none on this host)"
        if placement.n_replicas < self.min_replicas:
            return f"needs {self.min_replicas}+ devices, got {placement.n_replicas}"
        if self.max_replicas is not None and placement.n_replicas > self.max_replicas:
            return f"uses at most {self.max_replicas} device(s)"
        if precision.apex_opt_level and not self.supports_apex:
            return "Apex amp is wired only into single-model strategies (single, ddp)"
        if execution not in self.executions:
            return f"{self.name} supports --execution {', '.join(self.executions)}, not {execution}"
        return precision.unavailable_reason(placement.device_type)

    def default_cudnn_benchmark(self) -> bool:
        return not self.replicas_in_threads

    def sgd_impl(self, requested: str, on_gpu: bool) -> str:
        """The SGD implementation this strategy's rows record for `--sgd-impl requested`."""
        if requested != "auto":
            return requested
        return "foreach" if on_gpu else "for-loop"  # PyTorch's own choice

    def launcher(self, options: dict):
        """The launcher object that starts this strategy's worker (bench.launchers)."""
        from bench.launchers import LOCAL

        return LOCAL

    # --- in the parent, around a worker --------------------------------------------------
    def prepare_launch(self, spec: dict, workdir: str) -> None:
        """Before a worker starts: add to the case `spec` what the worker needs (e.g.
        exported weights for another framework), writing files under `workdir`."""

    # --- one training step ------------------------------------------------------------
    def build(self, model, ctx: WorkerContext) -> TrainStep:
        raise NotImplementedError
