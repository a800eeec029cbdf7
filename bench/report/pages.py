"""Tables and figures that answer "which strategy, at which batch size, at what cost".

`python -m bench report [FILES...]` (or `make plot`) reads results files, keeps rows from
different hardware apart, and writes Markdown and CSV tables, PNG and SVG figures and a
summary, plots/REPORT.md, whose findings are computed from the data.
"""
from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "parabench"  # fixed SVG ids
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

import strategies  # noqa: E402
from bench.cases import results  # noqa: E402
from bench.cases.case import Case, hardware  # noqa: E402
from bench.core.precision import PRECISIONS  # noqa: E402
from bench.measure import envinfo  # noqa: E402
from bench.report import answer  # noqa: E402
from bench.report.frame import (BASELINE, DDP, STRATEGY_ORDER, THREADED, _order, amp_speedups,  # noqa: E402,F401
                                default_inputs, label, load_anatomy, load_frame, same_run, variant)

PRECISION_ORDER = list(PRECISIONS)


_k = answer.rate  # images/s with their significant digits: 19.0k, 47, 0.7


def _status_cell(row) -> str:
    if row["status"] == "skipped":
        return f"skipped: {row['reason']}"
    return f"{row['status']}" + (f": {str(row['reason'])[:60]}" if row["status"] in ("error", "timeout") else "")


CELLS = {
    "images/s (median, p10-p90)": lambda r: f"{_k(r['img_per_s'])} ({_k(r['img_per_s_p10'])}-{_k(r['img_per_s_p90'])})",
    "step time ms (median, p10-p90)": lambda r: f"{r['step_ms_p50']:.2f} ({r['step_ms_p10']:.2f}-{r['step_ms_p90']:.2f})",
    "peak memory per GPU, MiB (max / min over GPUs)": lambda r: (
        f"{r['peak_alloc_mib']:.0f} / {r['peak_alloc_mib_min']:.0f}" if pd.notna(r.get("peak_alloc_mib")) else "n/a (CPU)"),
    "speed-up over single (scaling efficiency)": lambda r: (
        f"x{r['speedup']:.2f} ({100 * r['efficiency']:.0f}%)" if pd.notna(r.get("speedup")) else "no single baseline"),
    "achieved TFLOP/s": lambda r: f"{r['tflops']:.1f}" if pd.notna(r.get("tflops")) else "n/a",
}


def tables(frame: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """One wide table per metric: rows strategy/GPUs/knobs, columns per-GPU batch sizes."""
    out = {}
    for title, cell in CELLS.items():
        cells = [cell(r) if r["status"] == "ok" else _status_cell(r) for r in frame.to_dict("records")]
        wide = frame.assign(cell=cells, row=[label(r) for r in frame.to_dict("records")])
        table = wide.pivot_table(index="row", columns="batch_per_gpu", values="cell", aggfunc="first", sort=False)
        table = table[sorted(table.columns)]  # rows keep the strategy order; batches ascend
        table.columns = [f"batch {c}" for c in table.columns]
        out[title] = table.fillna("not run")
    return out


def caption(frame: pd.DataFrame) -> str:
    first = frame.iloc[0]
    gpus = first["hardware"]
    counts = sorted({int(n) for n in frame["n_gpus"] if n})
    where = f"{gpus}, {'/'.join(map(str, counts))} GPU(s)" if counts else gpus
    soft = f"torch {first['torch']}" + (f", CUDA {first['cuda']}, cuDNN {envinfo.cudnn_version(first['cudnn'])}, "
                                        f"NCCL {first['nccl']}" if first["device"] == "cuda" else "")
    return f"{first['model']} on {where}; {soft}"


def slug(*parts) -> str:
    return re.sub(r"[^a-z0-9]+", "-", "-".join(map(str, parts)).lower()).strip("-")


def _save(fig, folder: Path, name: str) -> list[Path]:
    """PNG and SVG, each written whole or not at all, with no date inside (unchanged results
    give byte-identical figures)."""
    import io

    paths = [folder / f"{name}.png", folder / f"{name}.svg"]
    for path, kwargs in ((paths[0], {"dpi": 110, "metadata": {"Software": None}}), (paths[1], {"metadata": {"Date": None}})):
        buf = io.BytesIO()
        fig.savefig(buf, format=path.suffix[1:], bbox_inches="tight", **kwargs)
        results.atomic_write_bytes(path, buf.getvalue())
    plt.close(fig)
    return paths


COLORS = {name: strategies.get(name).colour for name in STRATEGY_ORDER}
MARKERS = {0: "D", 1: "o", 2: "s", 4: "^", 8: "v"}


def style(row) -> dict:
    """Colour says the strategy, marker the GPU count, line style the knobs."""
    var = row["variant"]
    ls = "-" if not var else "--" if var == "channels_last" else ":"
    return {"color": COLORS.get(row["strategy"], "grey"), "marker": MARKERS.get(int(row["n_gpus"]), "x"), "ls": ls}


def _hatch_repeats(ax, columns) -> None:
    """Bars of one strategy share its colour; hatching tells its GPU counts and knobs apart."""
    seen: dict[str, int] = {}
    bars = [c for c in ax.containers if hasattr(c, "patches")]  # error bars are containers too
    for container, column in zip(bars, columns):
        strategy = column.split(" ")[0]
        hatch = ["", "///", "...", "xxx", "\\\\"][seen.get(strategy, 0) % 5]
        seen[strategy] = seen.get(strategy, 0) + 1
        for patch in container.patches:
            patch.set_hatch(hatch)


def _log2_axis(ax) -> None:
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))


