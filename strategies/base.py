"""The strategy interface: what a strategy is, what it needs, and how it builds one training step.

The harness (bench/) owns seeding, data, warm-up, timing, memory and result rows. A
strategy says what it needs to run, which launcher starts its worker processes (a
`bench.engine.launchers.Launcher`), and how to build a `TrainStep` from a freshly built model.
It also carries its own presentation facts (order, colour, whether it is the baseline),
so that the report and compare ask the registry instead of naming strategies.

This module and every strategy module import no torch at import time (torch is imported
inside the hooks that run in a worker), so reading and reporting results stays light.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.core.placement import Placement
from bench.core.step import EXECUTIONS, CaseSpec, TrainStep, WorkerContext

__all__ = ["COLLECTIVES", "STATE", "CaseSpec", "Collective", "Placement", "Strategy", "TrainStep", "WorkerContext"]

# The training state a strategy may split across its ranks. Parameters and gradients are one fp32
# copy of the parameters' size each (every strategy here keeps fp32 parameters under autocast); the
# optimiser state is one for SGD's momentum, two for AdamW's moments (bench/core/knobs.py OPTIMIZERS).
STATE = ("parameters", "gradients", "optimizer_state")
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce")


@dataclass(frozen=True)
class Collective:
    """One collective a strategy runs in every step: which, over what (one part of STATE: the
    messages of the step add up to that part's whole fp32 size, as NCCL's tests count a
    reduce-scatter or an all-gather by its full buffer), and how many times per step."""

    op: str
    of: str
    times: int = 1
    when: str = ""  # a few words on when or why, for the reader

    def bytes_per_step(self, parameters: int) -> int:
        return self.times * parameters * 4

    def describe(self, parameters: int | None = None) -> str:
        size = f" ({self.bytes_per_step(parameters) / 2**20:,.1f} MiB)" if parameters else ""
        times = f" x{self.times}" if self.times > 1 else ""
        return f"{self.op.replace('_', '-')} of the {self.of.replace('_', ' ')}{times}{size}"


class Strategy:
    name: str = ""
    summary: str = ""
    # Presentation, asked for by the report and compare (never hard-coded there).
    # Position in tables and legends, and the registry's order of simplicity: where measured
    # configurations tie, the answer names the lower (bench/cases/ranking.py).
    order: int = 50
    colour: str = "grey"
    baseline: bool = False  # the one-device reference that speed-ups divide by
    reference: bool = False  # the process-per-device strategy that threaded ones are set against
    # Strategies whose replicas run in fresh Python threads every step: cuDNN's plan
    # cache is thread-local, so cudnn.benchmark re-autotunes every convolution on every
    # step. The harness's `auto` policy turns benchmark off for them.
    replicas_in_threads: bool = False
    # What the strategy splits across its ranks, parts of STATE: each rank holds 1/n of each.
    # `bench fit` measures every strategy that shards; the report bounds its saving by it.
    shards: tuple[str, ...] = ()
    # What it sends between devices in every step (Collective: which, over which state, how
    # often); `bench probe-comm` measures the collectives the strategies declare.
    sends: tuple[Collective, ...] = ()

    min_replicas: int = 1
    max_replicas: int | None = None  # 1 for strategies that use one device
    needs_cuda: bool = False
    # The Apex amp opt levels ("O1", "O2", "O3") the strategy runs, and why it cannot run the others.
    apex_levels: tuple[str, ...] = ()
    apex_unavailable: str = "Apex amp is not wired into this strategy"
    # What `--execution` values it supports. Eager only unless the strategy says more: a step
    # that never calls training.maybe_compile would record execution=compile and run eager.
    executions: tuple[str, ...] = ("eager",)
    options: dict[str, Any] = {}  # strategy knobs and their defaults (--option name=value)
    # Option values a search tries as levers (bench/cases/levers.py), e.g. DDP's bucket view.
    search_options: dict[str, Any] = {}
    option_choices: dict[str, tuple] = {}  # options that take one of a fixed set of values

    # --- what it needs -------------------------------------------------------------
    def unavailable_reason(self, placement: Placement, precision, execution: str = "eager",
                           options: dict | None = None) -> str | None:
        if self.needs_cuda and not placement.gpus:
            return "needs CUDA GPUs (none selected or none on this host)"
        if placement.n_replicas < self.min_replicas:
            return f"needs {self.min_replicas}+ devices, got {placement.n_replicas}"
        if self.max_replicas is not None and placement.n_replicas > self.max_replicas:
            return f"uses at most {self.max_replicas} device(s)"
        if precision.apex_opt_level and precision.apex_opt_level not in self.apex_levels:
            return f"{precision.name}: {self.apex_unavailable}"
        if precision.apex_opt_level and execution == "cuda-graph":
            return ("Apex's loss scaler reads its overflow flag on the host after every backward: "
                    "a step that synchronises cannot be captured")
        if execution not in self.executions:
            return f"{self.name} supports --execution {', '.join(self.executions)}, not {execution}"
        return precision.unavailable_reason(placement.device_type)

    def workload_unavailable_reason(self, model: str) -> str | None:
        """Why this strategy cannot train the model named `model` (bench.workloads), or None:
        every PyTorch strategy trains any workload. Asked in the sweep's parent: no torch."""
        return None

    def declaration_error(self) -> str | None:
        """What is wrong with the strategy's declarations (executions, Apex levels, the baseline's
        one device, shards and sends), or None."""
        unknown = [e for e in self.executions if e not in EXECUTIONS]
        if unknown or "eager" not in self.executions:
            return f"executions {self.executions!r}: eager and any of {', '.join(EXECUTIONS[1:])}"
        if any(level not in ("O1", "O2", "O3") for level in self.apex_levels):
            return f"apex_levels {self.apex_levels!r}: choose from O1, O2, O3"
        if self.baseline and self.max_replicas != 1:
            return "baseline = True: the baseline is the one-device strategy speed-ups divide by; set max_replicas = 1"
        for part in self.shards:
            if part not in STATE:
                return f"shards {part!r}: choose from {', '.join(STATE)}"
        for c in self.sends:
            if not isinstance(c, Collective) or c.op not in COLLECTIVES or c.of not in STATE or c.times < 1:
                return (f"sends {c!r}: each is a strategies.base.Collective(op, of, times >= 1), op one of "
                        f"{', '.join(COLLECTIVES)}, of one of {', '.join(STATE)}")
        return None

    def sharded_bytes(self, parameters: int, optimizer: str | None = "sgd") -> int:
        """Bytes of the training state the strategy splits across its ranks (of which a rank of
        n holds 1/n), for a model of `parameters` elements trained by `optimizer` (whose state
        is one fp32 copy of the parameters for SGD's momentum, two for AdamW's moments)."""
        from bench.core.knobs import state_copies

        copies = {"parameters": 1, "gradients": 1, "optimizer_state": state_copies(optimizer)}
        return sum(copies[part] for part in self.shards) * parameters * 4

    def describe_shards(self) -> str:
        """'the optimiser state', 'the parameters, gradients and optimiser state', or ''."""
        parts = [p.replace("optimizer_state", "optimiser state") for p in self.shards]
        return "the " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]) if parts else ""

    def knobs_unavailable_reason(self, knobs: dict) -> str | None:
        """Why this strategy cannot run with these knobs (name -> value, bench/core/knobs.py),
        or None. Asked before a case is measured, in the parent: no torch."""
        return None

    def notes(self, case) -> str:
        """What the strategy did with the case's knobs that the knobs alone do not say (a layout
        it could not keep, a setting it had to change), for the row's `notes`; "" for none."""
        return ""

    def default_cudnn_benchmark(self) -> bool:
        return not self.replicas_in_threads

    def resolve_knob(self, knob, requested, on_gpu: bool, execution: str, data=None):
        """What this strategy runs for a knob's request (bench/core/knobs.py): the knob's own
        rule, unless the strategy fixes the value itself; `data` is the workload's, where known."""
        return knob.resolve(requested, self, on_gpu, execution, data) if knob.resolve else requested

    def launcher(self, options: dict):
        """The launcher object that starts this strategy's worker (bench.engine.launchers)."""
        from bench.engine.launchers import LOCAL

        return LOCAL

    # --- in the parent, around a worker --------------------------------------------------
    def prepare_launch(self, spec: CaseSpec, workdir: str) -> dict:
        """Before a worker starts: what the worker needs beyond the case `spec` (e.g. exported
        weights for another framework, written under `workdir`), as the spec's `extra`."""
        return {}

    # --- one training step ------------------------------------------------------------
    def build(self, model, ctx: WorkerContext) -> TrainStep:
        raise NotImplementedError
