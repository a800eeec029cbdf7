"""The report's figures: throughput, knob settings, memory, scaling efficiency, mixed
precision and scaling over GPU counts, one panel per precision, as PNG and SVG written with
no date inside (unchanged results give byte-identical files)."""
from __future__ import annotations

import re
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "parabench"  # fixed SVG ids
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

import strategies  # noqa: E402
from bench.cases import fileio, ranking  # noqa: E402
from bench.core.precision import PRECISIONS  # noqa: E402
from bench.measure import envinfo  # noqa: E402
from bench.report.frame import amp_speedups  # noqa: E402
from bench.report.labels import tokens  # noqa: E402
from bench.workloads.data import unit_of  # noqa: E402

PRECISION_ORDER = list(PRECISIONS)


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
    for path, kwargs in ((paths[0], {"dpi": 110, "metadata": {"Software": None}}),
                         (paths[1], {"metadata": {"Date": None}})):
        buf = io.BytesIO()
        fig.savefig(buf, format=path.suffix[1:], bbox_inches="tight", **kwargs)
        fileio.atomic_write_bytes(path, buf.getvalue())
    plt.close(fig)
    return paths


MARKERS = {0: "D", 1: "o", 2: "s", 4: "^", 8: "v"}


def colour(strategy: str) -> str:
    """The strategy's own colour, asked of the registry; grey for one this checkout does not know."""
    declared = strategies.info(strategy)
    return declared.colour if declared is not None else "grey"


def style(row) -> dict:
    """Colour says the strategy, marker the GPU count, line style the knobs."""
    var = row["variant"]
    ls = "-" if not var else "--" if var == "channels_last" else ":"
    return {"color": colour(row["strategy"]), "marker": MARKERS.get(int(row["n_gpus"]), "x"), "ls": ls}


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


def batch_axis(frame: pd.DataFrame) -> str:
    """What a batch is per on this figure's x axis: a GPU, or on the CPU a replica."""
    return "batch per GPU" if frame["n_gpus"].fillna(0).max() > 0 else "batch per replica"


def _log2_axis(ax, ticks) -> None:
    """A log-2 axis labelled at the values measured, at most 12 of them: a file of a thousand
    batches spent most of its report's time laying out labels one cannot read."""
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ticks = sorted(set(ticks))
    step = -(-len(ticks) // 12)
    ax.set_xticks(ticks[::step] + ([ticks[-1]] if (len(ticks) - 1) % step else []))
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())


def _wrap(text: str) -> str:
    """Legend labels carry knob lists; wrapped, they stay within their panel."""
    return textwrap.fill(text, 75, subsequent_indent="  ")


def _panels(precisions, title):
    """A row of panels that fills the canvas, the title at its top left; a title that ends in
    " - <caption>" has the caption as a footnote."""
    fig, axes = plt.subplots(1, len(precisions), figsize=(max(11.0, 6.0 * len(precisions) + 3), 4.8), squeeze=False)
    head, _, foot = title.rpartition(" - ") if " - " in title else (title, "", "")
    fig.suptitle(head, fontsize=12, x=0.01, ha="left")
    if foot:
        fig.text(0.01, 0.0, textwrap.fill(foot, 160), fontsize=8, color="dimgray", va="top")
    return fig, axes[0]


def primary(group: pd.DataFrame) -> pd.DataFrame:
    """For each strategy, device count and precision, one setting of the knobs: the fastest
    (the highest throughput it reached, as the answer ranks them; then the fastest knobs). The
    mixed-precision figure compares settings this way; the others draw the envelope."""
    keep = []
    ok = group[group["status"] == "ok"]
    for _, sub in group.groupby(["strategy", "n_gpus", "precision", group["nnodes"].fillna(1)], sort=False):
        fast = ok.loc[ok.index.intersection(sub.index)].groupby("variant")["items_per_s"].max()
        best = (sorted(fast.index, key=lambda v: (-fast[v], str(v).count(","), str(v)))[0] if len(fast)
                else sorted(sub["variant"].unique(), key=lambda v: (str(v).count(","), str(v)))[0])
        keep.append(sub[sub["variant"] == best])
    return pd.concat(keep) if keep else group