def _wrap(text: str) -> str:
    """Legend labels carry knob lists; wrapped, they stay within their panel."""
    return textwrap.fill(text, 75, subsequent_indent="  ")


def _panels(precisions, title):
    fig, axes = plt.subplots(1, len(precisions), figsize=(6.2 * len(precisions), 4.6), squeeze=False)
    fig.suptitle(title, fontsize=11)
    return fig, axes[0]


def _batch_panels(group: pd.DataFrame, title: str, ylabel: str, draw_line, folder: Path, name: str) -> list[Path]:
    """One panel per precision, one line per strategy/GPUs/knobs against log2 per-GPU batch;
    `draw_line(ax, line_rows, label)` draws one line."""
    precisions = [p for p in PRECISION_ORDER if p in set(group["precision"])]
    fig, axes = _panels(precisions, f"{title} - {caption(group)}")
    for ax, precision in zip(axes, precisions):
        sub = group[(group["precision"] == precision) & (group["status"] == "ok")]
        labels = sub.apply(label, axis=1) if not sub.empty else pd.Series(dtype=str)  # empty apply gives a frame
        for lab, line in sub.groupby(labels, sort=False):
            draw_line(ax, line.sort_values("batch_per_gpu"), _wrap(lab))
        failed = group[(group["precision"] == precision) & group["status"].isin(["oom", "error", "timeout"])]
        for _, r in failed.iterrows():
            ax.annotate(r["status"], (r["batch_per_gpu"], 0), textcoords="offset points", xytext=(0, 5), fontsize=7)
        _log2_axis(ax)
        ax.set_title(precision)
        ax.set_xlabel("batch per GPU (log2)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        # Below the panel: knob lists make long labels that would hide the data.
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    return _save(fig, folder, name)


def primary(group: pd.DataFrame) -> pd.DataFrame:
    """For each strategy, device count and precision, one setting of the knobs: the one with
    the fewest knobs set (then the most batch sizes). The other settings have figures of
    their own (figure_knobs), so that no legend lists every variant."""
    def knobs(variant) -> int:
        return 0 if not variant else str(variant).count(",") + 1

    keep = []
    for _, sub in group.groupby(["strategy", "n_gpus", "precision", group["nnodes"].fillna(1)], sort=False):
        counts = sub.groupby("variant")["batch_per_gpu"].nunique()
        best = sorted(counts.index, key=lambda v: (knobs(v), -counts[v], str(v)))[0]
        keep.append(sub[sub["variant"] == best])
    return pd.concat(keep) if keep else group


def _draw_throughput(ax, line, lab):
    yerr = [line["img_per_s"] - line["img_per_s_p10"], line["img_per_s_p90"] - line["img_per_s"]]
    ax.errorbar(line["batch_per_gpu"], line["img_per_s"], yerr=yerr, capsize=3, label=lab, **style(line.iloc[0]))


def figure_throughput(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    return _batch_panels(primary(group), "Training throughput vs per-GPU batch (fewest knobs; others: knobs figure)",
                         "images/s (median; bars: p10-p90)", _draw_throughput, folder, name)


KNOB_LINES = 8  # lines a knobs panel holds before it is split by GPU count


def figure_knobs(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """Throughput of every knob setting, one panel per strategy and precision that has more
    than one (line style and marker: the knobs; colour: the strategy)."""
    ok = group[group["status"] == "ok"]
    panels = []
    for (strategy, precision), sub in ok.groupby(["strategy", "precision"], sort=False):
        if sub["variant"].nunique() < 2:
            continue
        if sub.groupby(["n_gpus", "variant"]).ngroups <= KNOB_LINES:
            panels.append((f"{strategy}, {precision}", strategy, sub))
            continue
        for gpus, per_count in sub.groupby("n_gpus"):  # too many lines for one legend: a panel per GPU count
            panels.append((f"{strategy}, {precision}, {int(gpus)} GPU", strategy, per_count))
    if not panels:
        return []
    cols = min(3, len(panels))
    rows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols, 6.0 * rows), squeeze=False)
    fig.suptitle(f"Knob settings, each strategy and precision - {caption(group)}", fontsize=11)
    markers, styles = "osD^v<>ph*", ["-", "--", ":", "-."]
    for ax, (title, strategy, sub) in zip(axes.flat, panels):
        for i, ((gpus, variant), line) in enumerate(sub.groupby(["n_gpus", "variant"], sort=True)):
            line = line.sort_values("batch_per_gpu")
            yerr = [line["img_per_s"] - line["img_per_s_p10"], line["img_per_s_p90"] - line["img_per_s"]]
            ax.errorbar(line["batch_per_gpu"], line["img_per_s"], yerr=yerr, capsize=2,
                        color=COLORS.get(strategy, "grey"), marker=markers[i % len(markers)],
                        ls=styles[i % len(styles)], label=_wrap(f"{int(gpus)} GPU: {variant or 'defaults'}"))
        _log2_axis(ax)
        ax.set_title(title)
        ax.set_xlabel("batch per GPU (log2)")
        ax.set_ylabel("images/s")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return _save(fig, folder, name)


def figure_memory(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    group = group[group["peak_alloc_mib"].notna() | (group["status"] != "ok")]
    if group[group["status"] == "ok"].empty:
        return []

    def draw(ax, line, lab):
        (drawn,) = ax.plot(line["batch_per_gpu"], line["peak_alloc_mib"] / 1024, label=lab, **style(line.iloc[0]))
        if (line["peak_alloc_mib_min"] < 0.97 * line["peak_alloc_mib"]).any():
            ax.plot(line["batch_per_gpu"], line["peak_alloc_mib_min"] / 1024, ls="-.", lw=0.8, alpha=0.6,
                    color=drawn.get_color())

    return _batch_panels(primary(group), "Peak memory per GPU (busiest GPU; thin dash-dot: least busy GPU where it "
                         "differs; fewest knobs)", "peak allocated GiB per GPU", draw, folder, name)


def _bar_panel(ax, table: pd.DataFrame, title: str, ylabel: str, reference: float, yerr=None) -> None:
    """Bars per batch (rows of `table`), one per column, named '<strategy> ...': the
    strategy's colour, hatching for its other GPU counts and knobs; a dashed reference line;
    `yerr` (columns x 2 x rows), asymmetric error bars."""
    table = table.set_axis([_wrap(c) for c in table.columns], axis=1)
    colors = [COLORS.get(c.split(" ")[0], "grey") for c in table.columns]
    table.plot.bar(ax=ax, rot=0, width=0.8, color=colors, edgecolor="white", yerr=yerr, capsize=2,
                   error_kw={"elinewidth": 0.8, "ecolor": "black"})
    _hatch_repeats(ax, table.columns)
    ax.axhline(reference, color="black", lw=0.8, ls="--")
    ax.set_title(title)
    ax.set_xlabel("batch per GPU")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))  # after hatching: shows it
    ax.grid(alpha=0.3, axis="y")


