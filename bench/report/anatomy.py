"""The step anatomy (`run --anatomy`): where each profiled step's time goes, per case, as a
stacked-bar figure, a table and sentences, beside the timed step and the launch-free
ceiling (the same case captured in a CUDA graph)."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pandas as pd

import strategies
from bench.report import findings as answer, mdtable
from bench.report.figures import _save, plt, slug
from bench.report.frame import _order, label
from bench.report.regime import IDLE_SHARE
from bench.core.knobs import STEP_KNOBS


# --- step anatomy (run --anatomy) -------------------------------------------------------
ANATOMY_PARTS = ("compute", "optimizer", "copy", "exposed_comm", "idle")
ANATOMY_COLOURS = {"compute": "tab:blue", "optimizer": "tab:olive", "copy": "tab:orange",
                   "exposed_comm": "tab:red", "idle": "lightgrey"}


def _anatomy_rows(group: pd.DataFrame) -> pd.DataFrame:
    if "anatomy_step_ms" not in group:
        return group.iloc[0:0]
    return group[(group["status"] == "ok") & group["anatomy_step_ms"].notna()]


def _launch_free(row, rows: pd.DataFrame):
    """The timed CUDA-graph step of the same strategy, devices, precision, batch and run."""
    graph = answer.twins(rows, row, ("strategy", "n_gpus", "batch_per_gpu", "precision", "channels_last"),
                         execution="cuda-graph")
    return graph["step_ms_p50"].iloc[0] if len(graph) else None


def figure_anatomy(rows: pd.DataFrame, every: pd.DataFrame, title: str, folder: Path, name: str) -> list[Path]:
    """One horizontal stacked bar per case: its profiled step split into parts (busiest
    device); a black bar at the timed median step and, for eager cases, a navy diamond at
    the timed step of the same case captured in a CUDA graph (the launch-free ceiling)."""
    labels = [textwrap.fill(label(r), 44) for _, r in rows.iterrows()]
    ys = list(range(len(rows)))[::-1]  # the first case on top
    fig, ax = plt.subplots(figsize=(9.5, 1.0 + 0.62 * len(rows)))
    left = [0.0] * len(rows)
    for part in ANATOMY_PARTS:
        values = rows[f"anatomy_{part}_ms"].fillna(0).tolist()
        ax.barh(ys, values, left=left, color=ANATOMY_COLOURS[part], label=part.replace("_", " "), edgecolor="white",
                height=0.65)
        left = [a + v for a, v in zip(left, values)]
    ax.scatter(rows["step_ms_p50"], ys, marker="|", s=500, color="black", zorder=3, label="timed median step")
    ceiling = [(y, _launch_free(r, every)) for y, (_, r) in zip(ys, rows.iterrows()) if r["execution"] == "eager"]
    ceiling = [(y, v) for y, v in ceiling if v is not None]
    if ceiling:
        ax.scatter([v for _, v in ceiling], [y for y, _ in ceiling], marker="D", color="navy", zorder=3,
                   label="same case in a CUDA graph (timed)")
    ax.set_yticks(ys, labels, fontsize=7.5)
    ax.set_xlabel("ms per step (busiest device)")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, folder, name)


def anatomy_table(rows: pd.DataFrame, every: pd.DataFrame) -> pd.DataFrame:
    table = pd.DataFrame({
        "case": [label(r) for _, r in rows.iterrows()],
        "timed step ms (p10-p90)": [f"{r['step_ms_p50']:.2f} ({r['step_ms_p10']:.2f}-{r['step_ms_p90']:.2f})"
                                    for _, r in rows.iterrows()],
        "profiled ms": [f"{r['anatomy_step_ms']:.2f} ({r['anatomy_vs_timed_pct']:+.0f}%)" for _, r in rows.iterrows()],
        **{p.replace("_", " "): rows[f"anatomy_{p}_ms"].map(lambda v: f"{v:.2f}").tolist() for p in ANATOMY_PARTS},
        "all comm": rows["anatomy_comm_ms"].map(lambda v: f"{v:.2f}").tolist(),
        "CUDA graph ms": [f"{v:.2f}" if (v := _launch_free(r, every)) is not None and r["execution"] == "eager" else ""
                          for _, r in rows.iterrows()],
        "device": rows["anatomy_device"].tolist(),
        # Every rank and device, not only the busiest: skew between ranks shows here.
        "idle per device": rows["anatomy_idle_ms_per_device"].fillna("").str.replace(";", "; ").tolist(),
        "exposed comm per device":
            rows["anatomy_exposed_comm_ms_per_device"].fillna("").str.replace(";", "; ").tolist(),
    })
    return table


def anatomy_findings(rows: pd.DataFrame, every: pd.DataFrame) -> list[str]:
    """Sentences computed from the breakdowns of one model/precision/batch."""
    out = []

    def parts(r):
        return {p: r[f"anatomy_{p}_ms"] for p in ANATOMY_PARTS}

    eager = rows[rows["execution"] == "eager"]
    for _, r in eager[(eager["strategy"] == strategies.reference())].iterrows():
        same = answer.twins(eager, r, ("channels_last",), strategy=strategies.baseline())  # profiled in the same run
        if same.empty:
            continue
        # The baseline that agrees on every knob of the step where there is one.
        agree = same[(same[list(STEP_KNOBS)] == r[list(STEP_KNOBS)]).all(axis=1)]
        b = (agree if not agree.empty else same).iloc[0]
        delta = {p: parts(r)[p] - parts(b)[p] for p in ANATOMY_PARTS}
        extra = r["anatomy_step_ms"] - b["anatomy_step_ms"]
        ranked = sorted(delta.items(), key=lambda kv: -kv[1])
        out.append(f"{label(r)} takes {extra:+.2f} ms per profiled step against {label(b)}: "
                   + ", ".join(f"{p.replace('_', ' ')} {v:+.2f}" for p, v in ranked) + " ms.")
    for _, r in eager[~eager["strategy"].isin([strategies.baseline(), strategies.reference()])].iterrows():
        share = {p: 100 * parts(r)[p] / r["anatomy_step_ms"] for p in ANATOMY_PARTS}
        out.append(f"{label(r)}: idle {share['idle']:.0f}% of its step, copies {share['copy']:.0f}%, "
                   f"exposed communication {share['exposed_comm']:.0f}%, compute {share['compute']:.0f}%.")
    for _, r in eager.iterrows():
        graph = _launch_free(r, every)
        busy = r["anatomy_step_ms"] - r["anatomy_idle_ms"]
        if r["anatomy_idle_ms"] > IDLE_SHARE * r["anatomy_step_ms"]:
            out.append(f"{label(r)} is host-bound: its devices idle {r['anatomy_idle_ms']:.2f} of "
                       f"{r['anatomy_step_ms']:.2f} ms; busy time {busy:.2f} ms"
                       + (f", and the same step in a CUDA graph takes {graph:.2f} ms." if graph else "."))
    noted = rows[rows["anatomy_note"].fillna("").str.contains("parts add up")]
    if len(noted):
        out.append(f"{len(noted)} of {len(rows)} profiled steps differ from the timed median by more than "
                   f"5% ({', '.join(f'{label(r)} {r.anatomy_vs_timed_pct:+.0f}%' for _, r in noted.iterrows())}): "
                   "the profiler's cost per launch lengthens host-bound steps; their idle time is an upper bound.")
    return out


def anatomy_section(group: pd.DataFrame, folder: Path, name: str) -> list[str]:
    rows = _anatomy_rows(group) if len(group) else group
    if rows.empty:
        return []
    lines = ["### Step anatomy", "",
             "Where each step's time goes (`run --anatomy`, bench/measure/anatomy.py): milliseconds per step on the "
             "busiest device, from a GPU-only profile taken after the timing. compute: forward and backward "
             "kernels; optimizer: the optimiser's kernels; copy: memcpy/memset; exposed comm: NCCL kernels with "
             "nothing else running (they include waiting for the other ranks); idle: no kernel running, the GPU "
             "waits for the host. Traces per rank are in the results folder (`anatomy_traces`).", ""]
    for (precision, batch), sub in rows.groupby(["precision", "batch_per_gpu"], sort=True):
        sub = _order(sub)
        title = f"{precision}, batch {batch}/GPU"
        figs = figure_anatomy(sub, group, f"{group['model'].iloc[0]} step anatomy: {title}", folder,
                              f"{name}-anatomy-{slug(precision)}-b{batch}")
        lines += [f"#### {title}", "", f"![{figs[0].stem}]({figs[0].name})", "",
                  mdtable.markdown(anatomy_table(sub, group)), ""]
        lines += [f"- {s}" for s in anatomy_findings(sub, group)] + [""]
    return lines