LINE = ["strategy", "n_gpus", "hosts", "precision"]  # one line of a figure: a strategy where it ran


def envelope(group: pd.DataFrame) -> pd.DataFrame:
    """Each strategy at its best measured configuration at each batch: per strategy, device
    count, hosts, precision and per-GPU batch, the ok row with the highest median throughput among
    its executions and knobs (a row whose process was stopped or starved only where nothing else
    ran there), with `config` (its settings, short) and `vs_single` (its throughput over the best
    steady `single` of that precision and batch in the same run: the answer's speed-up where the
    knobs differ; none where that run has no such `single`)."""
    ok = group[group["status"] == "ok"].reset_index(drop=True)
    if ok.empty:
        return ok.assign(hosts=[], config=[], vs_single=[])
    records = ok.to_dict("records")
    ok = ok.assign(hosts=ok["nnodes"].fillna(1).astype(int) if "nnodes" in ok else 1,
                   _steady=[not ranking.stopped(r) for r in records],
                   _run=ok["source"] if "source" in ok else "")
    best = ok.loc[ok.sort_values(["_steady", "items_per_s"]).groupby([*LINE, "batch_per_gpu"], sort=False)
                  .tail(1).index]
    singles = ok[(ok["strategy"] == strategies.baseline()) & ok["_steady"]]
    base = singles.groupby(["_run", "precision", "batch_per_gpu"])["items_per_s"].max()
    single = [base.get((run, p, b)) for run, p, b in zip(best["_run"], best["precision"], best["batch_per_gpu"])]
    best = best.drop(columns=["_steady", "_run"])
    return _order_lines(best.assign(config=[tokens(r) for r in best.to_dict("records")],
                                    vs_single=[r / s if s else None for r, s in zip(best["items_per_s"], single)]))


def _order_lines(frame: pd.DataFrame) -> pd.DataFrame:
    rank = {s: i for i, s in enumerate(strategies.names())}
    return frame.assign(_r=frame["strategy"].map(lambda s: rank.get(s, 99))).sort_values(
        ["_r", "n_gpus", "hosts", "precision", "batch_per_gpu"]).drop(columns="_r")


def _where(line: pd.DataFrame) -> str:
    first = line.iloc[0]
    hosts = f" x {int(first['hosts'])} hosts" if first["hosts"] > 1 else ""
    return (f"{int(first['n_gpus'])} GPU{hosts}" if first["n_gpus"] else f"CPU x{int(first['n_replicas'])}")


def _k(x, _=None) -> str:
    return f"{x / 1000:g}k" if x >= 1000 else f"{x:g}"