def _bar_figure(frame: pd.DataFrame, title: str, names, value: str, panel_title, ylabel: str, reference: float,
                folder: Path, name: str, bounds: tuple[str, str] | None = None) -> list[Path]:
    """One bar panel per precision: `value` per batch, one bar per `names(rows)`; `bounds`,
    the columns of the value's low and high ends (error bars)."""
    import numpy as np

    precisions = [p for p in PRECISION_ORDER if p in set(frame["precision"])]
    fig, axes = _panels(precisions, title)
    for ax, precision in zip(axes, precisions):
        p = frame[frame["precision"] == precision].assign(name=lambda f: names(f))

        def pivot(column):
            return p.pivot_table(index="batch_per_gpu", columns="name", values=column, aggfunc="first",
                                 sort=False).sort_index()

        table = pivot(value)
        yerr = None
        if bounds:
            low, high = (pivot(c).reindex(index=table.index, columns=table.columns) for c in bounds)
            yerr = np.stack([(table - low).clip(lower=0).to_numpy().T,
                             (high - table).clip(lower=0).to_numpy().T], axis=1)
        _bar_panel(ax, table, panel_title(precision), ylabel, reference, yerr)
    return _save(fig, folder, name)


def figure_efficiency(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    sub = group[(group["status"] == "ok") & (group["strategy"] != BASELINE) & group["efficiency"].notna()
                & (group["n_gpus"] > 1)]
    if sub.empty:
        return []
    sub = primary(sub)  # knob variants: the knobs figure and the tables
    return _bar_figure(sub.assign(efficiency_pct=sub["efficiency"] * 100, efficiency_lo_pct=sub["efficiency_lo"] * 100,
                                  efficiency_hi_pct=sub["efficiency_hi"] * 100),
                       f"Scaling efficiency (speed-up over single / GPUs; bars: both p10-p90 spreads; fewest knobs) - "
                       f"{caption(group)}",
                       lambda p: p.apply(label, axis=1), "efficiency_pct", lambda precision: precision,
                       "scaling efficiency, % (100% = perfect)", 100, folder, name,
                       bounds=("efficiency_lo_pct", "efficiency_hi_pct"))


def figure_amp(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    merged = amp_speedups(group)
    if merged.empty:
        return []
    merged = primary(merged)  # knob variants: the knobs figure and the tables

    def names(p):
        return p.apply(lambda r: f"{r['strategy']} ({int(r['n_gpus'])} GPU) "
                                 f"[{r['variant'] or 'default'} vs fp32 {r['variant_fp32'] or 'default'}]", axis=1)

    return _bar_figure(merged, f"Mixed-precision speed-up over fp32 (fewest knobs) - {caption(group)}", names, "amp_speedup",
                       lambda precision: f"{precision} / fp32", "throughput ratio", 1, folder, name)


def figure_scaling(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """images/s against GPU count for each multi-device strategy and setting, one panel per
    precision, anchored at `single` of the same run and settings (hollow marker at 1 GPU, the
    row's own same-run baseline); dotted: linear from it."""
    ok = group[(group["status"] == "ok") & (group["n_gpus"] > 0) & (group["strategy"] != BASELINE)]
    keys = same_run(["precision", "variant", "batch_per_gpu"], group)
    curves = []
    for (strategy, *key), line in ok.groupby(["strategy"] + keys):
        bases = line["single_img_per_s"].dropna() if "single_img_per_s" in line else pd.Series(dtype=float)
        base = bases.iloc[0] if len(bases) else None
        # A curve needs two device counts of its own or a count beyond 2: plain 2-GPU cases
        # are in the efficiency figure already.
        if line["n_gpus"].nunique() > 1 or line["n_gpus"].max() > 2:
            curves.append((strategy, key, line.sort_values("date").drop_duplicates(["n_gpus", "nnodes"], keep="last"),
                           base))
    if not curves:
        return []
    precisions = [p for p in PRECISION_ORDER if any(c[1][0] == p for c in curves)]
    fig, axes = plt.subplots(1, len(precisions), figsize=(6.5 * len(precisions), 5), squeeze=False)
    for ax, precision in zip(axes[0], precisions):
        counts = set()
        for strategy, (_, var, batch, *_), line, base in [c for c in curves if c[1][0] == precision]:
            line = line.sort_values("n_gpus")
            color = COLORS.get(strategy, "grey")
            hosts = line["nnodes"].fillna(1)
            one, many = line[hosts <= 1], line[hosts > 1]
            series = f"{strategy}{' ' + var if var else ''}, {batch}/GPU"
            xs, ys = list(one["n_gpus"]), list(one["img_per_s"])
            if base is not None:
                xs, ys = [1] + xs, [base] + ys  # the curve starts at its own single
                ax.plot([1], [base], marker="o", mfc="none", color=color, ls="none")
                ax.plot(sorted({1, *line["n_gpus"]}), [base * x for x in sorted({1, *line["n_gpus"]})], ls=":",
                        color="grey", lw=0.8)
                counts.add(1)
            first_own = 1 if base is not None else 0  # single's point is drawn hollow above
            ax.plot(xs, ys, marker="o", color=color, ls="-" if not var else "--", label=_wrap(series),
                    markevery=list(range(first_own, len(xs))))
            for nnodes, across in many.groupby("nnodes"):  # across hosts: squares, a curve of their own
                ax.plot(across["n_gpus"], across["img_per_s"], marker="s", ms=10, mfc="none", mew=1.5, zorder=4,
                        color=color, ls=":", label=_wrap(f"{series}, across {int(nnodes)} hosts"))
            counts |= set(line["n_gpus"])
        ax.set_xticks(sorted(counts))
        ax.set_xlabel("GPUs")
        ax.set_ylabel("images/s (hollow: single; dotted: linear from single)")
        ax.set_title(precision)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"Scaling 1 -> N GPUs - {caption(group)}", fontsize=10)
    return _save(fig, folder, name)


def findings(group: pd.DataFrame) -> list[str]:
    """Plain sentences computed from the data of one hardware/model group."""
    out = []
    ok = group[group["status"] == "ok"]
    for precision in [p for p in PRECISION_ORDER if p in set(group["precision"])]:
        p = ok[ok["precision"] == precision]
        for batch in sorted(p["batch_per_gpu"].unique()):
            b = p[p["batch_per_gpu"] == batch].sort_values("img_per_s", ascending=False)
            if b["strategy"].nunique() > 1:  # "fastest" among one strategy's settings is not a finding
                top, second = b.iloc[0], b.iloc[1]
                overlap = top["img_per_s_p10"] <= second["img_per_s_p90"]
                out.append(f"{precision}, batch {batch}/GPU: fastest is {label(top)} at {_k(top['img_per_s'])} img/s"
                           f"{' (within the spread of the next, ' + label(second) + ')' if overlap else ''}.")
        pairs = answer.reference_pairs(p)
        for threaded in sorted({r["strategy"] for r, _ in pairs}):
            ratios = [(r["batch_per_gpu"], x) for r, x in pairs if r["strategy"] == threaded]
            if min(x for _, x in ratios) < 0.9:
                worst = min(ratios, key=lambda t: t[1])
                out.append(f"{precision}: {threaded} reaches {100 * min(x for _, x in ratios):.0f}-"
                           f"{100 * max(x for _, x in ratios):.0f}% of DDP's throughput on the same GPUs "
                           f"(worst at batch {worst[0]}/GPU; batches {', '.join(str(b) for b, _ in ratios)}).")
    for precision, prow in group.groupby("precision", sort=False):
        fits = []
        for lab, rows in prow.groupby(prow.apply(label, axis=1), sort=False):
            fit, oom = rows[rows["status"] == "ok"]["batch_per_gpu"], rows[rows["status"] == "oom"]["batch_per_gpu"]
            if len(fit):
                fits.append(f"{lab} {int(fit.max())}" + (f" (OOM at {int(oom.min())})" if len(oom) else ""))
        if fits:
            out.append(f"{precision}: largest batch per GPU that ran: " + "; ".join(fits) + ".")
    return out


def _step_ms(row) -> str:
    return f"{row['step_ms_p50']:.1f} ms/step (p10-p90 {row['step_ms_p10']:.1f}-{row['step_ms_p90']:.1f})"


def cudnn_effect(frame: pd.DataFrame) -> list[str]:
    """The DataParallel cuDNN-autotuning effect, where both settings were measured."""
    out = []
    ok = frame[(frame["status"] == "ok") & frame["strategy"].isin(THREADED)]
    keys = ["hardware", "model", "precision", "strategy", "n_gpus", "batch_per_gpu"]
    for key, g in ok.groupby(keys):
        on = g[g["cudnn_benchmark"].map(_flag)]
        off = g[~g["cudnn_benchmark"].map(_flag)]
        if len(on) and len(off):
            on, off = on.iloc[0], off.iloc[0]
            out.append(f"{key[3]}, {key[1]} {key[2]}, {key[4]} GPUs, batch {key[5]}/GPU on {key[0]}: "
                       f"cudnn.benchmark on {_step_ms(on)} ({_k(on['img_per_s'])} img/s), "
                       f"off {_step_ms(off)} ({_k(off['img_per_s'])} img/s): "
                       f"{off['img_per_s'] / on['img_per_s']:.0f}x faster off.")
    return out


def peak_rates(paths: list[Path]) -> dict[str, dict]:
    """GPU name -> the newest `python -m bench peak` probe (*.probe.json) beside the inputs."""
    found = {}
    for probe in sorted({f for p in paths for f in Path(p).parent.glob("*.probe.json")}, key=lambda f: f.stat().st_mtime):
        try:
            doc = json.loads(probe.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and doc.get("gpu") and doc.get("bf16_matmul_tflops"):
            found[doc["gpu"]] = {**doc, "file": probe.name}
    return found


def achieved_vs_peak(frame: pd.DataFrame, peaks: dict[str, dict]) -> list[str]:
    """Markdown: each strategy's best achieved TFLOP/s per GPU against the measured dense bf16 rate."""
    lines = []
    for gpu, peak in peaks.items():
        ok = frame[(frame["status"] == "ok") & (frame["gpu_name"] == gpu) & frame["tflops"].notna()]
        if ok.empty:
            continue
        ok = ok.assign(per_gpu=ok["tflops"] / ok["n_gpus"].clip(lower=1))
        rows = []
        for strategy, g in ok.groupby("strategy", sort=False):
            best = g.loc[g["per_gpu"].idxmax()]
            rows.append({"strategy": strategy, "best case": f"{best['model']} {best['precision']}, batch "
                         f"{int(best['batch_per_gpu'])}/GPU, {int(best['n_gpus'])} GPU"
                         f"{', ' + best['variant'] if best['variant'] else ''}",
                         "TFLOP/s (all GPUs)": round(best["tflops"], 1), "TFLOP/s per GPU": round(best["per_gpu"], 1),
                         "% of bf16 peak": round(100 * best["per_gpu"] / peak["bf16_matmul_tflops"], 1)})
        table = pd.DataFrame(rows).sort_values("TFLOP/s per GPU", ascending=False)
        lines += [f"## Achieved TFLOP/s on {gpu} against its dense bf16 matrix rate", "",
                  f"Dense matrix rates measured by `python -m bench peak` ({peak['file']}): "
                  + ", ".join(f"{k} {peak[f'{k}_matmul_tflops']:.0f}" for k in ("bf16", "fp16", "tf32", "fp32")
                              if peak.get(f"{k}_matmul_tflops"))
                  + " TFLOP/s. Training FLOPs per image come from "
                  "torch.utils.flop_counter (forward and backward); each strategy's best case per GPU:", "",
                  table.to_markdown(index=False), ""]
    return lines


# Parameters of each workload (bench/workloads/__init__.py; a test checks these against the built models).
PARAMETERS = {"resnet18": 11_689_512, "resnet18-small": 11_172_810}
SHARDED = {name: strategies.get(name).shards for name in STRATEGY_ORDER if strategies.get(name).shards}


def memory_section(group: pd.DataFrame) -> list[str]:
    """Per-GPU peak memory of the sharded strategies against DDP at equal batch, GPUs,
    precision and layout (same run), with what sharding can save at most: the part of the
    model state (fp32 weights, gradients and SGD momentum) it splits, (N-1)/N of it."""
    model = group["model"].iloc[0]
    pairs = answer.sharding_pairs(group[group["status"] == "ok"])
    if model not in PARAMETERS or not pairs:
        return []
    tensor_mib = PARAMETERS[model] * 4 / 2**20  # one fp32 copy of the parameters
    state = {"optimizer": tensor_mib, "all": 3 * tensor_mib}  # momentum; weights + gradients + momentum
    rows = []
    for r, base in pairs:
        n = int(base["n_gpus"])
        rows.append({"precision": r["precision"], "GPUs": n, "batch/GPU": int(r["batch_per_gpu"]),
                     "case": label(r), "peak MiB": f"{r['peak_alloc_mib']:.0f}",
                     "ddp peak MiB": f"{base['peak_alloc_mib']:.0f}",
                     "saved MiB": f"{base['peak_alloc_mib'] - r['peak_alloc_mib']:.0f}",
                     "at most MiB": f"{state[SHARDED[r['strategy']]] * (n - 1) / n:.0f}",
                     "images/s vs ddp": f"{100 * r['img_per_s'] / base['img_per_s']:.0f}% "
                                        f"({100 * r['img_per_s_p10'] / base['img_per_s_p90']:.0f}-"
                                        f"{100 * r['img_per_s_p90'] / base['img_per_s_p10']:.0f})"})
    share, at = max((((b["peak_alloc_mib"] - 3 * tensor_mib) / b["peak_alloc_mib"], b) for _, b in pairs),
                    key=lambda t: t[0])
    what = {"optimizer": f"the momentum ({tensor_mib:.0f} MiB)", "all": "all three"}
    who = "; ".join(f"{name} shards {what[kind]}" for name, kind in SHARDED.items())
    return ["## Memory, explained: sharding against DDP", "",
            f"{model} has {PARAMETERS[model] / 1e6:.2f} M parameters: its model state (fp32 weights, gradients and "
            f"SGD momentum) is {3 * tensor_mib:.0f} MiB per replica. {who}; on N GPUs a strategy can save at most "
            "(N-1)/N of what it shards, per GPU ('at most'). The rest of the peak is activations and workspace, "
            f"which no strategy here shards: up to {100 * share:.0f}% of ddp's peak ({label(at)}, {at['precision']}, "
            f"batch {int(at['batch_per_gpu'])}/GPU). Where the saving exceeds the bound or is negative, the "
            "difference is the strategies' own buffers (DDP's gradient buckets, gathered parameters).", "",
            pd.DataFrame(rows).to_markdown(index=False), ""]


READING_GUIDE = (
    "images/s is the global batch over the median step time, with the p10-p90 spread over every timed step of "
    "every trial. Speed-up and efficiency compare with `single` at the same per-GPU batch (weak scaling), "
    "measured in the same results file; efficiency is speed-up over the GPU count, all hosts together. Memory is "
    "the largest `torch.cuda.max_memory_allocated` of the GPUs. A tie: the two spreads overlap. Rows measured on "
    "different hardware are never compared.")


def model_page(group: pd.DataFrame, anatomy: pd.DataFrame, out: Path, name: str) -> list[str]:
    """The details of one hardware/model: figures, findings, the step anatomy and every table."""
    hardware, model = group["hardware"].iloc[0], group["model"].iloc[0]
    lines = [f"# {model} on {hardware}", "", f"_{caption(group)}_", "", "[Back to the answer](../REPORT.md)", "",
             READING_GUIDE, ""]
    figs = []
    figs += figure_throughput(group, out, f"{name}-throughput")
    figs += figure_knobs(group, out, f"{name}-knobs")
    figs += figure_memory(group, out, f"{name}-memory")
    figs += figure_efficiency(group, out, f"{name}-efficiency")
    figs += figure_amp(group, out, f"{name}-amp-speedup")
    figs += figure_scaling(group, out, f"{name}-scaling")
    lines += [f"![{p.stem}]({p.name})" for p in figs if p.suffix == ".png"] + [""]
    lines += ["## Findings", ""] + [f"- {s}" for s in findings(group)] + [""]
    lines += memory_section(group)
    if not anatomy.empty:
        lines += anatomy_section(anatomy[(anatomy["hardware"] == hardware) & (anatomy["model"] == model)], out, name)
    for precision in [p for p in PRECISION_ORDER if p in set(group["precision"])]:
        sub = group[group["precision"] == precision]
        for title, table in tables(sub).items():
            lines += [f"## {precision}: {title}", "", table.to_markdown(), ""]
            results.atomic_write_bytes(out / f"{slug(name, precision, title.split(' (')[0].split(',')[0])}.csv",
                                       table.to_csv().encode())
    # The page lives one folder down from the figures.
    return [re.sub(r"^(!\[[^]]*\]\()", r"\1../", line) if line.startswith("![") else
            line[1:] if line.startswith("###") else line for line in lines]


def write_report(paths: list[Path], out: Path) -> Path:
    """plots/REPORT.md, the answer on its first screen, and one details page per hardware and
    model (plots/<hardware>/<model>.md) with the figures and every table."""
    frame = load_frame(paths)
    anatomy = load_anatomy(paths)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# parabench report: which strategy, at which batch size, at what cost", "",
             f"From {len(paths)} results file(s), {len(frame)} cases (`python -m bench report`). For each hardware, "
             "model, precision and device count: the fastest case at each per-GPU batch, what it gives and costs, "
             "and the fastest other strategy. " + READING_GUIDE, ""]
    for (hw, model), group in frame.groupby(["hardware", "model"], sort=False):
        group = _order(group)
        name = slug(hw, model)
        page = out / slug(hw) / f"{slug(model)}.md"
        page.parent.mkdir(parents=True, exist_ok=True)
        results.atomic_write_bytes(page, ("\n".join(model_page(group, anatomy, out, name)) + "\n").encode())
        lines += [f"## {model} on {hw}", ""]
        for precision, where, sub in answer.answer_groups(group):
            lines += [f"**{precision}, {where}**", "", answer.answer_table(sub).to_markdown(index=False), ""]
        lines += [f"- {s}" for s in answer.sentences(group)]
        lines += ["", f"Details, figures and every table: [{model} on {hw}]({page.parent.name}/{page.name})"
                  f" (_{caption(group)}_)", ""]
    lines += achieved_vs_peak(frame, peak_rates(paths))
    effect = cudnn_effect(frame)
    if effect:
        lines += ["## DataParallel and cuDNN autotuning", "",
                  "DataParallel runs each replica in a new Python thread every step; cuDNN's plan cache is "
                  "thread-local, so with `cudnn.benchmark` on every step autotunes every convolution again. "
                  "parabench's default (`--cudnn-benchmark auto`) turns it off for dp, dp-fn and dp-manual and on "
                  "for the rest; every row records the setting.", ""] + [f"- {s}" for s in effect] + [""]
    report = out / "REPORT.md"
    results.atomic_write_bytes(report, ("\n".join(lines) + "\n").encode())
    from bench.report import html

    html.write_html(out)
    return report


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
        "exposed comm per device": rows["anatomy_exposed_comm_ms_per_device"].fillna("").str.replace(";", "; ").tolist(),
    })
    return table


