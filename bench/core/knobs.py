"""The knobs of a case, each declared once.

A knob is a setting that changes what a case measures without being one of its axes
(strategy, precision, model, devices, batch, execution). Its declaration says everything
the harness needs: the `bench run` flag and the values it takes, the default, what rows
written before the knob existed had measured, how a request resolves for a strategy on a
device, its label in tables, whether it changes the training step itself (then speed-ups
pair only cases that agree on it) and which combinations cannot run.

Everything else reads knobs through this declaration: the CLI builds its flags from `KNOBS`,
`Case` resolves and records them, rows and the worker's spec are read back with `Knob.read`, the
report labels and pairs by them, and every knob is a read-only field of `Settings`, `Case` and the
worker's context made from its entry here (bench/core/step.py's KnobFields). The code that acts on
a knob reads that field (`ctx.sgd_impl` in bench/engine/training.py, the backend switches in
bench/run/worker.py). Adding a knob is one entry here, the code that acts on it, and its test
(docs/extending.md). Torch-free and importing nothing of the suite: the worker's context reads it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")


@dataclass(frozen=True)
class Knob:
    name: str  # the row's column, the attribute of Settings and Case, the key of the worker's spec
    flag: str  # the `bench run` flag
    default: Any  # what is requested when the flag is absent
    help: str
    choices: tuple = ()  # the values the flag takes; none: an on/off switch
    legacy: Any = None  # what a row written before the knob existed had measured
    label: str = ""  # its name in variant labels ("" : not shown in labels)
    same_step: bool = True  # changes the step: speed-ups and amp ratios pair cases that agree on it
    # (requested, strategy, on_gpu, execution) -> what the case runs; None: the request as given.
    resolve: Callable[[Any, Any, bool, str], Any] | None = None
    # (case, precision) -> why this value cannot run the case, or None.
    unavailable: Callable[[Any, Any], str | None] | None = None
    # What a request of `choices` resolves to, where that is not one of them: cudnn_benchmark's
    # auto/on/off becomes a flag (None on the CPU, which has no cuDNN).
    resolves_to: type | None = None

    def read(self, value):
        """The knob's value from a results row or a worker's spec (JSON or CSV text): typed as
        the knob declares it; a row written before the knob existed gives `legacy`."""
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            return self.legacy
        if not self.choices or self.resolves_to is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        return value

    def resolved(self, requested, strategy, on_gpu: bool, execution: str):
        if strategy is not None:
            return strategy.resolve_knob(self, requested, on_gpu, execution)
        return self.resolve(requested, strategy, on_gpu, execution) if self.resolve else requested

    def shown(self, value, strategy, on_gpu: bool, execution: str) -> str | None:
        """The label of `value` where it differs from what the default request gives, else None."""
        if not self.label or value is None:
            return None
        if value == self.resolved(self.default, strategy, on_gpu, execution):
            return None
        if value is True and not self.choices:  # an on/off switch: its name says it is on
            return self.label
        if isinstance(value, bool):  # a request (auto/on/off) resolved to a flag
            return f"{self.label}={'on' if value else 'off'}"
        return f"{self.label}={value}"

    def add_flag(self, parser) -> None:
        if self.choices:
            parser.add_argument(self.flag, choices=self.choices, default=self.default, help=self.help)
        else:
            parser.add_argument(self.flag, action="store_true", help=self.help)


def _compile_mode(requested, strategy, on_gpu, execution):
    return requested if execution == "compile" else "default"


def _cudnn_benchmark(requested, strategy, on_gpu, execution):
    if not on_gpu:
        return None  # no cuDNN on the CPU
    if requested == "auto":
        return strategy.default_cudnn_benchmark() if strategy is not None else True
    return requested == "on"


def _sgd_impl(requested, strategy, on_gpu, execution):
    if requested != "auto":
        return requested
    return "foreach" if on_gpu else "for-loop"  # PyTorch's own choice


def _graph_needs_fused_sgd(case, precision) -> str | None:
    if case.execution == "cuda-graph" and precision.grad_scaler and case.sgd_impl != "fused":
        return ("amp-fp16 in a CUDA graph needs --sgd-impl fused: GradScaler synchronises with the host "
                "(found_inf.item()) unless the optimiser takes the scale itself")
    return None


def _graph_needs_resident_data(case, precision) -> str | None:
    if case.execution == "cuda-graph" and case.data == "host":
        return "a captured step replays on resident memory: use --data device"
    return None


KNOBS: tuple[Knob, ...] = (
    Knob("compile_mode", "--compile-mode", "default", "torch.compile mode for --execution compile: "
         + ", ".join(COMPILE_MODES), choices=COMPILE_MODES, legacy="default", resolve=_compile_mode),
    Knob("data", "--data", "device", "device: batch resident on the GPUs; host: copied from pinned memory every step",
         choices=("device", "host"), legacy="device", label="data", unavailable=_graph_needs_resident_data),
    Knob("channels_last", "--channels-last", False, "channels_last memory format for model and inputs",
         legacy=False, label="channels_last"),
    Knob("cudnn_benchmark", "--cudnn-benchmark", "auto",
         "auto: on, but off for strategies that run replicas in threads "
         "(docs/findings.md: DataParallel and cuDNN autotuning)",
         choices=("auto", "on", "off"), label="cudnn.benchmark", same_step=False, resolve=_cudnn_benchmark,
         resolves_to=bool),
    Knob("tf32", "--tf32", "default", "TF32 for matmuls and convolutions (default: PyTorch's, convolutions only)",
         choices=("default", "on", "off"), legacy="default", label="tf32"),
    Knob("sgd_impl", "--sgd-impl", "auto", "SGD update kernels; auto: PyTorch's choice (foreach on GPUs, "
         "for-loop on the CPU)", choices=("auto", "for-loop", "foreach", "fused"), legacy="for-loop", label="sgd",
         resolve=_sgd_impl, unavailable=_graph_needs_fused_sgd),
    Knob("cpu_bind", "--cpu-bind", "none", "CPUs of each process on a host: none (the kernel places them, as "
         "torchrun does), exclusive (a block of its own within its GPU's NUMA node; bench/run/affinity.py)",
         choices=("none", "exclusive"), legacy="none", label="cpu-bind", same_step=False),
)
BY_NAME = {knob.name: knob for knob in KNOBS}
NAMES = tuple(BY_NAME)
# The knobs that change the training step: a speed-up divides cases that agree on them.
STEP_KNOBS = tuple(k.name for k in KNOBS if k.same_step)