def _envelope_panels(rows: pd.DataFrame, title: str, ylabel: str, value: str, bounds, picks, folder: Path,
                     name: str, caption_text: str) -> list[Path]:
    """One panel per precision; one line per strategy where it ran (colour: the strategy; marker:
    its device count), each point that strategy's best configuration at that batch. The legend
    names a configuration that holds along the whole line; where it changes, the new one is
    written at the point; the answer's picks are stars."""
    precisions = [p for p in PRECISION_ORDER if p in set(rows["precision"])]
    fig, axes = plt.subplots(1, len(precisions), figsize=(max(9.0, 5.0 * len(precisions)), 4.3), squeeze=False)
    for ax, precision in zip(axes[0], precisions):
        for _, line in rows[rows["precision"] == precision].groupby(LINE, sort=False):
            line = line.sort_values("batch_per_gpu")
            first = line.iloc[0]
            look = {"color": colour(first["strategy"]), "marker": MARKERS.get(int(first["n_gpus"]), "x")}
            configs = list(line["config"])
            same = len(set(configs)) == 1
            lab = f"{first['strategy']} ({_where(line)})" + (f": {configs[0]}" if same else "")
            yerr = None if bounds is None else [line[value] - line[bounds[0]], line[bounds[1]] - line[value]]
            ax.errorbar(line["batch_per_gpu"], line[value], yerr=yerr, capsize=3, label=lab, ls="-", lw=1.4, **look)
            if not same:
                shown = None
                for r in line.to_dict("records"):
                    if r["config"] != shown:
                        ax.annotate(r["config"], (r["batch_per_gpu"], r[value]), textcoords="offset points",
                                    xytext=(5, 5), fontsize=8, color=look["color"])
                        shown = r["config"]
        starred = [p for p in picks if p["precision"] == precision and p.get(value) is not None]
        if starred:
            ax.scatter([p["batch_per_gpu"] for p in starred], [p[value] for p in starred], marker="*", s=260,
                       c=[colour(p["strategy"]) for p in starred], edgecolors="black", linewidths=0.8, zorder=5,
                       label="the answer's pick")
        _log2_axis(ax, rows["batch_per_gpu"])
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_k))
        ax.set_title(precision, fontsize=10)
        ax.set_xlabel(batch_axis(rows))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    named = {}  # one legend for every panel, to their right: a line's label is the same in each
    for ax in axes[0]:
        for handle, text in zip(*ax.get_legend_handles_labels()):
            named.setdefault(text, handle)
    fig.tight_layout(rect=(0, 0.02, 1, 0.93))
    fig.legend(list(named.values()), list(named), fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.9))
    fig.suptitle(title, fontsize=12, x=0.01, ha="left")
    fig.text(0.01, 0.0, textwrap.fill(caption_text, 160), fontsize=8, color="dimgray", va="top")
    return _save(fig, folder, name)


def _points_csv(rows: pd.DataFrame, picks: list[dict], path: Path, value: str) -> None:
    """What a figure draws, as a table: one line per point."""
    chosen = {(p["precision"], p["strategy"], p["devices"], p["batch_per_gpu"]) for p in picks}
    table = pd.DataFrame({
        "precision": rows["precision"], "strategy": rows["strategy"], "gpus": rows["n_gpus"].astype(int),
        "hosts": rows["hosts"], "batch_per_gpu": rows["batch_per_gpu"].astype(int), "configuration": rows["config"],
        value: rows[value], **({f"{value}_p10": rows[f"{value}_p10"], f"{value}_p90": rows[f"{value}_p90"]}
                               if f"{value}_p10" in rows else {}),
        "pick": [(p, s, int(n or r), int(b)) in chosen for p, s, n, r, b in
                 zip(rows["precision"], rows["strategy"], rows["n_gpus"], rows["n_replicas"], rows["batch_per_gpu"])]})
    fileio.atomic_write_bytes(path, table.to_csv(index=False).encode())


def rate_words(rows: pd.DataFrame) -> str:
    """The axis of a rate: "images/s", "tokens/s" (what the rows count; a figure shows one model)."""
    ok = rows[rows["status"] == "ok"] if "status" in rows else rows
    # The unit column alone: every row made into a dict took seconds on a file of 20,000 rows.
    units = sorted({unit_of({"unit": u}).name for u in (ok["unit"] if "unit" in ok else [None])}) or ["images"]
    return " or ".join(f"{u}/s" for u in units)


def figure_throughput(group: pd.DataFrame, folder: Path, name: str, picks: list[dict] | None = None) -> list[Path]:
    """Throughput (images/s, tokens/s) against the per-GPU batch: each strategy at its best configuration measured at
    each batch (the envelope over executions and knobs), the answer's picks starred; the points
    also as <name>.csv."""
    rows = envelope(group)
    if rows.empty:
        return []
    picks = [p for p in (picks or []) if p.get("strategy")]
    _points_csv(rows, picks, folder / f"{name}.csv", "items_per_s")
    others = "; every setting: the knobs figure" if _knob_panels(group) else ""
    return _envelope_panels(rows, f"Throughput: each strategy at its best configuration per batch{others}",
                            f"{rate_words(group)} (median; bars: p10-p90)", "items_per_s",
                            ("items_per_s_p10", "items_per_s_p90"),
                            picks, folder, name, caption(group))


KNOB_LINES = 8  # lines a knobs panel holds before it is split by GPU count


