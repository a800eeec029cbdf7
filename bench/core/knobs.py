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
a knob reads that field (`ctx.optimizer_impl` in bench/engine/training.py, the backend switches in
bench/run/worker.py). Adding a knob is one entry here, the code that acts on it, and its test
(docs/extending.md). Torch-free and importing nothing of the suite: the worker's context reads it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead")

# The optimisers a case trains with: what each is, and how many fp32 copies of the parameters
# its state holds (SGD's momentum; AdamW's first and second moments). The settings are
# bench/engine/training.py's.
OPTIMIZERS = {"sgd": ("SGD with momentum 0.9 and weight decay 1e-4", 1, "SGD momentum"),
              "adamw": ("AdamW, nanoGPT's settings: betas 0.9/0.95, weight decay 0.1 on matrices", 2,
                        "AdamW's two moments")}


def state_copies(optimizer) -> int:
    """fp32 copies of the parameters the optimiser's state holds (rows before the knob: SGD's one)."""
    return OPTIMIZERS.get(str(optimizer or "sgd"), OPTIMIZERS["sgd"])[1]


def optimizer_state_words(optimizer) -> str:
    """What the optimiser's state is, in a sentence: "SGD momentum", "AdamW's two moments"."""
    return OPTIMIZERS.get(str(optimizer or "sgd"), OPTIMIZERS["sgd"])[2]


@dataclass(frozen=True)
class Knob:
    name: str  # the row's column, the attribute of Settings and Case, the key of the worker's spec
    flag: str  # the `bench run` flag
    default: Any  # what is requested when the flag is absent
    help: str
    choices: tuple = ()  # the values the flag takes; none: an on/off switch
    legacy: Any = None  # what a row written before the knob existed had measured
    label: str = ""  # its name in variant labels ("" : not shown in labels); "{knob}" names it by another knob's value
    same_step: bool = True  # changes the step: speed-ups and amp ratios pair cases that agree on it
    # (requested, strategy, on_gpu, execution, data) -> what the case runs; None: the request as given.
    # `data` is the workload's (bench/workloads/data.py), None where it is not known here (images then).
    resolve: Callable[[Any, Any, bool, str, Any], Any] | None = None
    # (case, precision, data) -> why this value cannot run the case, or None; `data` is the workload's
    # (bench/workloads/data.py), None where it is not known (the case's caller looks it up).
    unavailable: Callable[[Any, Any, Any], str | None] | None = None
    # What a request of `choices` resolves to, where that is not one of them: cudnn_benchmark's
    # auto/on/off becomes a flag (None on the CPU, which has no cuDNN).
    resolves_to: type | None = None
    bare: Any = None  # the value of the flag given without one (`--channels-last` alone: on); None: it needs one
    # The value labels are told against, where not what the default request resolves to: a layout is
    # named where it is channels_last, whatever `auto` chose (labels stay as they were before `auto`).
    unlabelled: Any = None
    aliases: tuple[str, ...] = ()  # the knob's earlier flags and row columns (`--sgd-impl`, `sgd_impl`), still read
    # Its token in the report's short labels, "{value}" the value (`CL`, `tf32-{value}`); "": label-value.
    short: str = ""
    in_execution: bool = False  # said as part of the execution (`compile:reduce-overhead`), not on its own
    # (case, data) -> the value a search tries in place of the case's, or None; levers are tried in
    # the order of `lever_rank`, after the execution's and before the strategy's options (bench/cases/levers.py).
    lever: Callable[[Any, Any], Any] | None = None
    lever_rank: int = 100  # a new lever goes after those ranked here unless its entry says otherwise
    fit: bool = True  # `bench fit` takes its flag: it changes what a probe holds (not the CPUs, not compile's mode)

    def read(self, value):
        """The knob's value from a results row or a worker's spec (JSON or CSV text): typed as
        the knob declares it; a row written before the knob existed gives `legacy`."""
        if value is None or value == "" or (isinstance(value, float) and math.isnan(value)):
            return self.legacy
        if not self.choices or self.resolves_to is bool:
            return value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        return value

    def value_in(self, row: dict):
        """The knob's value in a results row, under its name or an earlier one (`aliases`)."""
        for column in (self.name, *(a for a in self.aliases if not a.startswith("-"))):
            value = row.get(column)
            if not (value is None or value == "" or (isinstance(value, float) and math.isnan(value))):
                return self.read(value)
        return self.legacy

    def resolved(self, requested, strategy, on_gpu: bool, execution: str, data=None):
        if strategy is not None:
            return strategy.resolve_knob(self, requested, on_gpu, execution, data)
        return self.resolve(requested, strategy, on_gpu, execution, data) if self.resolve else requested

    def shown(self, value, strategy, on_gpu: bool, execution: str, data=None, knobs: dict | None = None) -> str | None:
        """The label of `value` where it differs from what the default request gives, else None;
        `knobs`, the case's other knobs, name a label written "{knob}"."""
        if not self.label or value is None:
            return None
        plain = self.unlabelled if self.unlabelled is not None else \
            self.resolved(self.default, strategy, on_gpu, execution, data)
        if value == plain:
            return None
        label = self.label
        if label.startswith("{"):
            label = str((knobs or {}).get(label.strip("{}")) or BY_NAME[label.strip("{}")].legacy)
        if value is True and (not self.choices or self.unlabelled is False):  # a switch: its name says it is on
            return label
        if isinstance(value, bool):  # a request (auto/on/off) resolved to a flag
            return f"{label}={'on' if value else 'off'}"
        return f"{label}={value}"

    def named(self, knobs: dict | None = None) -> str:
        """The name a setting of this knob is said by: its label ("{optimizer}": the optimiser the
        case's `knobs` name), else its name."""
        label = self.label or self.name
        if label.startswith("{"):
            label = str((knobs or {}).get(label.strip("{}")) or BY_NAME[label.strip("{}")].legacy)
        return label

    def setting(self, value, knobs: dict | None = None) -> str:
        """The value as levers, differences and the answer say it: `channels_last=on`, `sgd=fused`."""
        return f"{self.named(knobs)}={('on' if value else 'off') if isinstance(value, bool) else value}"

    def token(self, value) -> str:
        """The value's token in a short label: `CL`, `tf32-on`, `fused`."""
        if self.short:
            return self.short.format(value=value)
        return self.named() if value is True else f"{self.named()}-{value}"

    def add_flag(self, parser) -> None:
        """The knob's flag (and its earlier names) on `parser`, its default said in its help."""
        names = (self.flag, *(a for a in self.aliases if a.startswith("-")))
        if self.choices:
            extra = {"nargs": "?", "const": self.bare} if self.bare is not None else {}
            parser.add_argument(*names, dest=self.name, choices=self.choices, default=self.default,
                                help=f"{self.help} (default {self.default})", **extra)
        else:
            parser.add_argument(*names, dest=self.name, action="store_true", help=f"{self.help} (default off)")


