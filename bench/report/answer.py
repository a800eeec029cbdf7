"""The answer, first: for each run, hardware, model, precision and device count, the fastest
configuration at each per-GPU batch, what it gives and costs, and how close the next
strategy is; then one line per hardware and model that a person can act on.

Only cases of the same run (results file) are compared: a figure from another sweep, on a
machine then busier or idler, would fake a difference. At one device the baseline
(`single`) competes like any other strategy. No torch.

Tie or not: two cases whose p10-p90 spreads of images/s overlap are a tie, unless one
spread is wider than UNSTABLE of its median: then the order cannot be read at all
("unstable, re-run"), not even as a tie.
"""
from __future__ import annotations

import json

import pandas as pd

import strategies
from bench.report.findings import efficiency_cell, rate, reference_pairs
from bench.report.frame import run_name
from bench.report.labels import Legend, full, knobs
from bench.report.regime import GPU, HOST

BASELINE = strategies.baseline()
# A p10-p90 spread wider than a quarter of the median is no measurement to rank by: on a
# quiet GPU a case's spread is a few percent, host-bound cases' reach a third of the median
# (docs/findings.md, finding 4); 25% flags the widest for a re-run rather than a ranking.
UNSTABLE = 0.25


def spread(row) -> float:
    return (row["img_per_s_p90"] - row["img_per_s_p10"]) / row["img_per_s"]


def devices(row) -> int:
    return int(row["n_gpus"]) if row["n_gpus"] else int(row["n_replicas"])


def where(n: int, on_gpu: bool, nnodes: int = 1) -> str:
    text = f"{n} GPU{'s' if n > 1 else ''}" if on_gpu else f"CPU x{n}"
    return text + (f" on {nnodes} hosts" if nnodes > 1 else "")


def groups(runs: pd.DataFrame):
    """((run, hardware, model, precision, devices, on GPU, hosts), rows) in a stable order."""
    frame = runs.assign(_devices=[devices(r) for _, r in runs.iterrows()],
                        _gpu=runs["n_gpus"].fillna(0) > 0, _nnodes=(runs["nnodes"].fillna(1).astype(int) if "nnodes" in runs else 1))
    keys = ["source", "hardware", "model", "precision", "_devices", "_gpu", "_nnodes"]
    for key, group in frame.groupby(keys, sort=True):
        yield key, group.drop(columns=["_devices", "_gpu", "_nnodes"])


def _speedup(top, run: pd.DataFrame) -> tuple[float | None, float | None, str]:
    """Speed-up and efficiency over the baseline of the same run: with the same knobs where
    measured, else over the fastest baseline case at that batch (named)."""
    if pd.notna(top.get("speedup")):
        return float(top["speedup"]), float(top["efficiency"]), ""
    base = run[(run["strategy"] == BASELINE) & (run["status"] == "ok") & (run["precision"] == top["precision"])
               & (run["batch_per_gpu"] == top["batch_per_gpu"]) & (run["model"] == top["model"])
               & (run["hardware"] == top["hardware"])]
    if base.empty:
        return None, None, ""
    best = base.sort_values("img_per_s").iloc[-1]
    x = top["img_per_s"] / best["img_per_s"]
    return float(x), float(x / devices(top)), full(best)