def _knob_panels(group: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, strategy, rows) of each panel of the knobs figure; none where no strategy ran
    more than one setting."""
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
    return panels


def figure_knobs(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """Throughput of every knob setting, one panel per strategy and precision that has more
    than one (line style and marker: the knobs; colour: the strategy)."""
    panels = _knob_panels(group)
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
            yerr = [line["items_per_s"] - line["items_per_s_p10"], line["items_per_s_p90"] - line["items_per_s"]]
            ax.errorbar(line["batch_per_gpu"], line["items_per_s"], yerr=yerr, capsize=2,
                        color=colour(strategy), marker=markers[i % len(markers)],
                        ls=styles[i % len(styles)], label=_wrap(f"{int(gpus)} GPU: {variant or 'defaults'}"))
        _log2_axis(ax, sub["batch_per_gpu"])
        ax.set_title(title)
        ax.set_xlabel(f"{batch_axis(sub)} (log2)")
        ax.set_ylabel(rate_words(sub))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    return _save(fig, folder, name)


def figure_memory(group: pd.DataFrame, folder: Path, name: str, picks: list[dict] | None = None) -> list[Path]:
    """Peak memory per GPU (the busiest) of each strategy's best configuration at each batch,
    the configurations of the throughput figure; the answer's picks starred."""
    rows = envelope(group)
    rows = rows[rows["peak_alloc_mib"].notna()] if "peak_alloc_mib" in rows else rows.iloc[0:0]
    if rows.empty:
        return []
    rows = rows.assign(peak_gib=rows["peak_alloc_mib"] / 1024)
    picks = [{**p, "peak_gib": p["peak_alloc_mib"] / 1024} for p in (picks or [])
             if p.get("strategy") and p.get("peak_alloc_mib") is not None]
    title = "Peak memory per GPU (the busiest): each strategy at its best configuration per batch"
    return _envelope_panels(rows, title, "peak allocated GiB per GPU", "peak_gib", None, picks, folder, name,
                            caption(group))


def _bar_panel(ax, table: pd.DataFrame, title: str, ylabel: str, reference: float, yerr=None,
               xlabel: str = "batch per GPU") -> None:
    """Bars per batch (rows of `table`), one per column, named '<strategy> ...': the
    strategy's colour, hatching for its other GPU counts and knobs; a dashed reference line;
    `yerr` (columns x 2 x rows), asymmetric error bars."""
    table = table.set_axis([_wrap(c) for c in table.columns], axis=1)
    colors = [colour(c.split(" ")[0]) for c in table.columns]
    table.plot.bar(ax=ax, rot=0, width=0.8, color=colors, edgecolor="white", yerr=yerr, capsize=2,
                   error_kw={"elinewidth": 0.8, "ecolor": "black"})
    _hatch_repeats(ax, table.columns)
    ax.axhline(reference, color="black", lw=0.8, ls="--")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # after hatching: shows it
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
        _bar_panel(ax, table, panel_title(precision), ylabel, reference, yerr, batch_axis(frame))
    fig.tight_layout(rect=(0, 0.02, 1, 0.97))
    return _save(fig, folder, name)


