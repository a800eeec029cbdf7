"""What a benchmark case is, defined once.

A `Case` is one point of the grid: the axes (strategy, precision, model, devices, per-GPU
batch), the knobs that change what is measured (execution, data mode, memory format,
cuDNN and TF32 settings, the optimiser and its kernels, strategy options, all with their defaults resolved)
and the measurement settings (warm-up, steps, trials, seed). From it come the worker's
spec, the result row's case columns, the key that says "same case" (for resume, report
and compare alike), the non-default knobs that label it, and the global batch.

Rows written before a setting existed load here, with that setting's default, and
nowhere else. No torch: reading results must not need it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import strategies
from bench.cases.defaults import SEED, TIMEOUT_S, default
from bench.core.knobs import BY_NAME as KNOB, COMPILE_MODES, KNOBS as DECLARED, NAMES as KNOB_NAMES  # noqa: F401
from bench.core.placement import Placement
from bench.core.step import CaseSpec, KnobFields


AXES = ("strategy", "precision", "model", "device", "gpus", "n_gpus", "n_replicas", "nnodes", "batch_per_gpu")
KNOBS = ("execution",) + KNOB_NAMES + ("options",)
MEASUREMENT = ("warmup", "steps", "trials", "seed")
COLUMNS = AXES + ("gpus_per_node", "world_size") + KNOBS + MEASUREMENT + ("global_batch",)

# What a row written before a setting existed had measured (the behaviour of that time).
LEGACY = {"execution": "eager", **{k.name: k.legacy for k in DECLARED if k.legacy is not None}}


class _Knobs(KnobFields):
    """A frozen dataclass whose `knobs` pairs are its knob fields: `case.tf32`, `settings.data`."""

    def _knob(self, name: str):
        return dict(self.knobs).get(name, self._missing(name))


@dataclass(frozen=True)
class Settings(_Knobs):
    """The knobs and measurement settings a sweep applies to every case (`bench run` flags)."""

    warmup: int = default("run", "warmup", on_gpu=False)
    steps: int = default("run", "steps", on_gpu=False)
    trials: int = default("run", "trials", on_gpu=False)
    seed: int = SEED
    knobs: tuple = ()  # (name, requested value) pairs of bench/core/knobs.py; absent: the knob's default
    options: tuple = ()  # (name, value) pairs, applied to the strategies that declare them
    case_timeout_s: float = TIMEOUT_S["case"]
    startup_timeout_s: float = TIMEOUT_S["startup"]
    anatomy_steps: int = 0  # > 0: profile that many steps after the timing (bench/measure/anatomy.py)
    worker_scope: str = "group"  # which cases share a worker: group | series | case (WORKER_SCOPES)


# group: every case of a launcher and device set in one long-lived worker (the fastest);
# series: a fresh worker for each series (strategy, precision, model, knobs), its batch
# ladder inside; case: a fresh worker for every case (the strictest isolation, the slowest).
WORKER_SCOPES = ("group", "series", "case")


def settings(**given) -> Settings:
    """Settings from keyword arguments, knobs by name among them: settings(warmup=0, tf32="off")."""
    knobs = tuple((k, given.pop(k)) for k in KNOB_NAMES if k in given)
    return Settings(knobs=knobs, **given)


def _requested(self: Settings, name: str):
    return KNOB[name].default


def _legacy(self: "Case", name: str):
    return KNOB[name].legacy


Settings._missing = _requested


def _bool(value) -> bool:
    return str(value).lower() in ("1", "true", "yes", "on")


def strategy_options(strategy: str, given: dict) -> dict:
    """Every option of the strategy, today's defaults filled in for the ones not given."""
    declared = strategies.info(strategy)
    defaults = dict(declared.options) if declared else {}
    return {**defaults, **{k: v for k, v in given.items() if not declared or k in defaults}}


