"""Predictions beside measurements: every `bench predict` file found beside the results,
drawn per hardware and model (images/s and scaling efficiency against devices: measured solid,
predicted dashed) and tabled with the validation error where a measured case has the same
device count. Predictions never enter the answer's rankings; this section only shows them."""
from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from bench.predict import store
from bench.predict import validate
from bench.predict.validate import SERIES, summary
from bench.report.findings import rate as _k
from bench.report.figures import COLORS, PRECISION_ORDER, _save, _wrap, slug
from bench.report.frame import run_labels


def _layout(row) -> str:
    return f"{int(row['hosts'])}x{int(row['per_host'])}" if row["hosts"] > 1 else str(int(row["devices"]))


def _own_base(row) -> bool:
    """Predicted from a one-device case of the strategy itself (else from another strategy's,
    which lacks the strategy's own host work)."""
    return row["base"]["label"].startswith(f"{row['strategy']} ")


def _measured(pairs: pd.DataFrame, series: dict) -> pd.DataFrame:
    """The validation pairs of one prediction series at 2 or more devices (files written before
    pairs carried their series have none)."""
    if pairs.empty or not set(SERIES) <= set(pairs.columns):
        return pd.DataFrame(columns=["devices", "measured_img_per_s", "error_pct"])
    hit = pairs["devices"] > 1
    for key in SERIES:
        hit &= pairs[key] == series[key]
    return pairs[hit].sort_values("devices")


def _range(ranges: dict, row) -> dict | None:
    """The validated error range of the prediction's hardware and regime, or None."""
    return ranges.get((row["hardware"], bool(row["host_bound"])))


def _regime(host_bound) -> str:
    return "host-bound" if host_bound else "device-bound"


