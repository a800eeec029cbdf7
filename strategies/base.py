"""The strategy interface: what a strategy needs, and the hooks that make one training step.

The harness (bench/) owns seeding, data, warm-up, timing, memory and result rows.
A strategy only says how to launch its worker, what it needs to run, and how to
build a `TrainStep` from a freshly built model. Anything special a strategy needs
(a launcher, a process group, a cuDNN policy) is one of the hooks below, never a
branch in the harness.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass(frozen=True)
class Placement:
    """Where a group of cases runs: CUDA ordinals, or the CPU when `gpus` is empty."""

    gpus: tuple[int, ...]
    n_replicas: int  # model replicas (devices on GPU, replicas or processes on CPU)

    @property
    def device_type(self) -> str:
        return "cuda" if self.gpus else "cpu"

    def label(self) -> str:
        if self.gpus:
            return f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} [{','.join(map(str, self.gpus))}]"
        return f"CPU x{self.n_replicas}"


@dataclass
class WorkerContext:
    """What one worker process knows while it sweeps the batch sizes of a group."""

    spec: dict
    placement: Placement
    precision: Any  # bench.precision.Precision
    options: dict
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    # Replicas in the global batch: processes of a multi-process strategy (across hosts
    # too), devices of a single-process one.
    world_size_replicas: int = 1
    state: dict = field(default_factory=dict)  # per-worker state a strategy keeps (process group...)

    @property
    def channels_last(self) -> bool:
        return bool(self.spec.get("channels_last"))

    @property
    def compile(self) -> bool:
        return bool(self.spec.get("compile"))

    @property
    def sgd_impl(self) -> str:
        return self.spec.get("sgd_impl") or "for-loop"

    def all_devices(self) -> list[torch.device]:
        """One device per replica, in replica order."""
        if self.placement.gpus:
            return [torch.device("cuda", g) for g in self.placement.gpus]
        return [torch.device("cpu")] * self.placement.n_replicas


@dataclass
class TrainStep:
    """One training step of a strategy, ready to be timed.

    `place` turns the global CPU batch into what `run` takes (copies to devices,
    sharding); `run` does forward, backward and the optimiser update. `model` is the
    module whose parameters represent the result (replica 0, or this rank's model);
    `devices` are the devices this process drives, synchronised around each step.
    """

    model: torch.nn.Module
    devices: list[torch.device]
    place: Callable[[torch.Tensor, torch.Tensor], Any]
    run: Callable[[Any], None]


class Strategy:
    name: str = ""
    summary: str = ""
    min_replicas: int = 1
    max_replicas: int | None = None  # 1 for strategies that use one device
    needs_cuda: bool = False
    # Strategies whose replicas run in fresh Python threads every step: cuDNN's plan
    # cache is thread-local, so cudnn.benchmark re-autotunes every convolution on every
    # step. The harness's `auto` policy turns benchmark off for them.
    replicas_in_threads: bool = False
    supports_apex: bool = False
    supports_compile: bool = True
    hidden: bool = False  # test-only strategies: usable, never listed
    options: dict[str, Any] = {}  # strategy knobs and their defaults (--option name=value)

    # --- what it needs -------------------------------------------------------------
    def unavailable_reason(self, placement: Placement, precision, cuda_available: bool) -> str | None:
        if self.needs_cuda and not placement.gpus:
            return "needs CUDA GPUs (none selected or none on this host)"
        if placement.n_replicas < self.min_replicas:
            return f"needs {self.min_replicas}+ devices, got {placement.n_replicas}"
        if self.max_replicas is not None and placement.n_replicas > self.max_replicas:
            return f"uses at most {self.max_replicas} device(s)"
        if precision.apex_opt_level and not self.supports_apex:
            return "Apex amp is wired only into single-model strategies (single, ddp)"
        return precision.unavailable_reason(placement.device_type)

    def default_cudnn_benchmark(self) -> bool:
        return not self.replicas_in_threads

    def sgd_impl(self, requested: str, on_gpu: bool) -> str:
        """The SGD implementation this strategy's rows record for `--sgd-impl requested`."""
        from strategies.common import default_sgd_impl

        return default_sgd_impl(on_gpu) if requested == "auto" else requested

    # --- how its worker starts ------------------------------------------------------
    def prepare_launch(self, spec: dict, spec_path: str) -> None:
        """In the parent, before a worker starts: add to `spec` what the worker needs
        (e.g. exported weights for another framework)."""

    def cleanup_launch(self, spec: dict, spec_path: str) -> None:
        """In the parent, after the worker is gone: remove what prepare_launch wrote."""

    def launch_command(self, spec_path: str, placement: Placement, options: dict) -> list[str]:
        return [sys.executable, "-m", "bench.worker", spec_path]

    def run_worker(self, spec: dict, options: dict, body: Callable[[int, int, int], None]) -> None:
        """Run `body(rank, world_size, local_rank)` in this process (or processes)."""
        body(0, 1, 0)

    def init_worker(self, ctx: WorkerContext) -> None:
        """Once per worker process, before the first case (e.g. a process group)."""

    def close_worker(self, ctx: WorkerContext) -> None:
        """Once per worker process, after the last case."""

    def reports(self, ctx: WorkerContext) -> bool:
        """Whether this process emits the case's result row (rank 0 of a group)."""
        return ctx.rank == 0

    def gather(self, ctx: WorkerContext, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order (only needed where there are several)."""
        return [obj]

    def barrier(self, ctx: WorkerContext) -> None:
        """Line the processes up before timing starts."""

    # --- one training step ------------------------------------------------------------
    def build(self, model: torch.nn.Module, ctx: WorkerContext) -> TrainStep:
        raise NotImplementedError