def _compile_mode(requested, strategy, on_gpu, execution, data):
    return requested if execution == "compile" else "default"


def _cudnn_benchmark(requested, strategy, on_gpu, execution, data):
    if not on_gpu:
        return None  # no cuDNN on the CPU
    if requested == "auto":
        return strategy.default_cudnn_benchmark() if strategy is not None else True
    return requested == "on"


def _optimizer_impl(requested, strategy, on_gpu, execution, data):
    if requested != "auto":
        return requested
    return "foreach" if on_gpu else "for-loop"  # PyTorch's own choice


def _optimizer(requested, strategy, on_gpu, execution, data):
    if requested != "auto":
        return requested
    return data.optimizer if data is not None else "sgd"  # the workload's: SGD for images, AdamW for language models


def _spatial(data) -> bool:
    return data is None or data.spatial  # a workload not known here: images, as every row before units


def _channels_last(requested, strategy, on_gpu, execution, data):
    if not _spatial(data):
        return False  # no 4-D batch to lay out (a language model's token ids): a request for it is refused
    if requested == "auto":
        return on_gpu  # the fast path of convolutions under autocast on GPUs; the CPU keeps PyTorch's layout
    return requested in ("on", True)


def _graph_needs_fused_kernels(case, precision, data) -> str | None:
    if case.execution == "cuda-graph" and precision.grad_scaler and case.optimizer_impl != "fused":
        return ("amp-fp16 in a CUDA graph needs --optimizer-impl fused: GradScaler synchronises with the host "
                "(found_inf.item()) unless the optimiser takes the scale itself")
    return None


