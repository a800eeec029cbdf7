"""Short names for knob sets, defined once in a legend: `ddp+graph+CL` instead of
"ddp (execution=cuda-graph, channels_last, sgd=fused, bucket_cap_mb=100, ...)".

A short label is the strategy and one token per knob set away from the suite's defaults;
a label that would still exceed MAX_CELL characters becomes `<strategy>+K<n>`, spelled out
in the legend. The legend lists every label used with its full knob list.
"""
from __future__ import annotations

import re

from bench.cases.case import Case
from bench.core.knobs import by_label

MAX_CELL = 40  # characters: no table cell on the first screen is longer

EXECUTION = {"cuda-graph": "graph", "compile": "compile", "compile:reduce-overhead": "compile-ro",
             "compile:max-autotune-no-cudagraphs": "compile-ma"}


def _token(key: str, value) -> str:
    if key == "execution":
        return EXECUTION.get(str(value), str(value))
    knob = by_label(key)
    if knob is not None:  # its token is declared in its entry (bench/core/knobs.py)
        return knob.token(value)
    # A strategy option: its name's initials and the value (bucket_cap_mb=100 -> bcm100).
    initials = "".join(w[0] for w in re.split(r"[_\W]+", key) if w)
    if value is True:
        return initials
    if value is False:
        return f"no-{initials}"
    return f"{initials}{value}"


def knobs(row) -> dict:
    return Case.from_row(dict(row)).changed_knobs()


def tokens(row) -> str:
    """The row's settings away from the defaults in the legend's short form (`graph+CL+fused`),
    "defaults" where there are none."""
    return "+".join(_token(k, v) for k, v in knobs(row).items()) or "defaults"


def full(row) -> str:
    """The strategy with every knob spelled out."""
    variant = row.get("variant") or ""
    return f"{row['strategy']}" + (f" ({variant})" if variant else "")


class Legend:
    """Short labels handed out in order of first use; `lines()` spells them out."""

    def __init__(self):
        self.names: dict[str, str] = {}  # short -> full
        self._numbered: dict[str, str] = {}  # full -> short, for the K<n> fallback

    def short(self, row) -> str:
        name = full(row)
        tokens = [_token(k, v) for k, v in knobs(row).items()]
        short = "+".join([str(row["strategy"])] + tokens)
        if len(short) > MAX_CELL:
            short = self._numbered.setdefault(name, f"{row['strategy']}+K{len(self._numbered) + 1}")
        self.names.setdefault(short, name)
        return short

    def lines(self) -> list[str]:
        """Markdown: one bullet per label whose short form hides knobs."""
        spelled = [(s, f) for s, f in self.names.items() if s != f]
        if not spelled:
            return []
        return ["Configurations: " + "; ".join(f"`{s}` = {f}" for s, f in spelled) + ". Tokens: graph = the whole step "
                "in a CUDA graph, compile = torch.compile, CL = channels_last, fused/foreach = the optimiser's "
                "kernels; a strategy option is its initials and value (bcm100 = bucket_cap_mb=100).", ""]