def figure_efficiency(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """Scaling efficiency of each multi-device strategy at its best configuration per batch,
    over the best `single` of that batch (the answer's speed-up over the GPU count)."""
    rows = envelope(group)
    rows = rows[(rows["n_gpus"] > 1) & rows["vs_single"].notna()] if len(rows) else rows
    if rows.empty:
        return []
    single = rows["items_per_s"] / rows["vs_single"]
    rows = rows.assign(efficiency_pct=100 * rows["vs_single"] / rows["n_gpus"],
                       efficiency_lo_pct=100 * rows["items_per_s_p10"] / single / rows["n_gpus"],
                       efficiency_hi_pct=100 * rows["items_per_s_p90"] / single / rows["n_gpus"])
    return _bar_figure(rows, f"Scaling efficiency: each strategy at its best configuration per batch, over the best "
                       f"{strategies.baseline()} (bars: p10-p90) - {caption(group)}",
                       lambda p: p.apply(lambda r: f"{r['strategy']} ({int(r['n_gpus'])} GPU)", axis=1),
                       "efficiency_pct", lambda precision: precision, "scaling efficiency, % (100% = perfect)", 100,
                       folder, name, bounds=("efficiency_lo_pct", "efficiency_hi_pct"))


def figure_amp(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    merged = amp_speedups(group)
    if merged.empty:
        return []
    merged = primary(merged)  # knob variants: the knobs figure and the tables

    def names(p):
        return p.apply(lambda r: f"{r['strategy']} ({int(r['n_gpus'])} GPU) "
                                 f"[{r['variant'] or 'default'} vs fp32 {r['variant_fp32'] or 'default'}]", axis=1)

    return _bar_figure(merged, f"Mixed-precision speed-up over fp32 (fastest knobs) - {caption(group)}", names,
                       "amp_speedup", lambda precision: f"{precision} / fp32", "throughput ratio", 1, folder, name)


def figure_scaling(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """Images/s against the GPU count, one panel per precision and per-GPU batch: one line per
    multi-device strategy (its colour), each point its best configuration there, starting from
    the best `single` of that batch (hollow); dotted: linear from it."""
    rows = envelope(group)
    base_name = strategies.baseline()
    many = rows[(rows["strategy"] != base_name) & (rows["n_gpus"] > 0)] if len(rows) else rows
    if many.empty or not ((many["n_gpus"] > 2) | (many.groupby(LINE[:1] + ["precision", "batch_per_gpu"])["n_gpus"]
                                                  .transform("nunique") > 1)).any():
        return []  # 2-GPU cases alone: the efficiency figure has them
    panels = [(p, b) for p in PRECISION_ORDER for b in sorted(set(many["batch_per_gpu"]))
              if ((many["precision"] == p) & (many["batch_per_gpu"] == b)).any()]
    cols = min(3, len(panels))
    grid = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(grid, cols, figsize=(4.2 * cols + 2.5, 3.9 * grid), squeeze=False)
    handles = {}
    for ax, (precision, batch) in zip(axes.flat, panels):
        here = rows[(rows["precision"] == precision) & (rows["batch_per_gpu"] == batch)]
        single = here[here["strategy"] == base_name]["items_per_s"]
        anchor = float(single.max()) if len(single) else None
        counts = set(here["n_gpus"])
        if anchor is not None:
            ax.plot([1], [anchor], marker="o", mfc="none", color=colour(base_name), ls="none")
            top = max(counts | {1})
            ax.plot([1, top], [anchor, anchor * top], ls=":", color="grey", lw=0.8)
        for strategy, line in here[here["strategy"] != base_name].groupby("strategy", sort=False):
            line = line[line["hosts"] <= 1].sort_values("n_gpus")
            xs, ys = list(line["n_gpus"]), list(line["items_per_s"])
            if anchor is not None:
                xs, ys = [1] + xs, [anchor] + ys
            (handles[strategy],) = ax.plot(xs, ys, marker="o", color=colour(strategy), lw=1.4,
                                           markevery=list(range(1 if anchor is not None else 0, len(xs))))
        ax.set_xticks(sorted(counts | {1}))
        ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(_k))
        ax.set_title(f"{precision}, {batch} per GPU", fontsize=10)
        ax.set_xlabel("GPUs")
        ax.set_ylabel(rate_words(here))
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    ordered = [s for s in strategies.names() if s in handles] + sorted(set(handles) - set(strategies.names()))
    fig.legend([handles[s] for s in ordered], ordered, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 0.95))
    fig.suptitle(f"Scaling 1 -> N GPUs: each strategy at its best configuration (hollow: {base_name}; dotted: "
                 f"linear from it)", fontsize=12, x=0.01, ha="left")
    fig.text(0.01, 0.0, textwrap.fill(caption(group), 160), fontsize=8, color="dimgray", va="top")
    fig.tight_layout(rect=(0, 0.02, 1, 0.95))
    return _save(fig, folder, name)