def _record(key, batch, at: pd.DataFrame, run: pd.DataFrame, legend: Legend) -> dict:
    source, hardware, model, precision, n, on_gpu, nnodes = key
    ok = at[at["status"] == "ok"].sort_values(["img_per_s", "strategy"], ascending=[False, True])
    record = {"run": run_name(source), "hardware": hardware, "model": model, "precision": precision,
              "devices": int(n), "where": where(int(n), bool(on_gpu), int(nnodes)), "batch_per_gpu": int(batch),
              "out_of_memory": sorted(set(at[at["status"] == "oom"]["strategy"])), "strategy": None}
    if ok.empty:
        return record
    top = ok.iloc[0]
    speedup, efficiency, over = _speedup(top, run)
    record.update({
        "strategy": top["strategy"], "config": knobs(top), "label": legend.short(top), "variant": top["variant"] or "",
        "img_per_s": float(top["img_per_s"]), "img_per_s_p10": float(top["img_per_s_p10"]),
        "img_per_s_p90": float(top["img_per_s_p90"]), "speedup": speedup, "efficiency": efficiency,
        "speedup_over": over, "efficiency_lo": top.get("efficiency_lo") if not over else None,
        "peak_alloc_mib": None if pd.isna(top.get("peak_alloc_mib")) else float(top["peak_alloc_mib"]),
        "regime": top.get("regime") or "", "runner_up": None, "runner_up_config": None, "gap_pct": None,
        "tie": False, "unstable": spread(top) > UNSTABLE})
    others = ok[ok["strategy"] != top["strategy"]]
    if len(others):
        second = others.iloc[0]
        overlap = top["img_per_s_p10"] <= second["img_per_s_p90"]
        wide = spread(top) > UNSTABLE or spread(second) > UNSTABLE
        record.update({"runner_up": legend.short(second), "runner_up_config": knobs(second),
                       "runner_up_img_per_s": float(second["img_per_s"]),
                       "gap_pct": round(100 * (top["img_per_s"] / second["img_per_s"] - 1), 1),
                       "tie": bool(overlap and not wide), "unstable": bool(spread(top) > UNSTABLE or (overlap and wide))})
    return record


def records(runs: pd.DataFrame, legend: Legend | None = None) -> list[dict]:
    """The answer, one record per run, hardware, model, precision, device count and batch."""
    legend = legend or Legend()
    out = []
    for key, group in groups(runs):
        run = runs[runs["source"] == key[0]]
        for batch in sorted(group["batch_per_gpu"].unique()):
            out.append(_record(key, batch, group[group["batch_per_gpu"] == batch], run, legend))
    return out


def _verdict(r: dict) -> str:
    if r["runner_up"] is None:
        return ""
    if r["unstable"]:
        return "unstable, re-run"
    return f"{r['gap_pct']:+.1f}%" + (", tie" if r["tie"] else "")


def table(recs: list[dict]) -> pd.DataFrame:
    """Short cells (labels from the legend) for one group's records."""
    lines = []
    for r in recs:
        line = {"batch/GPU": r["batch_per_gpu"]}
        if r["strategy"] is None:
            oom = r["out_of_memory"]
            line.update({"fastest": "none ran" + (" (OOM)" if oom else "")})
            lines.append(line)
            continue
        speed = "" if r["speedup"] is None else f"x{r['speedup']:.2f}" + (
            f" ({efficiency_cell({'efficiency': r['efficiency'], 'efficiency_lo': r['efficiency_lo']})})"
            if r["devices"] > 1 else "") + ("*" if r["speedup_over"] else "")
        line.update({
            "fastest": r["label"], "images/s (p10-p90)": f"{rate(r['img_per_s'])} ({rate(r['img_per_s_p10'])}-"
                                                          f"{rate(r['img_per_s_p90'])})",
            f"vs {BASELINE}": speed, "MiB/GPU": "" if r["peak_alloc_mib"] is None else f"{r['peak_alloc_mib']:.0f}",
            "regime": r["regime"], "runner-up": r["runner_up"] or "only one strategy", "gap": _verdict(r)})
        lines.append(line)
    return pd.DataFrame(lines).fillna("")


def _case(r: dict) -> str:
    return (f"`{r['label']}` ({r['precision']}, {r['where']}, {r['batch_per_gpu']}/GPU): {rate(r['img_per_s'])} "
            f"img/s (p10-p90 {rate(r['img_per_s_p10'])}-{rate(r['img_per_s_p90'])})"
            + ("" if r["speedup"] is None else f", x{r['speedup']:.2f} over {BASELINE}")
            + ("" if r["peak_alloc_mib"] is None else f", {r['peak_alloc_mib']:.0f} MiB/GPU")
            + (f", {r['regime']}" if r["regime"] else ""))