@dataclass(frozen=True)
class Case(_Knobs):
    strategy: str
    precision: str
    model: str
    gpus: tuple[int, ...]
    n_replicas: int  # in all, every node's
    batch_per_gpu: int
    nnodes: int = 1
    execution: str = "eager"
    knobs: tuple[tuple[str, Any], ...] = ()  # every knob of bench/core/knobs.py, resolved for the strategy
    options: tuple[tuple[str, Any], ...] = ()  # every option of the strategy, sorted
    warmup: int = default("run", "warmup", on_gpu=False)
    steps: int = default("run", "steps", on_gpu=False)
    trials: int = default("run", "trials", on_gpu=False)
    seed: int = SEED

    # --- construction ---------------------------------------------------------------
    @classmethod
    def make(cls, strategy: str, precision: str, model: str, placement: Placement, batch_per_gpu: int,
             execution: str, settings: Settings) -> "Case":
        """A case of a sweep: `auto` settings resolved for this strategy and device."""
        from bench.workloads import data_of

        declared = strategies.get(strategy)
        on_gpu = bool(placement.gpus)
        data = data_of(model)
        return cls(
            strategy=strategy, precision=precision, model=model, gpus=tuple(placement.gpus),
            n_replicas=placement.n_replicas, batch_per_gpu=batch_per_gpu, nnodes=placement.nnodes, execution=execution,
            knobs=tuple((k.name, k.resolved(getattr(settings, k.name), declared, on_gpu, execution, data))
                        for k in DECLARED),
            options=tuple(sorted(strategy_options(strategy, dict(settings.options)).items())),
            warmup=settings.warmup, steps=settings.steps, trials=settings.trials, seed=settings.seed,
        )

    @classmethod
    def from_row(cls, row: dict) -> "Case":
        """The case a result row measured; settings the row predates take their legacy default."""
        def get(name):
            value = row.get(name)
            if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
                return LEGACY.get(name)
            return value

        execution = get("execution")
        if row.get("execution") in (None, "") and _bool(row.get("compile")):
            execution = "compile"  # rows from before the execution axis
        gpus = str(row.get("gpus") or "")
        try:
            recorded = json.loads(row.get("options") or "{}")
        except (TypeError, ValueError):
            recorded = {}
        return cls(
            strategy=str(row["strategy"]), precision=str(row["precision"]), model=str(row["model"]),
            gpus=tuple(int(g) for g in gpus.split(",") if g.strip()),
            n_replicas=int(row.get("n_replicas") or max(1, int(row.get("n_gpus") or 1))),
            batch_per_gpu=int(row["batch_per_gpu"]), nnodes=int(get("nnodes") or 1), execution=execution,
            knobs=tuple((knob.name, knob.value_in(row)) for knob in DECLARED),
            options=tuple(sorted(strategy_options(str(row["strategy"]), recorded).items())),
            **{k: int(row[k]) for k in MEASUREMENT if row.get(k) not in (None, "")},
        )

    # --- derived --------------------------------------------------------------------
    @property
    def device(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def n_gpus(self) -> int:
        """GPUs in all, every node's."""
        return len(self.gpus) * self.nnodes

    @property
    def placement(self) -> Placement:
        return Placement(self.gpus, self.n_replicas, self.nnodes)

    @property
    def global_batch(self) -> int:
        return self.batch_per_gpu * self.n_replicas

    @property
    def options_dict(self) -> dict:
        return dict(self.options)

    def key(self) -> tuple:
        """What makes two rows the same case (measurement settings and GPU ordinals aside)."""
        row = self.row()
        return tuple(row[k] for k in AXES + KNOBS if k != "gpus")

    def series_key(self) -> tuple:
        """The case without its batch size: one line of a figure, one OOM ladder."""
        row = self.row()
        return tuple(row[k] for k in AXES + KNOBS if k not in ("gpus", "batch_per_gpu"))

    def group_key(self) -> tuple:
        """What configurations compete within (a search's group, one cell of the answer):
        model, precision, device count, hosts and per-GPU batch."""
        return (self.model, self.precision, self.n_replicas, self.nnodes, self.batch_per_gpu)

    def baseline_key(self) -> tuple:
        """What a case shares with the baseline run it is divided by (speed-up, efficiency):
        model, precision, per-GPU batch and the knobs that change the step itself."""
        return (self.model, self.precision, self.batch_per_gpu, self.execution,
                *(getattr(self, k.name) for k in DECLARED if k.same_step))

    def measurement(self) -> dict:
        return {k: getattr(self, k) for k in MEASUREMENT}

    # --- outputs --------------------------------------------------------------------
    def row(self) -> dict:
        """The case's columns of a result row."""
        return {
            "strategy": self.strategy, "precision": self.precision, "model": self.model, "device": self.device,
            "gpus": ",".join(map(str, self.gpus)), "n_gpus": self.n_gpus, "n_replicas": self.n_replicas,
            "nnodes": self.nnodes, "gpus_per_node": len(self.gpus), "world_size": self.n_replicas,
            "batch_per_gpu": self.batch_per_gpu, "execution": self.execution,
            **{name: getattr(self, name) for name in KNOB_NAMES},
            "options": json.dumps(self.options_dict, sort_keys=True),
            "warmup": self.warmup, "steps": self.steps, "trials": self.trials, "seed": self.seed,
            "global_batch": self.global_batch,
        }

    def spec(self) -> CaseSpec:
        """What the worker needs to run the case (bench/core/step.py: typed, versioned)."""
        return CaseSpec(strategy=self.strategy, precision=self.precision, model=self.model, gpus=self.gpus,
                        n_replicas=self.n_replicas, nnodes=self.nnodes, batch_per_gpu=self.batch_per_gpu,
                        global_batch=self.global_batch, execution=self.execution, knobs=dict(self.knobs),
                        options=self.options_dict, warmup=self.warmup, steps=self.steps, trials=self.trials,
                        seed=self.seed, key=tuple(map(str, self.key())))

    def changed_knobs(self) -> dict:
        """The knobs set away from the suite's defaults (the label that tells variants apart)."""
        from bench.workloads import data_of

        declared = strategies.info(self.strategy)
        data, knobs = data_of(self.model), dict(self.knobs)
        out = {}
        if self.execution != "eager":
            out["execution"] = (self.execution if self.compile_mode == "default"
                                else f"{self.execution}:{self.compile_mode}")
        for knob in DECLARED:
            shown = knob.shown(getattr(self, knob.name), declared, bool(self.gpus), self.execution, data, knobs)
            if shown:
                key, _, value = shown.partition("=")
                out[key] = value or True
        if declared:
            out.update({k: v for k, v in self.options if k in declared.options and v != declared.options[k]})
        return out

    def variant(self) -> str:
        return ", ".join(k if v is True else f"{k}={v}" for k, v in self.changed_knobs().items())

    def where(self) -> str:
        if self.nnodes > 1:
            return self.placement.label()
        return f"{self.n_gpus} GPU" if self.gpus else f"CPU x{self.n_replicas}"

    def label(self) -> str:
        return f"{self.strategy} {self.precision} {self.model} {self.where()} batch {self.batch_per_gpu}"


Case._missing = _legacy


def execution_unavailable_reason(case: Case) -> str | None:
    """Why an execution cannot run this case, where that is known before starting it (the
    strategy's own list of executions is checked by the strategy)."""
    if case.execution == "cuda-graph" and not case.gpus:
        return "CUDA graphs need a GPU"
    from bench.core.precision import get_precision
    from bench.workloads import data_of

    precision, data = get_precision(case.precision), data_of(case.model)
    for knob in DECLARED:
        reason = knob.unavailable(case, precision, data) if knob.unavailable else None
        if reason:
            return reason
    return None


def hardware(row: dict) -> str:
    """What a comparison may not cross: the GPU model, or the CPU for CPU runs."""
    return str(row.get("gpu_name")) if row.get("device") == "cuda" else f"CPU {row.get('cpu')}"


def identity(row: dict) -> tuple:
    """A row's case key with its hardware: the one notion of "the same measurement"."""
    return (hardware(row),) + Case.from_row(row).key()
