"""The answer, first: for each hardware, model, precision and device count, which strategy
to use at each batch size, what it gives and what it costs, and how close the next one is.

Computed from the report's frame (one row per case, speed-ups paired within a run); no
torch. A "tie" is where the two spreads (p10-p90 of images/s) overlap: the order of the
two is not a finding. Where the fastest and the runner-up come from different results
files, the gap says "different runs" (the machine may have been busier in one of them);
the sentences divide only cases of the same run.
"""
from __future__ import annotations

import statistics

import pandas as pd

import strategies
from bench.report.frame import amp_speedups

BASELINE = strategies.baseline()


def _name(row) -> str:
    knobs = row.get("variant") or ""
    return f"{row['strategy']}" + (f" ({knobs})" if knobs else "")


def _devices(row) -> int:
    return int(row["n_gpus"]) if row["n_gpus"] else int(row["n_replicas"])


def rate(x: float) -> str:
    """Images/s with their significant digits (0.7 img/s is not "1")."""
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


def answer_table(group: pd.DataFrame) -> pd.DataFrame:
    """One line per per-GPU batch of a hardware/model/precision/device-count group: the
    fastest case (any strategy, any knobs), and the fastest case of another strategy."""
    lines = []
    for batch in sorted(group["batch_per_gpu"].unique()):
        at = group[group["batch_per_gpu"] == batch]
        ok = at[at["status"] == "ok"].sort_values("img_per_s", ascending=False)
        oom = sorted(set(at[at["status"] == "oom"]["strategy"]))
        line = {"batch/GPU": int(batch)}
        if ok.empty:
            line.update({"fastest": "none ran" + (f" (out of memory: {', '.join(oom)})" if oom else ""),
                         "images/s": "", "speed-up (efficiency)": "", "memory/GPU MiB": "", "runner-up": "",
                         "gap": ""})
            lines.append(line)
            continue
        top = ok.iloc[0]
        others = ok[ok["strategy"] != top["strategy"]]
        speedup = top.get("speedup")
        line.update({
            "fastest": _name(top),
            "images/s": f"{rate(top['img_per_s'])} ({rate(top['img_per_s_p10'])}-{rate(top['img_per_s_p90'])})",
            "speed-up (efficiency)": "" if speedup is None or pd.isna(speedup)
            else f"x{speedup:.2f} ({efficiency_cell(top)})",
            "memory/GPU MiB": "" if pd.isna(top.get("peak_alloc_mib")) else f"{top['peak_alloc_mib']:.0f}",
        })
        if others.empty:
            line.update({"runner-up": "only one strategy ran", "gap": ""})
        else:
            second = others.iloc[0]
            gap = 100 * (top["img_per_s"] / second["img_per_s"] - 1)
            tie = top["img_per_s_p10"] <= second["img_per_s_p90"]
            # Two runs may have met different machine loads: the gap then says so.
            other_run = "source" in second and second["source"] != top["source"]
            notes = [n for n, on in (("tie", tie), ("different runs", other_run)) if on]
            line.update({"runner-up": _name(second), "gap": f"{gap:.1f}%" + (f" ({', '.join(notes)})" if notes else "")})
        if oom:
            line["runner-up"] += f"; out of memory: {', '.join(oom)}"
        lines.append(line)
    return pd.DataFrame(lines)


def answer_groups(frame: pd.DataFrame):
    """(precision, device label, group) for the multi-device comparisons of one hardware/model
    frame; `single` is the baseline of each (its row sits in the speed-up)."""
    multi = frame[frame["strategy"] != BASELINE]
    multi = multi.assign(_devices=[_devices(r) for _, r in multi.iterrows()], _nnodes=multi.get("nnodes", 1))
    multi["_nnodes"] = multi["_nnodes"].fillna(1).astype(int)
    for precision in sorted(set(multi["precision"])):
        p = multi[multi["precision"] == precision]
        for (devices, nnodes), group in p.groupby(["_devices", "_nnodes"], sort=True):
            on_gpu = bool(group["n_gpus"].iloc[0])
            where = f"{devices} GPU{'s' if devices > 1 else ''}" if on_gpu else f"CPU x{devices}"
            if nnodes > 1:
                where += f" on {nnodes} hosts"
            yield precision, where, group.drop(columns=["_devices", "_nnodes"])


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
            pairs.append((r, r["img_per_s"] / ref["img_per_s"].iloc[0]))
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
    gains = amp_speedups(frame)["amp_speedup"].dropna().tolist()
    if gains:
        out.append(f"Mixed precision gives a median x{statistics.median(gains):.2f} images/s over fp32 "
                   f"(x{min(gains):.2f}-x{max(gains):.2f} over {len(gains)} cases; same strategy, GPUs, batch and run).")
    cl = []
    for _, r in ok[ok["channels_last"].astype(str).str.lower() == "true"].iterrows():
        twin = twins(ok, r, ("strategy", "n_gpus", "batch_per_gpu", "precision"))
        twin = twin[(twin["channels_last"].astype(str).str.lower() != "true")
                    & (twin["variant"].fillna("") == str(r["variant"]).replace("channels_last", "").strip(", "))]
        if len(twin):
            cl.append(r["img_per_s"] / twin["img_per_s"].iloc[0])
    if cl:
        out.append(f"channels_last gives a median x{statistics.median(cl):.2f} images/s "
                   f"(x{min(cl):.2f}-x{max(cl):.2f} over {len(cl)} pairs, same run).")
    saved = [(ref["peak_alloc_mib"] - r["peak_alloc_mib"], r["img_per_s"] / ref["img_per_s"])
             for r, ref in sharding_pairs(ok)]
    if saved:
        mib, speed = [m for m, _ in saved], [v for _, v in saved]
        names = ", ".join(s for s in strategies.names() if strategies.get(s).shards)
        out.append(f"Sharding ({names}) takes between {max(mib):.0f} MiB less and {max(0, -min(mib)):.0f} MiB more "
                   f"per GPU than {reference} ({sum(m > 0 for m in mib)} of {len(mib)} cases save), at "
                   f"{100 * min(speed):.0f}-{100 * max(speed):.0f}% of its throughput (same run).")
    bound = []
    for _, g in ok[ok["execution"] == "cuda-graph"].iterrows():
        eager = twins(ok, g, ("strategy", "n_gpus", "batch_per_gpu", "precision"), execution="eager")
        if len(eager):
            bound.append((g["img_per_s"] / eager["img_per_s"].max(), g))
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