def _avoid(run: pd.DataFrame, recs: list[dict]) -> list[str]:
    ok = run[run["status"] == "ok"]
    out = []
    pairs = reference_pairs(ok)
    slow = [(r, x) for r, x in pairs if x < 0.9]
    if slow:
        ratios = [x for _, x in slow]
        batches = ", ".join(str(b) for b in sorted({int(r["batch_per_gpu"]) for r, _ in slow}))
        text = (f"avoid {', '.join(sorted({r['strategy'] for r, _ in slow}))} at {batches}/GPU: "
                f"{100 * min(ratios):.0f}-{100 * max(ratios):.0f}% of "
                f"{strategies.reference()}'s throughput on the same GPUs (replicas in threads, one process)")
        trap = [(on, off) for _, g in ok[ok["strategy"].isin({r["strategy"] for r, _ in slow})].groupby(["strategy", "precision", "n_gpus",
                                                                             "batch_per_gpu"])
                for on in g[g["cudnn_benchmark"].astype(str).str.lower() == "true"]["img_per_s"][:1]
                for off in g[g["cudnn_benchmark"].astype(str).str.lower() != "true"]["img_per_s"][:1]]
        if trap:
            worst = max(off / on for on, off in trap)
            text += (f", and never with cudnn.benchmark on: up to {worst:.0f}x slower (cuDNN's plan cache is "
                     "per thread, so every step autotunes again)")
        out.append(text)
    known = [r for r in recs if r.get("regime") in (HOST, GPU)]
    host = sorted({r["batch_per_gpu"] for r in known} - {r["batch_per_gpu"] for r in known if r["regime"] == GPU})
    busy = sorted({r["batch_per_gpu"] for r in recs if r.get("regime") == GPU and host and r["batch_per_gpu"] > host[-1]})
    if host:
        out.append(f"at {', '.join(map(str, host))}/GPU every fastest case is host-bound (the GPU idles more than "
                   "half the step): differences there are host costs; "
                   + (f"compare at {busy[0]}/GPU or above" if busy else "use larger batches")
                   + " or a whole-step CUDA graph")
    return out


def actions(run: pd.DataFrame, recs: list[dict]) -> str:
    """One line for one run's hardware and model: the best configuration, the fastest at
    the largest batch that fits, and what to avoid with the measured reason."""
    done = [r for r in recs if r["strategy"] is not None]
    if not done:
        return "nothing ran ok in this run."
    best = max(done, key=lambda r: (r["img_per_s"], r["label"]))
    parts = [f"Fastest: {_case(best)}."]
    largest = max(r["batch_per_gpu"] for r in done)
    at = max((r for r in done if r["batch_per_gpu"] == largest), key=lambda r: (r["img_per_s"], r["label"]))
    oom = sorted({r["batch_per_gpu"] for r in recs if r["strategy"] is None and r["out_of_memory"]})
    if at is not best:
        parts.append(f"Largest batch that ran, {largest}/GPU" + (f" (OOM at {oom[0]})" if oom else "")
                     + f": {_case(at)}.")
    params = run["parameters"].dropna() if "parameters" in run else pd.Series(dtype=float)
    if len(params) and at["peak_alloc_mib"]:
        state = 3 * 4 * float(params.iloc[0]) / 2**20
        parts.append(f"Model state (fp32 weights, gradients, momentum of {float(params.iloc[0]) / 1e6:.2f} M "
                     f"parameters) is {state:.0f} MiB of its {at['peak_alloc_mib']:.0f} MiB per GPU; the rest is "
                     "activations and workspace.")
    avoid = _avoid(run, done)
    if avoid:
        text = "; ".join(avoid)
        parts.append(text[0].upper() + text[1:] + ".")
    return " ".join(parts)


def _plain(value):
    """JSON's values: numbers without NaN (null), numpy scalars as Python's."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and value != value:
        return None
    return value


def to_json(recs: list[dict]) -> str:
    return json.dumps(_plain(recs), indent=1, sort_keys=True)
