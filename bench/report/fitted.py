"""What fits: every `bench fit` file found beside the results, as a report section (per model,
precision and hardware, the largest batch per device each strategy fit at each device count,
and the peak memory there) and as lines after the answer. Measured in a fake world of n on one
device, and said so wherever it is shown; never a place in the answer's rankings."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

import strategies
from bench.fit import fit
from bench.report import mdtable


def _readable(paths: list[Path]) -> list[tuple[Path, dict | None, str]]:
    out = []
    for found in fit.beside(paths):
        try:
            out.append((found, fit.load(found), ""))
        except fit.FitError as exc:
            out.append((found, None, str(exc)))
    return out


def _peak_at(rows: list[dict], outcome: dict) -> str:
    """The peak allocated memory of the largest batch that fit."""
    for r in rows:
        if (r.get("model"), r.get("precision"), r.get("strategy"), r.get("devices"), r.get("batch_per_gpu"),
                r.get("status")) == (outcome["model"], outcome["precision"], outcome["strategy"], outcome["devices"],
                                     outcome["largest_fit"], "ok"):
            return f"{r['peak_alloc_mib']:,.0f}"
    return ""


def table(doc: dict, model: str, precision: str) -> pd.DataFrame:
    """Strategies down, with what each declares it shards; device counts across: the largest
    batch per device that fit (what failed above it), and its peak allocated MiB."""
    found = [o for o in doc["outcomes"] if o["model"] == model and o["precision"] == precision]
    counts = sorted({o["devices"] for o in found})
    out = []
    for strategy in dict.fromkeys(o["strategy"] for o in found):
        declared = strategies.info(strategy)  # None: a strategy this checkout does not know
        shards = declared.describe_shards() if declared is not None else ""
        row = {"strategy": f"`{strategy}`", "shards": shards or ("nothing" if declared is not None else "")}
        for n in counts:
            o = next((o for o in found if o["strategy"] == strategy and o["devices"] == n), None)
            if o is not None:
                peak = _peak_at(doc["rows"], o) if o["largest_fit"] else ""
                row[str(n)] = o["said"] + (f", {peak} MiB" if peak else "")
        out.append(row)
    return pd.DataFrame(out)


def _models(doc: dict, models) -> list[str]:
    """The models of a fit file that the results shown measured (all of them where `models` is None)."""
    return [m for m in dict.fromkeys(o["model"] for o in doc["outcomes"]) if models is None or m in models]


def section(paths: list[Path], models=None) -> list[str]:
    """The fits beside `paths` of the `models` the results measured (every model where None):
    a fit of another model answers another question."""
    lines = []
    for found, doc, why in _readable(paths):
        if doc is None:
            lines += [f"- `{found.name}` left out: {why}", ""]
            continue
        if not _models(doc, models):
            continue
        lines += [f"### `{found.parent.name}/{found.name}`", "", f"{fit.where(doc)[0].upper()}{fit.where(doc)[1:]}: "
                  "rank 0 of n ranks whose collectives do nothing, so that its shards, DDP's buckets and FSDP2's "
                  "gathered parameters are what a rank of a real run of n holds. Cells: the largest batch per device "
                  "that fit (what failed above it) and its peak allocated memory.", ""]
        lines += [f"- {s}" for s in fit.sentences(doc, models)] + [""]
        for model, precision in dict.fromkeys((o["model"], o["precision"]) for o in doc["outcomes"]
                                              if o["model"] in _models(doc, models)):
            lines += [f"**{model}, {precision}**", "", mdtable.markdown(table(doc, model, precision)), ""]
    return (["## What fits at n devices (measured in a fake world of n)", ""] + lines) if lines else []


def said_in_answer(paths: list[Path], models=None, precisions=None) -> list[str]:
    """One line per fit result beside the results, of the models and precisions they measured
    (a fit in amp-bf16 answers nothing about an fp32 run), apart from the measured answer."""
    lines = []
    for found, doc, why in _readable(paths):
        if doc is None:
            lines.append(f"Fit file {found.name} left out: {why}")
            continue
        lines += [f"What fits ({found.name}): {s}" for s in fit.sentences(doc, models, precisions)]
    return lines
