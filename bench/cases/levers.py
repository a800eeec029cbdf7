"""Levers: the single-setting changes a search tries on a configuration.

A lever moves one setting of a case to another value: the execution (torch.compile, compile
with reduce-overhead, the whole step captured in a CUDA graph), the optimiser's kernels (fused
SGD or AdamW), the memory format (channels_last on or off, for image batches), or one of the
options a strategy offers to a search
(`Strategy.search_options`: DDP's bucket view, static graph and bucket size; FSDP2's
resharding). A lever's gain is the ratio of two measured rows of one run that differ in that
setting alone, so every gain the answer states is a measurement, not a guess.

The dimensions are tried in the order of `DIMENSIONS`, largest expected gain first (on one
H100, compile reduce-overhead ran 1.4-3x the eager step, fused SGD about 1.0x), so that a
search that runs out of budget has tried what matters most. No torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import strategies
from bench.cases.case import Case

# (execution, compile mode) pairs a search tries, in order of priority.
EXECUTION_LEVERS = (("compile", "reduce-overhead"), ("cuda-graph", "default"), ("compile", "default"))
DIMENSIONS = ("execution", "optimizer_impl", "channels_last", "options")


@dataclass(frozen=True)
class Lever:
    dimension: str  # one of DIMENSIONS
    setting: str  # what it sets, as the answer names it: "execution=compile:reduce-overhead", "adamw=fused"
    case: Case  # the configuration with the lever applied
    note: str = ""  # what else the lever had to set, and why

    def label(self) -> str:
        return self.setting + (f" ({self.note})" if self.note else "")


def execution_of(case: Case) -> str:
    """The execution with its compile mode: "eager", "compile", "compile:reduce-overhead", "cuda-graph"."""
    return case.execution if case.compile_mode == "default" else f"{case.execution}:{case.compile_mode}"


def _with_knobs(case: Case, **values) -> Case:
    return dataclasses.replace(case, knobs=tuple((k, values.get(k, v)) for k, v in case.knobs))


def fused_label(case: Case) -> str:
    """The fused-kernel lever as the answer names it: "sgd=fused", "adamw=fused"."""
    return f"{case.optimizer}=fused"


# Executions that replay the step: their optimiser update runs fused where the strategy can. Under
# compile reduce-overhead the update runs eagerly after the replayed forward and backward: a
# multi-tensor update's launches make a 256/GPU step host-bound again (`single` on one H200: 67.8k
# img/s in two modes with foreach SGD, 79.2k fused; docs/search.md), and a captured GradScaler step
# needs it.
REPLAYED = (("compile", "reduce-overhead"), ("cuda-graph", "default"))


def _fused_if_possible(case: Case) -> Case:
    fused = _with_knobs(case, optimizer_impl="fused")
    return fused if strategies.get(case.strategy).knobs_unavailable_reason(dict(fused.knobs)) is None else case


def _execution_levers(case: Case) -> list[Lever]:
    out = []
    for execution, mode in EXECUTION_LEVERS:
        if (execution, mode) == (case.execution, case.compile_mode):
            continue
        moved = _with_knobs(dataclasses.replace(case, execution=execution), compile_mode=mode)
        note = ""
        if (execution, mode) in REPLAYED and case.optimizer_impl != "fused":
            moved = _fused_if_possible(moved)
            if moved.optimizer_impl == "fused":
                note = f"with {fused_label(moved)}"
        setting = "execution=" + execution_of(moved)
        out.append(Lever("execution", setting, moved, note))
    return out


def _kernel_levers(case: Case) -> list[Lever]:
    if case.optimizer_impl == "fused":
        return []
    return [Lever("optimizer_impl", fused_label(case), _with_knobs(case, optimizer_impl="fused"))]


def _layout_levers(case: Case) -> list[Lever]:
    from bench.workloads import data_of

    data = data_of(case.model)
    if data is not None and not data.spatial:
        return []  # token ids: no layout to choose
    flipped = not case.channels_last
    return [Lever("channels_last", f"channels_last={'on' if flipped else 'off'}",
                  _with_knobs(case, channels_last=flipped))]


def _option_levers(case: Case) -> list[Lever]:
    declared = strategies.info(case.strategy)
    offered = getattr(declared, "search_options", {}) if declared else {}
    out = []
    for name, value in offered.items():
        if case.options_dict.get(name) == value:
            continue
        moved = dataclasses.replace(case, options=tuple(sorted({**case.options_dict, name: value}.items())))
        out.append(Lever("options", f"{name}={value}", moved))
    return out


_BY_DIMENSION = {"execution": _execution_levers, "optimizer_impl": _kernel_levers, "channels_last": _layout_levers,
                 "options": _option_levers}


def levers(case: Case, dimension: str) -> list[Lever]:
    """The levers of one dimension that move `case` somewhere new, in order of priority."""
    return _BY_DIMENSION[dimension](case)


def difference(a: Case, b: Case) -> list[str]:
    """The settings in which `b` differs from `a`, as levers name them ("sgd=fused")."""
    out = []
    if execution_of(a) != execution_of(b):
        out.append("execution=" + execution_of(b))
    if a.optimizer != b.optimizer:
        out.append(f"optimizer={b.optimizer}")
    if a.optimizer_impl != b.optimizer_impl:
        out.append(f"{b.optimizer}={b.optimizer_impl}")
    if a.channels_last != b.channels_last:
        out.append(f"channels_last={'on' if b.channels_last else 'off'}")
    for name in sorted(set(a.options_dict) | set(b.options_dict)):
        if a.options_dict.get(name) != b.options_dict.get(name):
            out.append(f"{name}={b.options_dict.get(name)}")
    for knob in ("data", "tf32", "cudnn_benchmark", "cpu_bind"):
        if getattr(a, knob) != getattr(b, knob):
            out.append(f"{knob}={getattr(b, knob)}")
    return out
