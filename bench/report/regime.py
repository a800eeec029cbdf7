"""Host-bound or GPU-bound: which side sets the pace of a case's step.

A GPU step is *host-bound* when its devices idle more than half of it: the CPU launching
kernels, not the arithmetic, sets the pace (docs/findings.md, finding 8: eager resnet18-small
at batch 32 reaches a fifth of the rate of the same step in a CUDA graph). Strategy differences measured there are
differences in host cost, and precision or layout changes barely show.

The rule, in order:

1. The step anatomy (`run --anatomy`) measures it: idle share = anatomy_idle_ms /
   anatomy_step_ms on the busiest device; above 50%: host-bound.
2. Otherwise the batch ladder of the same series (strategy, devices, precision, knobs,
   same results file) bounds it; it says host-bound only where every row of it ran steadily
   (none disturbed: a two-mode row's median step fakes a step that did not grow), else "unknown".
   A GPU-bound verdict of such a ladder stands: "host-bound" tells a user to look at the host
   rather than the strategy, the claim a disturbed row must not make; a two-mode row at the
   largest batch can still overstate its growth.
   Model a step as max(host time, g x batch): the GPU's
   share of the step at batch b is at most
   per-image time at the series' largest batch / per-image time at b
   (the largest batch's per-image time is an upper bound on g). Below 50%: host-bound.
   The largest batch itself is GPU-bound when its step takes more than GROWTH times the
   step of the batch below it (a host-bound step barely grows with the batch: eager
   resnet18-small went from 8.5 to 9.6 ms for 8x the images, docs/findings.md, finding 8); if it
   does not, the whole series is host-bound.
3. A series measured at one batch only, without an anatomy: "unknown". CPU rows: "CPU".
"""
from __future__ import annotations

import pandas as pd

from bench.cases.ranking import GPU, GROWTH, HOST, IDLE_SHARE, UNKNOWN, disturbed, ladder  # noqa: F401 - GROWTH: the rule's

CPU = "CPU"

SERIES = ("source", "hardware", "strategy", "model", "precision", "n_gpus", "n_replicas", "nnodes", "variant")


def _from_anatomy(row) -> str | None:
    idle, step = row.get("anatomy_idle_ms"), row.get("anatomy_step_ms")
    if idle is None or step is None or pd.isna(idle) or pd.isna(step) or step <= 0:
        return None
    return HOST if idle / step > IDLE_SHARE else GPU


def _ladder(series: pd.DataFrame) -> dict:
    """index -> regime for the ok rows of one series, from their step times: "unknown" for what
    would be host-bound where a row of the ladder was disturbed (its `disturbed` column:
    ranking.disturbed), whose median step says nothing steady."""
    s = series.sort_values("batch_per_gpu")
    said = ladder(s["batch_per_gpu"].tolist(), s["step_ms_p50"].tolist())
    if s["disturbed"].any():  # host-bound only from steady rows: a slow two-mode median fakes "no growth"
        said = [UNKNOWN if regime == HOST else regime for regime in said]
    return dict(zip(s.index, said))


def add_regimes(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with a `regime` column (ok rows; others empty)."""
    regime = pd.Series("", index=frame.index, dtype=object)
    if frame.empty:
        return frame.assign(regime=regime)
    ok = frame[frame["status"] == "ok"]
    gpu = ok[ok["n_gpus"].fillna(0) > 0]
    regime[ok.index.difference(gpu.index)] = CPU
    keys = [c for c in SERIES if c in gpu]
    filled = gpu.assign(**{c: gpu[c].fillna("") for c in keys if gpu[c].dtype == object},
                        disturbed=[bool(disturbed(r)) for r in gpu.to_dict("records")])
    for _, series in filled.groupby(keys, sort=False, dropna=False):
        # Several rows of one batch (repeats in one file): the ladder takes the latest.
        for i, value in _ladder(series.drop_duplicates("batch_per_gpu", keep="last")).items():
            regime[series.index[series["batch_per_gpu"] == series.loc[i, "batch_per_gpu"]]] = value
    for i, row in gpu.iterrows():
        measured = _from_anatomy(row)
        if measured:
            regime[i] = measured
    return frame.assign(regime=regime)
