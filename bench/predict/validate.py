"""Predictions set against measurements: for each prediction, the measured case at the
same device count with the same model, precision, per-device batch, knobs and strategy
options, on the same hardware (the latest ok row of it), and the error of the predicted
images/s (and step) in percent of the measured."""
from __future__ import annotations

from bench.cases import case as case_mod


def _key(row: dict) -> tuple:
    return (case_mod.hardware(row), case_mod.Case.from_row(row).key())


def pair(predictions: list[dict], rows: list[dict]) -> list[dict]:
    """One entry per prediction that has a measured case."""
    from bench.cases import results

    measured = {_key(r): r for r in results.latest(rows) if r.get("status") == "ok"}
    out = []
    for p in predictions:
        m = measured.get((p["hardware"], case_mod.Case.from_row(p).key()))
        if m is None:
            continue
        out.append({
            "label": case_mod.Case.from_row(p).label(), "variant": p["variant"], "devices": p["devices"],
            "predicted_img_per_s": p["img_per_s"], "measured_img_per_s": m["img_per_s"],
            "measured_img_per_s_p10": m.get("img_per_s_p10"), "measured_img_per_s_p90": m.get("img_per_s_p90"),
            "predicted_step_ms": p["step_ms"], "measured_step_ms": m["step_ms_p50"],
            "error_pct": round(100 * (p["img_per_s"] - m["img_per_s"]) / m["img_per_s"], 2),
            "predicted_memory_mib": p.get("memory_mib"), "measured_memory_mib": m.get("peak_alloc_mib"),
            "measured_source": m["source"], "base": p["base"]["label"],
        })
    return out


def render(pairs: list[dict]) -> str:
    if not pairs:
        return "validation: no measured case matches a prediction (same hardware, model, precision, batch, " \
               "knobs, options and device count)"
    head = f"{'case':<52} {'measured img/s':>15} {'predicted':>10} {'error':>8}  {'memory MiB meas/pred':>20}"
    lines = ["validation (measured vs predicted; error = predicted/measured - 1):", head]
    for v in pairs:
        spread = ""
        if v["measured_img_per_s_p10"] and v["measured_img_per_s_p90"]:
            spread = f" ({v['measured_img_per_s_p10']:.4g}-{v['measured_img_per_s_p90']:.4g})"
        memory = "-"
        if v["measured_memory_mib"] and v["predicted_memory_mib"]:
            memory = f"{v['measured_memory_mib']:.0f}/{v['predicted_memory_mib']:.0f}"
        label = v["label"] + (f", {v['variant']}" if v["variant"] else "")
        lines.append(f"{label:<52} {v['measured_img_per_s']:>15.4g} {v['predicted_img_per_s']:>10.4g} "
                     f"{v['error_pct']:>+7.1f}%  {memory:>20}{spread and '  measured p10-p90' + spread}")
    return "\n".join(lines)