def figure(pred: pd.DataFrame, pairs: pd.DataFrame, folder: Path, name: str, title: str,
           ranges: dict | None = None) -> list[Path]:
    """One column per precision and batch: images/s above, scaling efficiency below; per
    strategy and knobs a dashed predicted curve (dotted where its base ran another strategy)
    and, solid, the base at one device and every measured case it was validated on. At the
    device counts its regime was validated at on this hardware, a bar spans the images/s the
    validated errors imply (predicted / (1 + error))."""
    panels = sorted({(p, b) for p, b in zip(pred["precision"], pred["batch_per_gpu"])},
                    key=lambda t: (PRECISION_ORDER.index(t[0]) if t[0] in PRECISION_ORDER else 99, t[1]))
    fig, axes = plt.subplots(2, len(panels), figsize=(6.5 * len(panels), 8.5), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for ax, eff, (precision, batch) in zip(axes[0], axes[1], panels):
        mine = pred[(pred["precision"] == precision) & (pred["batch_per_gpu"] == batch)]
        for (strategy, variant), line in mine.groupby(["strategy", "variant"], sort=True):
            line = line.sort_values("devices")
            first = line.iloc[0]
            color = COLORS.get(strategy, "grey")
            series = f"{strategy}{' ' + variant if variant else ''}"
            own = _own_base(first)
            how = "predicted" if own else f"predicted from {first['base']['label'].split()[0]}'s base"
            style = {"ls": "--" if own else ":", "marker": "x", "color": color}
            ax.plot(line["devices"], line["img_per_s"], label=_wrap(f"{series} ({how})"), **style)
            eff.plot(line["devices"], 100 * line["scaling_efficiency"], **style)
            validated = _range(ranges or {}, first)
            if validated:
                at = line[line["devices"].isin(validated["devices"])]
                low, high = at["img_per_s"] / (1 + validated["max"] / 100), at["img_per_s"] / (1 + validated["min"] / 100)
                ax.errorbar(at["devices"], at["img_per_s"], yerr=[at["img_per_s"] - low, high - at["img_per_s"]],
                            fmt="none", ecolor=color, alpha=0.5, capsize=4)
            hit = _measured(pairs, first)
            points = ([(1, first["base"]["img_per_s"])] if own else []) + list(
                zip(hit["devices"], hit["measured_img_per_s"]))
            if points:
                xs, ys = zip(*sorted(set(points)))
                ax.plot(xs, ys, ls="-", marker="o", color=color, label=_wrap(f"{series} (measured)"))
                one = first["base"]["img_per_s"]  # efficiency against the base, as predicted
                eff.plot(xs, [100 * y / (x * one) for x, y in zip(xs, ys)], ls="-", marker="o", color=color)
        ticks = sorted(set(mine["devices"]))
        for a in (ax, eff):
            a.set_xscale("log", base=2)
            a.set_xticks(ticks, [str(t) for t in ticks])
            a.grid(alpha=0.3, which="both")
        ax.set_yscale("log")
        ax.set_ylabel("images/s (solid: measured; dashed: predicted)")
        ax.set_title(f"{precision}, {batch}/device")
        eff.set_xlabel("devices")
        eff.set_ylabel("scaling efficiency, % (of n x the base)")
        eff.legend(*ax.get_legend_handles_labels(), fontsize=6.5, loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.suptitle(title, fontsize=10)
    return _save(fig, folder, name)


def table(pred: pd.DataFrame, pairs: pd.DataFrame, ranges: dict | None = None) -> pd.DataFrame:
    """One row per series: predicted images/s and efficiency per device count, its base, the
    validated error range of its regime on its hardware, then its own validation errors."""
    rows = []
    for _, line in pred.groupby(list(SERIES), sort=True):
        line = line.sort_values("devices")
        first = line.iloc[0]
        row = {"strategy and knobs": f"`{first['strategy']}`" + (f", {first['variant']}" if first["variant"] else ""),
               "precision": first["precision"], "batch/device": int(first["batch_per_gpu"]),
               "from": "its own 1-device case" if _own_base(first) else first["base"]["label"]}
        for _, r in line.iterrows():
            row[_layout(r)] = f"{_k(r['img_per_s'])} ({100 * r['scaling_efficiency']:.0f}%)"
        validated = _range(ranges or {}, first)
        row["validated error"] = (f"{validated['min']:+.1f}% to {validated['max']:+.1f}% ({_regime(first['host_bound'])}, "
                                  f"{validated['pairs']} pairs at {','.join(map(str, validated['devices']))} devices)"
                                  if validated else "not validated on this hardware")
        if not pairs.empty:
            row["measured: error"] = "; ".join(f"{int(v['devices'])}: {v['error_pct']:+.1f}%"
                                               for _, v in _measured(pairs, first).iterrows())
        rows.append(row)
    return pd.DataFrame(rows).fillna("")


def _readable(paths: list[Path]) -> list[tuple[Path, dict | None, str]]:
    """(file, document or None, why not) for every predictions file beside the results."""
    out = []
    for found in store.beside(paths):
        try:
            out.append((found, store.load(found), ""))
        except store.PredictionsError as exc:
            out.append((found, None, str(exc)))
    return out


def _known(v: dict) -> tuple:
    return (v["hardware"], v["label"], v["variant"], v["devices"], round(float(v["measured_img_per_s"]), 1))


def trust(committed: list[dict]) -> list[str]:
    """Where the model stands on the committed validations, per regime, beside linear scaling."""
    if not committed:
        return []
    runs = sorted({v["run"] for v in committed})
    hardware = sorted({v["hardware"] for v in committed})
    lines = [f"How far to trust a prediction: the committed validations ({', '.join(hardware)}, "
             f"`{validate.COMMITTED.relative_to(validate.COMMITTED.parents[3])}/` {', '.join(runs)}; "
             "recomputed from their files), the model beside linear scaling (n x the one-device figure) and "
             "serial communication (the one-device step + the all-reduce of every gradient, not hidden):", ""]
    for regime, found in validate.by_regime(committed).items():
        verdict = "" if validate.beats_linear(found) else " **The model has not beaten linear scaling here.**"
        lines.append(f"- {regime}: {found['pairs']} pairs; within {validate.WITHIN_PCT:g}%: model "
                     f"{found['model']['within']}, linear {found['linear']['within']}, serial "
                     f"{found['serial']['within']}; |error| median model {found['model']['median']:.1f}%, linear "
                     f"{found['linear']['median']:.1f}%, serial {found['serial']['median']:.1f}%.{verdict}")
    return lines + [""]


def section(paths: list[Path], out: Path) -> list[str]:
    lines, committed = [], None
    readable = _readable(paths)
    names = run_labels([found for found, _, _ in readable])
    for found, doc, why in readable:
        if doc is None:
            lines += [f"- `{names[str(found)]}` left out: {why}", ""]
            continue
        if committed is None:
            committed = validate.committed_pairs()
        lines += file_section(doc, out, committed)
    return (["## Predicted beyond the measured devices", "",
             "Predicted, not measured: the answer above ranks measured cases only. Each prediction starts from a "
             "measured one-device case and its `--anatomy` traces (dotted curves: another strategy's case, which "
             "lacks the strategy's own host work); every prediction's assumptions are in its file. Cells: images/s "
             "(scaling efficiency); `HxG`: H hosts of G devices. Bars: the images/s that the validated errors of the "
             "prediction's regime on its hardware imply, at the device counts validated.", ""]
            + trust(committed or []) + lines) if lines else []


def file_section(doc: dict, out: Path, committed: list[dict] | None = None) -> list[str]:
    if not doc["predictions"]:
        return []
    pred = pd.DataFrame(doc["predictions"])
    validated = doc.get("validation")
    pairs = pd.DataFrame(validated or [])
    own = [v for v in (validated or []) if "error_pct" in v and "hardware" in v]
    known = {_known(v) for v in own}
    ranges = validate.error_ranges(own + [v for v in committed or [] if _known(v) not in known])
    settings = doc.get("settings") or {}
    path = Path(doc["path"])
    stem = f"{path.parent.name}/{path.name[:-len(store.SUFFIX)]}"  # files of one name in several folders
    lines = [f"### `{stem}`", "",
             f"Collective costs from {settings.get('link') or 'a probe'}"
             + (f"; across hosts {settings['inter_host_gbps']:g} Gb/s per host" if settings.get("inter_host_gbps")
                else "") + ".", ""]
    if validated is None:
        lines += ["Not validated (`bench predict --validate` sets predictions against measured cases).", ""]
    elif not validated:
        lines += ["Validated: no measured case had a predicted device count.", ""]
    else:
        lines += ["Validation (predicted against measured at 2 or more devices):", ""] + [
            f"- {s}" for s in summary(validated)] + [""]
    for (hw, model), group in pred.groupby(["hardware", "model"], sort=True):
        name = f"{slug(hw, model)}-predicted-{slug(stem)}"
        figure(group, pairs, out, name, f"{model} on {hw}: predicted (dashed) and measured (solid), {stem}", ranges)
        lines += [f"**{model} on {hw}**", "", f"![{name}]({name}.png)", "",
                  table(group, pairs, ranges).to_markdown(index=False), ""]
    return lines


def said_in_answer(paths: list[Path]) -> list[str]:
    """One line per predictions file beside the results, apart from the measured answer: the
    highest predicted images/s at the largest device count among predictions made from the
    strategy's own one-device case, and where the rest is drawn."""
    lines = []
    readable = _readable(paths)
    names = run_labels([found for found, _, _ in readable])  # files of one name in two folders stay apart
    for found, doc, why in readable:
        if doc is None:
            lines.append(f"Predictions file {names[str(found)]} left out: {why}")
            continue
        pred = pd.DataFrame(doc["predictions"])
        if not pred.empty:
            pred = pred[pred.apply(_own_base, axis=1)]
        if pred.empty:
            continue
        top = pred[pred["devices"] == pred["devices"].max()].sort_values("img_per_s").iloc[-1]
        knobs = f" ({top['variant']})" if top["variant"] else ""
        lines.append(f"Predicted, not measured ({names[str(found)]}): at {_layout(top)} devices the highest is "
                     f"{top['strategy']}{knobs} {top['precision']} {top['model']} {int(top['batch_per_gpu'])}/device, "
                     f"{_k(top['img_per_s'])} img/s ({100 * top['scaling_efficiency']:.0f}% efficiency) from "
                     f"{top['base']['label']}; `bench report` draws every prediction beside the measured cases.")
    return lines