def anatomy_findings(rows: pd.DataFrame, every: pd.DataFrame) -> list[str]:
    """Sentences computed from the breakdowns of one model/precision/batch."""
    out = []

    def parts(r):
        return {p: r[f"anatomy_{p}_ms"] for p in ANATOMY_PARTS}

    eager = rows[rows["execution"] == "eager"]
    for _, r in eager[(eager["strategy"] == DDP)].iterrows():
        same = answer.twins(eager, r, ("channels_last",), strategy=BASELINE)  # profiled in the same run
        if same.empty:
            continue
        # The baseline with the same optimiser kernels where there is one.
        b = same[same["sgd_impl"] == r["sgd_impl"]].iloc[0] if (same["sgd_impl"] == r["sgd_impl"]).any() else same.iloc[0]
        delta = {p: parts(r)[p] - parts(b)[p] for p in ANATOMY_PARTS}
        extra = r["anatomy_step_ms"] - b["anatomy_step_ms"]
        ranked = sorted(delta.items(), key=lambda kv: -kv[1])
        out.append(f"{label(r)} takes {extra:+.2f} ms per profiled step against {label(b)}: "
                   + ", ".join(f"{p.replace('_', ' ')} {v:+.2f}" for p, v in ranked) + " ms.")
    for _, r in eager[~eager["strategy"].isin([BASELINE, DDP])].iterrows():
        share = {p: 100 * parts(r)[p] / r["anatomy_step_ms"] for p in ANATOMY_PARTS}
        out.append(f"{label(r)}: idle {share['idle']:.0f}% of its step, copies {share['copy']:.0f}%, "
                   f"exposed communication {share['exposed_comm']:.0f}%, compute {share['compute']:.0f}%.")
    for _, r in eager.iterrows():
        graph = _launch_free(r, every)
        busy = r["anatomy_step_ms"] - r["anatomy_idle_ms"]
        if r["anatomy_idle_ms"] > 0.5 * r["anatomy_step_ms"]:
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
                  anatomy_table(sub, group).to_markdown(index=False), ""]
        lines += [f"- {s}" for s in anatomy_findings(sub, group)] + [""]
    return lines
