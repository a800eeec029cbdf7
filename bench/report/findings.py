"""Findings in sentences, computed from one hardware/model frame: every ratio divides two
cases of the same results file, and a summary over cases names their regime (host-bound
or GPU-bound, bench/report/regime.py): a median over host-bound cases measures the host,
not the knob. No torch.
"""
from __future__ import annotations

import statistics

import pandas as pd

import strategies
from bench.report.frame import amp_speedups
from bench.report.regime import GPU, HOST


def rate(x: float) -> str:
    """A rate (images/s, tokens/s) with its significant digits (0.7 img/s is not "1")."""
    if x >= 1000:
        return f"{x / 1000:.1f}k"
    if x >= 10:
        return f"{x:.0f}"
    return f"{x:.2g}"


def _cell_pct(x) -> str:
    return "" if x is None or pd.isna(x) else f"{100 * x:.0f}%"


def efficiency_cell(row) -> str:
    """Scaling efficiency; above 100% it says whether the spreads allow 100% (noise) or not."""
    eff = row.get("efficiency")
    if eff is None or pd.isna(eff):
        return ""
    text = _cell_pct(eff)
    if eff > 1:
        low = row.get("efficiency_lo")
        text += ", noise" if low is not None and not pd.isna(low) and low <= 1 else ", above linear"
    return text


def twins(rows: pd.DataFrame, row, same: tuple, **fixed) -> pd.DataFrame:
    """The rows measured in the same results file as `row` that match it on the `same`
    columns and have the `fixed` values: what a ratio may divide `row` by (two figures
    from different runs would compare the machine's moods, not the cases)."""
    mask = pd.Series(True, index=rows.index)
    for column in same + (("source",) if "source" in rows else ()):
        mask &= rows[column] == row[column]
    for column, value in fixed.items():
        mask &= rows[column] == value
    return rows[mask]


def reference_pairs(ok: pd.DataFrame) -> list[tuple]:
    """(row, images/s over the reference strategy's) for every threaded strategy's case with
    default knobs, against the reference (DDP) with default knobs, same GPUs, batch,
    precision and run."""
    plain = ok[ok["variant"].fillna("") == ""]
    threaded = [s for s in strategies.names() if strategies.get(s).replicas_in_threads]
    pairs = []
    for _, r in plain[plain["strategy"].isin(threaded)].iterrows():
        ref = twins(plain, r, ("n_gpus", "batch_per_gpu", "precision"), strategy=strategies.reference())
        if len(ref):
            pairs.append((r, r["items_per_s"] / ref["items_per_s"].iloc[0]))
    return pairs


def sharding_pairs(ok: pd.DataFrame) -> list[tuple]:
    """(sharded row, reference row) at equal GPUs, batch, precision and layout, same run; the
    reference with its default knobs (channels_last aside)."""
    sharded = [s for s in strategies.names() if strategies.get(s).shards]
    reference = ok[(ok["strategy"] == strategies.reference())
                   & ok["variant"].fillna("").isin(["", "channels_last"])]
    pairs = []
    for _, r in ok[ok["strategy"].isin(sharded)].iterrows():
        ref = twins(reference, r, ("n_gpus", "batch_per_gpu", "precision", "channels_last"))
        if len(ref) and not pd.isna(r.get("peak_alloc_mib")):
            pairs.append((r, ref.iloc[0]))
    return pairs


def by_regime(ratios: list[tuple[float, str]]) -> str:
    """'x1.84 median over 6 GPU-bound cases (x1.52-x2.10); x0.97 over 10 host-bound cases
    (...)': a median is taken within one regime only."""
    parts = []
    for regime, note in ((GPU, ""), (HOST, ", where the host sets the pace"), ("", "")):
        values = [x for x, r in ratios if (r == regime if regime else r not in (GPU, HOST)) and pd.notna(x)]
        if not values:
            continue
        where = f"{regime} cases" if regime else "cases of unknown regime"
        parts.append(f"median x{statistics.median(values):.2f} over {len(values)} {where} "
                     f"(x{min(values):.2f}-x{max(values):.2f}{note})")
    return "; ".join(parts)


