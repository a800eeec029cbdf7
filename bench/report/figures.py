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
from bench.cases import results  # noqa: E402
from bench.core.precision import PRECISIONS  # noqa: E402
from bench.measure import envinfo  # noqa: E402
from bench.report.frame import amp_speedups, label, same_run  # noqa: E402

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
        results.atomic_write_bytes(path, buf.getvalue())
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
        if ax.get_legend_handles_labels()[0]:  # a panel where nothing ran has no line to name
            ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.14))
    return _save(fig, folder, name)


def primary(group: pd.DataFrame) -> pd.DataFrame:
    """For each strategy, device count and precision, one setting of the knobs: the fastest
    (the highest images/s it reached, as the answer ranks them; then the fastest knobs). The
    other settings have the knobs figure, so that no legend lists every variant."""
    keep = []
    ok = group[group["status"] == "ok"]
    for _, sub in group.groupby(["strategy", "n_gpus", "precision", group["nnodes"].fillna(1)], sort=False):
        fast = ok.loc[ok.index.intersection(sub.index)].groupby("variant")["img_per_s"].max()
        best = (sorted(fast.index, key=lambda v: (-fast[v], str(v).count(","), str(v)))[0] if len(fast)
                else sorted(sub["variant"].unique(), key=lambda v: (str(v).count(","), str(v)))[0])
        keep.append(sub[sub["variant"] == best])
    return pd.concat(keep) if keep else group


def _draw_throughput(ax, line, lab):
    yerr = [line["img_per_s"] - line["img_per_s_p10"], line["img_per_s_p90"] - line["img_per_s"]]
    ax.errorbar(line["batch_per_gpu"], line["img_per_s"], yerr=yerr, capsize=3, label=lab, **style(line.iloc[0]))


def figure_throughput(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    # Name the knobs figure only where one is drawn: where a strategy ran more than one setting.
    others = "; others: knobs figure" if _knob_panels(group) else ""
    return _batch_panels(primary(group),
                         f"Training throughput vs per-GPU batch (each strategy's fastest knobs{others})",
                         "images/s (median; bars: p10-p90)", _draw_throughput, folder, name)


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
            yerr = [line["img_per_s"] - line["img_per_s_p10"], line["img_per_s_p90"] - line["img_per_s"]]
            ax.errorbar(line["batch_per_gpu"], line["img_per_s"], yerr=yerr, capsize=2,
                        color=colour(strategy), marker=markers[i % len(markers)],
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
                         "differs; fastest knobs)", "peak allocated GiB per GPU", draw, folder, name)


def _bar_panel(ax, table: pd.DataFrame, title: str, ylabel: str, reference: float, yerr=None) -> None:
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
    sub = group[(group["status"] == "ok") & (group["strategy"] != strategies.baseline()) & group["efficiency"].notna()
                & (group["n_gpus"] > 1)]
    if sub.empty:
        return []
    sub = primary(sub)  # knob variants: the knobs figure and the tables
    return _bar_figure(sub.assign(efficiency_pct=sub["efficiency"] * 100, efficiency_lo_pct=sub["efficiency_lo"] * 100,
                                  efficiency_hi_pct=sub["efficiency_hi"] * 100),
                       f"Scaling efficiency (speed-up over {strategies.baseline()} / GPUs; "
                       "bars: both p10-p90 spreads; fastest knobs) - "
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

    return _bar_figure(merged, f"Mixed-precision speed-up over fp32 (fastest knobs) - {caption(group)}", names,
                       "amp_speedup", lambda precision: f"{precision} / fp32", "throughput ratio", 1, folder, name)


def figure_scaling(group: pd.DataFrame, folder: Path, name: str) -> list[Path]:
    """images/s against GPU count for each multi-device strategy and setting, one panel per
    precision, anchored at `single` of the same run and settings (hollow marker at 1 GPU, the
    row's own same-run baseline); dotted: linear from it."""
    ok = group[(group["status"] == "ok") & (group["n_gpus"] > 0) & (group["strategy"] != strategies.baseline())]
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
            color = colour(strategy)
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
        ax.set_ylabel(f"images/s (hollow: {strategies.baseline()}; dotted: linear from {strategies.baseline()})")
        ax.set_title(precision)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    fig.suptitle(f"Scaling 1 -> N GPUs - {caption(group)}", fontsize=10)
    return _save(fig, folder, name)