def _layout_needs_images(case, precision, data) -> str | None:
    if case.channels_last and not _spatial(data):
        return (f"channels_last lays out 4-D image batches; {case.model} takes {data.describe()}: "
                "leave --channels-last out")
    return None


def _graph_needs_resident_data(case, precision, data) -> str | None:
    if case.execution == "cuda-graph" and case.data == "host":
        return "a captured step replays on resident memory: use --data device"
    return None


def _fused_kernels(case, data):
    return "fused" if case.optimizer_impl != "fused" else None  # fused SGD or AdamW


def _flip_layout(case, data):
    return (not case.channels_last) if _spatial(data) else None  # token ids: no layout to choose


KNOBS: tuple[Knob, ...] = (
    Knob("compile_mode", "--compile-mode", "default", "torch.compile mode for --execution compile: "
         + ", ".join(COMPILE_MODES), choices=COMPILE_MODES, legacy="default", resolve=_compile_mode,
         in_execution=True, fit=False),
    Knob("data", "--data", "device", "device: the batch stays where the step runs (on each GPU); host: copied "
         "from pinned host memory every step",
         choices=("device", "host"), legacy="device", label="data", unavailable=_graph_needs_resident_data,
         short="{value}-data"),
    Knob("channels_last", "--channels-last", "auto", "channels_last memory format for model and inputs: auto (on "
         "for image workloads on GPUs, off on the CPU), on (the flag alone), off; a model without 4-D image inputs "
         "(a language model) has no layout to choose", choices=("auto", "on", "off"), legacy=False,
         label="channels_last", resolve=_channels_last, resolves_to=bool, bare="on", unavailable=_layout_needs_images,
         unlabelled=False, short="CL", lever=_flip_layout, lever_rank=2),
    Knob("cudnn_benchmark", "--cudnn-benchmark", "auto",
         "auto: on, but off for strategies that run replicas in threads "
         "(docs/findings.md: DataParallel and cuDNN autotuning)",
         choices=("auto", "on", "off"), label="cudnn.benchmark", same_step=False, resolve=_cudnn_benchmark,
         resolves_to=bool, short="cudnn-{value}"),
    Knob("tf32", "--tf32", "default", "TF32 for matmuls and convolutions (default: PyTorch's, convolutions only)",
         choices=("default", "on", "off"), legacy="default", label="tf32", short="tf32-{value}"),
    Knob("optimizer", "--optimizer", "auto", "the optimiser: auto (the workload's: sgd for images, adamw for "
         "language models), " + "; ".join(f"{k}: {v[0]}" for k, v in OPTIMIZERS.items()),
         choices=("auto", *OPTIMIZERS), legacy="sgd", label="optimizer", resolve=_optimizer, short="{value}"),
    Knob("optimizer_impl", "--optimizer-impl", "auto", "the optimiser's update kernels (--sgd-impl before); auto: "
         "PyTorch's choice (foreach on GPUs, for-loop on the CPU)", choices=("auto", "for-loop", "foreach", "fused"),
         legacy="for-loop", label="{optimizer}", resolve=_optimizer_impl, unavailable=_graph_needs_fused_kernels,
         aliases=("--sgd-impl", "sgd_impl"), short="{value}", lever=_fused_kernels, lever_rank=1),
    Knob("cpu_bind", "--cpu-bind", "none", "CPUs of each process on a host: none (the kernel places them, as "
         "torchrun does), exclusive (a block of its own within its GPU's NUMA node; bench/run/affinity.py)",
         choices=("none", "exclusive"), legacy="none", label="cpu-bind", same_step=False, short="cpu-{value}",
         fit=False),
)
BY_NAME = {knob.name: knob for knob in KNOBS}


def by_label(key: str) -> Knob | None:
    """The knob a variant label's key names (`channels_last`, `cudnn.benchmark`, or an optimiser's
    name for its kernels), None for a strategy's option."""
    for knob in KNOBS:
        if knob.label and (knob.label == key or knob.label == "{optimizer}" and key in OPTIMIZERS):
            return knob
    return None


def lever_knobs() -> tuple[Knob, ...]:
    """The knobs a search moves, in the order it tries them."""
    return tuple(sorted((k for k in KNOBS if k.lever), key=lambda k: k.lever_rank))
NAMES = tuple(BY_NAME)
# The knobs that change the training step: a speed-up divides cases that agree on them.
STEP_KNOBS = tuple(k.name for k in KNOBS if k.same_step)