def sentences(frame: pd.DataFrame) -> list[str]:
    """Three to six statements computed from one hardware/model frame; every ratio divides
    two cases of the same results file."""
    ok = frame[frame["status"] == "ok"]
    out = []
    threaded = [s for s in strategies.names() if strategies.get(s).replicas_in_threads]
    reference = strategies.reference()
    pairs = [ratio for _, ratio in reference_pairs(ok)]
    if pairs:
        out.append(f"DataParallel-style strategies ({', '.join(threaded)}) reach {100 * min(pairs):.0f}-"
                   f"{100 * max(pairs):.0f}% of {reference}'s throughput on the same GPUs ({len(pairs)} pairs, "
                   "default knobs).")
    merged = amp_speedups(frame)
    gains = list(zip(merged["amp_speedup"], merged.get("regime", pd.Series("", index=merged.index))))
    if gains:
        out.append("Mixed precision over fp32 (same strategy, GPUs, batch and run): " + by_regime(gains) + ".")
    cl = []
    for _, r in ok[ok["channels_last"].astype(str).str.lower() == "true"].iterrows():
        twin = twins(ok, r, ("strategy", "n_gpus", "batch_per_gpu", "precision"))
        twin = twin[(twin["channels_last"].astype(str).str.lower() != "true")
                    & (twin["variant"].fillna("") == str(r["variant"]).replace("channels_last", "").strip(", "))]
        if len(twin):
            cl.append((r["items_per_s"] / twin["items_per_s"].iloc[0], r.get("regime", "")))
    if cl:
        out.append("channels_last over the default layout (same run): " + by_regime(cl) + ".")
    saved = [(ref["peak_alloc_mib"] - r["peak_alloc_mib"], r["items_per_s"] / ref["items_per_s"])
             for r, ref in sharding_pairs(ok)]
    if saved:
        mib, speed = [m for m, _ in saved], [v for _, v in saved]
        names = ", ".join(s for s in strategies.names() if strategies.get(s).shards)
        most, worst = max(mib), min(mib)
        if max(abs(most), abs(worst)) < 0.5:
            span = f"uses as much memory per GPU as {reference}"
        elif worst >= 0:
            span = f"uses {worst:.0f}-{most:.0f} MiB less per GPU than {reference}"
        elif most <= 0:
            span = f"uses {-most:.0f}-{-worst:.0f} MiB more per GPU than {reference}"
        else:
            span = f"uses between {most:.0f} MiB less and {-worst:.0f} MiB more per GPU than {reference}"
        out.append(f"Sharding ({names}) {span} ({sum(m > 0 for m in mib)} of {len(mib)} cases save), at "
                   f"{100 * min(speed):.0f}-{100 * max(speed):.0f}% of its throughput (same run).")
    bound = []
    for _, g in ok[ok["execution"] == "cuda-graph"].iterrows():
        eager = twins(ok, g, ("strategy", "n_gpus", "batch_per_gpu", "precision"), execution="eager")
        if len(eager):
            bound.append((g["items_per_s"] / eager["items_per_s"].max(), g))
    if bound:
        ratio, g = max(bound, key=lambda t: t[0])
        if ratio > 1.5:
            out.append(f"Small batches are host-bound: captured in a CUDA graph, {g['strategy']} at "
                       f"{int(g['batch_per_gpu'])}/GPU runs x{ratio:.1f} faster than its best eager case of the same "
                       f"run (the launch-free ceiling; {sum(r > 1.5 for r, _ in bound)} of {len(bound)} graph cases "
                       "gain more than x1.5).")
        else:
            out.append(f"A whole-step CUDA graph gains at most x{ratio:.2f} over the best eager case of its run "
                       f"({len(bound)} cases): these steps are not host-bound.")
    return out
