"""The answer, first: for each hardware, model, precision and device count, which strategy
to use at each batch size, what it gives and what it costs, and how close the next one is.

Computed from the report's frame (one row per case, speed-ups paired within a run); no
torch. A "tie" is where the two spreads (p10-p90 of images/s) overlap: the order of the
two is not a finding.
"""
from __future__ import annotations

import statistics

import pandas as pd

import strategies

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
            line.update({"runner-up": _name(second), "gap": f"{gap:.1f}%" + (" (tie)" if tie else "")})
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


def sentences(frame: pd.DataFrame) -> list[str]:
    """Three to six statements computed from one hardware/model frame."""
    ok = frame[frame["status"] == "ok"]
    plain = ok[ok["variant"].fillna("") == ""]
    out = []
    threaded = [s for s in strategies.names() if strategies.get(s).replicas_in_threads]
    reference = strategies.reference()
    # DataParallel against DDP, same GPUs, batch and precision, default knobs.
    pairs = []
    for _, r in plain[plain["strategy"].isin(threaded)].iterrows():
        ddp = plain[(plain["strategy"] == reference) & (plain["n_gpus"] == r["n_gpus"])
                    & (plain["batch_per_gpu"] == r["batch_per_gpu"]) & (plain["precision"] == r["precision"])]
        if len(ddp):
            pairs.append(r["img_per_s"] / ddp["img_per_s"].iloc[0])
    if pairs:
        out.append(f"DataParallel-style strategies ({', '.join(threaded)}) reach {100 * min(pairs):.0f}-"
                   f"{100 * max(pairs):.0f}% of {reference}'s throughput on the same GPUs ({len(pairs)} pairs, "
                   "default knobs).")
    # Mixed precision: the best amp case against the best fp32 case of the same strategy, GPUs and batch.
    gains = []
    for (strategy, gpus, batch), g in ok.groupby(["strategy", "n_gpus", "batch_per_gpu"]):
        fp32, amp = g[g["precision"] == "fp32"], g[g["precision"] != "fp32"]
        if len(fp32) and len(amp):
            gains.append(amp["img_per_s"].max() / fp32["img_per_s"].max())
    if gains:
        out.append(f"Mixed precision (its best knobs against fp32's best) gives a median x{statistics.median(gains):.2f}"
                   f" images/s (x{min(gains):.2f}-x{max(gains):.2f} over {len(gains)} strategy/GPU/batch combinations).")
    # channels_last, where both layouts ran with otherwise the same knobs.
    cl = []
    for _, r in ok[ok["channels_last"].astype(str).str.lower() == "true"].iterrows():
        twin = ok[(ok["strategy"] == r["strategy"]) & (ok["n_gpus"] == r["n_gpus"])
                  & (ok["batch_per_gpu"] == r["batch_per_gpu"]) & (ok["precision"] == r["precision"])
                  & (ok["channels_last"].astype(str).str.lower() != "true")
                  & (ok["variant"].fillna("") == str(r["variant"]).replace("channels_last", "").strip(", "))]
        if len(twin):
            cl.append(r["img_per_s"] / twin["img_per_s"].iloc[0])
    if cl:
        out.append(f"channels_last gives a median x{statistics.median(cl):.2f} images/s "
                   f"(x{min(cl):.2f}-x{max(cl):.2f} over {len(cl)} pairs).")
    # Sharding: memory per GPU against DDP at the same batch, GPUs and precision.
    saved = []
    for _, r in ok[ok["strategy"].isin(["zero1", "fsdp2"])].iterrows():
        ddp = ok[(ok["strategy"] == reference) & (ok["n_gpus"] == r["n_gpus"])
                 & (ok["batch_per_gpu"] == r["batch_per_gpu"]) & (ok["precision"] == r["precision"])
                 & (ok["channels_last"] == r["channels_last"])]
        if len(ddp) and not pd.isna(r.get("peak_alloc_mib")):
            saved.append((r["strategy"], ddp["peak_alloc_mib"].min() - r["peak_alloc_mib"],
                          r["img_per_s"] / ddp["img_per_s"].max()))
    if saved:
        mib = [s for _, s, _ in saved]
        speed = [v for _, _, v in saved]
        out.append(f"Sharding (zero1, fsdp2) takes between {max(mib):.0f} MiB less and {max(0, -min(mib)):.0f} MiB more "
                   f"per GPU than {reference} ({sum(m > 0 for m in mib)} of {len(mib)} cases save), at "
                   f"{100 * min(speed):.0f}-{100 * max(speed):.0f}% of its best throughput.")
    # Host-bound cases: a whole-step CUDA graph runs the same step much faster.
    graph = ok[ok["execution"] == "cuda-graph"]
    bound = []
    for _, g in graph.iterrows():
        eager = ok[(ok["execution"] == "eager") & (ok["strategy"] == g["strategy"]) & (ok["n_gpus"] == g["n_gpus"])
                   & (ok["batch_per_gpu"] == g["batch_per_gpu"]) & (ok["precision"] == g["precision"])]
        if len(eager):
            bound.append((g["img_per_s"] / eager["img_per_s"].max(), g))
    if bound:
        ratio, g = max(bound, key=lambda t: t[0])
        if ratio > 1.5:
            out.append(f"Small batches are host-bound: captured in a CUDA graph, {g['strategy']} at "
                       f"{int(g['batch_per_gpu'])}/GPU runs x{ratio:.1f} faster than its best eager case (the "
                       f"launch-free ceiling; {sum(r > 1.5 for r, _ in bound)} of {len(bound)} graph cases gain more "
                       "than x1.5).")
        else:
            out.append(f"A whole-step CUDA graph gains at most x{ratio:.2f} over the best eager case here "
                       f"({len(bound)} cases): these steps are not host-bound.")
    return out
