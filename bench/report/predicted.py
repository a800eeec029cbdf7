"""Predictions beside measurements: every `bench predict` file found beside the results,
drawn per hardware and model (images/s against devices: measured solid, predicted dashed)
and tabled with the validation error where a measured case has the same device count.
Predictions never enter the answer's rankings; this section only shows them."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from bench.predict import store
from bench.report.figures import COLORS, PRECISION_ORDER, _save, _wrap, slug

SERIES = ["strategy", "variant", "precision", "batch_per_gpu"]


def _k(value: float) -> str:
    return f"{value / 1e3:.1f} k" if value >= 1e3 else f"{value:.0f}"


def _layout(row) -> str:
    return f"{int(row['hosts'])}x{int(row['per_host'])}" if row["hosts"] > 1 else str(int(row["devices"]))


def figure(pred: pd.DataFrame, pairs: pd.DataFrame, folder: Path, name: str, title: str) -> list[Path]:
    """One panel per precision and batch; per strategy and knobs a dashed predicted curve and,
    solid, the base at one device and every measured case the prediction was validated on."""
    panels = sorted({(p, b) for p, b in zip(pred["precision"], pred["batch_per_gpu"])},
                    key=lambda t: (PRECISION_ORDER.index(t[0]) if t[0] in PRECISION_ORDER else 99, t[1]))
    fig, axes = plt.subplots(2, len(panels), figsize=(6.5 * len(panels), 8.5), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for ax, eff, (precision, batch) in zip(axes[0], axes[1], panels):
        mine = pred[(pred["precision"] == precision) & (pred["batch_per_gpu"] == batch)]
        for (strategy, variant), line in mine.groupby(["strategy", "variant"], sort=True):
            line = line.sort_values("devices")
            color = COLORS.get(strategy, "grey")
            series = f"{strategy}{' ' + variant if variant else ''}"
            ax.plot(line["devices"], line["img_per_s"], ls="--", marker="x", color=color,
                    label=_wrap(f"{series} (predicted)"))
            eff.plot(line["devices"], 100 * line["scaling_efficiency"], ls="--", marker="x", color=color)
            base = line.iloc[0]["base"]
            measured = [(1, base["img_per_s"])] if base["label"].startswith(strategy + " ") else []
            if not pairs.empty:
                hit = pairs[(pairs["label"].str.startswith(strategy + " ")) & (pairs["variant"] == variant)
                            & pairs["label"].str.contains(f" {precision} ", regex=False)
                            & pairs["label"].str.endswith(f"batch {batch}") & (pairs["devices"] > 1)]
                measured += list(zip(hit["devices"], hit["measured_img_per_s"]))
            if measured:
                xs, ys = zip(*sorted(set(measured)))
                ax.plot(xs, ys, ls="-", marker="o", color=color, label=_wrap(f"{series} (measured)"))
                one = line.iloc[0]["base"]["img_per_s"]  # efficiency against the base, as predicted
                eff.plot(xs, [100 * y / (x * one) for x, y in zip(xs, ys)], ls="-", marker="o", color=color)
        ticks = sorted(set(mine["devices"]))
        for a in (ax, eff):
            a.set_xscale("log", base=2)
            a.set_xticks(ticks, [str(t) for t in ticks])
            a.grid(alpha=0.3, which="both")
        ax.set_yscale("log")
        eff.set_xlabel("devices")
        eff.set_ylabel("scaling efficiency, % (of n x the base)")
        ax.set_ylabel("images/s (solid: measured; dashed: predicted)")
        ax.set_title(f"{precision}, {batch}/device")
        eff.legend(*ax.get_legend_handles_labels(), fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.suptitle(title, fontsize=10)
    return _save(fig, folder, name)


def table(pred: pd.DataFrame, pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per series: predicted images/s and efficiency per device count, then the
    validation errors."""
    rows = []
    for key, line in pred.groupby(SERIES, sort=True):
        strategy, variant, precision, batch = key
        row = {"strategy and knobs": f"`{strategy}`" + (f", {variant}" if variant else ""), "precision": precision,
               "batch/device": int(batch)}
        for _, r in line.sort_values("devices").iterrows():
            row[_layout(r)] = f"{_k(r['img_per_s'])} ({100 * r['scaling_efficiency']:.0f}%)"
        if not pairs.empty:
            hit = pairs[pairs["label"].str.startswith(strategy + " ") & (pairs["variant"] == variant)
                        & pairs["label"].str.contains(f" {precision} ", regex=False)
                        & pairs["label"].str.endswith(f"batch {batch}") & (pairs["devices"] > 1)]
            row["measured: error"] = "; ".join(f"{int(v['devices'])}: {v['error_pct']:+.1f}%"
                                               for _, v in hit.sort_values("devices").iterrows())
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def section(paths: list[Path], out: Path) -> list[str]:
    lines = []
    for found in store.beside(paths):
        lines += file_section(store.load(found), out)
    return (["## Predicted beyond the measured devices", "",
             "Predicted, not measured: the answer above ranks measured cases only. Each prediction starts from a "
             "measured one-device case and its `--anatomy` traces; every prediction's assumptions are in its file. "
             "Cells: images/s (scaling efficiency); `HxG`: H hosts of G devices.", ""] + lines) if lines else []


