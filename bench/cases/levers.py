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
search that runs out of budget has tried what matters most: the execution, then each knob that
declares a lever in its entry (bench/core/knobs.py, by `lever_rank`), then the strategy's
options. No torch.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import strategies
from bench.cases.case import Case
from bench.core.knobs import BY_NAME as KNOB, KNOBS, lever_knobs

# (execution, compile mode) pairs a search tries, in order of priority.
EXECUTION_LEVERS = (("compile", "reduce-overhead"), ("cuda-graph", "default"), ("compile", "default"))
DIMENSIONS = ("execution", *(knob.name for knob in lever_knobs()), "options")


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
    return execution_name(case.execution, case.compile_mode)


def execution_name(execution: str, mode: str) -> str:
    return execution if mode == "default" else f"{execution}:{mode}"


def _with_knobs(case: Case, **values) -> Case:
    return dataclasses.replace(case, knobs=tuple((k, values.get(k, v)) for k, v in case.knobs))


def fused_label(case: Case) -> str:
    """The fused-kernel lever as the answer names it: "sgd=fused", "adamw=fused"."""
    return KNOB["optimizer_impl"].setting("fused", _named(case))


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


def _knob_levers(case: Case, name: str) -> list[Lever]:
    """The lever a knob's entry declares: the value a search tries in place of the case's."""
    from bench.workloads import data_of

    value = KNOB[name].lever(case, data_of(case.model))
    if value is None:
        return []
    return [Lever(name, KNOB[name].setting(value, _named(case)), _with_knobs(case, **{name: value}))]


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


def levers(case: Case, dimension: str) -> list[Lever]:
    """The levers of one dimension that move `case` somewhere new, in order of priority."""
    if dimension == "execution":
        return _execution_levers(case)
    if dimension == "options":
        return _option_levers(case)
    if dimension not in DIMENSIONS:
        raise ValueError(f"{dimension!r} is no lever's dimension ({', '.join(DIMENSIONS)}): its knob declares no lever")
    return _knob_levers(case, dimension)


def _named(case: Case) -> dict:
    """The case's knobs as they resolved, for the names a setting is said by ("{optimizer}")."""
    return {knob.name: getattr(case, knob.name) for knob in KNOBS}


def settings(case: Case) -> list[str]:
    """Every setting of `case` as levers and differences name them: its execution, each knob (the
    compile mode within the execution) and each option of its strategy's."""
    return (["execution=" + execution_of(case)]
            + [k.setting(getattr(case, k.name), _named(case)) for k in KNOBS
               if not k.in_execution and getattr(case, k.name) is not None]
            + [f"{k}={v}" for k, v in case.options])


def difference(a: Case, b: Case) -> list[str]:
    """The settings in which `b` differs from `a`, as levers name them ("sgd=fused")."""
    out = ["execution=" + execution_of(b)] if execution_of(a) != execution_of(b) else []
    out += [k.setting(getattr(b, k.name), _named(b)) for k in KNOBS
            if not k.in_execution and getattr(a, k.name) != getattr(b, k.name)]
    return out + [f"{name}={b.options_dict.get(name)}" for name in sorted(set(a.options_dict) | set(b.options_dict))
                  if a.options_dict.get(name) != b.options_dict.get(name)]