def file_section(doc: dict, out: Path) -> list[str]:
    if not doc["predictions"]:
        return []
    pred = pd.DataFrame(doc["predictions"])
    pairs = pd.DataFrame(doc["validation"])
    settings = doc.get("settings", {})
    stem = Path(doc["path"]).name[:-len(store.SUFFIX)]
    lines = [f"### `{stem}`", "",
             f"Collective costs from {settings.get('link') or 'a probe'}"
             + (f"; across hosts {settings['inter_host_gbps']:g} Gb/s per host" if settings.get("inter_host_gbps")
                else "") + ".", ""]
    from bench.predict.validate import summary

    said = summary(doc["validation"]) if doc["validation"] else []
    if said:
        lines += ["Validation (predicted against measured at 2 or more devices):", ""] + [f"- {s}" for s in said] + [""]
    for (hw, model), group in pred.groupby(["hardware", "model"], sort=True):
        mine = pairs[pairs["label"].str.contains(f" {model} ", regex=False)] if not pairs.empty else pairs
        name = f"{slug(hw, model)}-predicted-{slug(stem)}"
        figure(group, mine, out, name, f"{model} on {hw}: predicted (dashed) and measured (solid), {stem}")
        lines += [f"**{model} on {hw}**", "", f"![{name}]({name}.png)", "", table(group, mine).to_markdown(index=False),
                  ""]
    return lines


def said_in_answer(paths: list[Path]) -> list[str]:
    """One line per predictions file beside the results, apart from the measured answer: the
    highest predicted images/s at the largest device count among predictions made from the
    strategy's own one-device case (one from another strategy's base lacks its own overheads),
    and where the rest is drawn."""
    lines = []
    for found in store.beside(paths):
        pred = pd.DataFrame(store.load(found)["predictions"])
        if not pred.empty:
            pred = pred[[b["label"].startswith(f"{s} ") for b, s in zip(pred["base"], pred["strategy"])]]
        if pred.empty:
            continue
        top = pred[pred["devices"] == pred["devices"].max()].sort_values("img_per_s").iloc[-1]
        knobs = f" ({top['variant']})" if top["variant"] else ""
        lines.append(f"Predicted, not measured ({found.name}): at {_layout(top)} devices the highest is "
                     f"{top['strategy']}{knobs} {top['precision']} {top['model']} {int(top['batch_per_gpu'])}/device, "
                     f"{_k(top['img_per_s'])} img/s ({100 * top['scaling_efficiency']:.0f}% efficiency) from "
                     f"{top['base']['label']}; `bench report` draws every prediction beside the measured cases.")
    return lines
