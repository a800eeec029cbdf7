"""Predictions set against measurements: for each prediction, the measured case at the
same device count with the same model, precision, per-device batch, knobs and strategy
options, on the same hardware (the latest ok row of it), and the error of the predicted
images/s (and step) in percent of the measured."""
from __future__ import annotations

import statistics

from bench.cases import case as case_mod

# What ties a pair to its prediction's series (a report draws the measured point on it).
SERIES = ("hardware", "model", "strategy", "variant", "precision", "batch_per_gpu")


def _key(row: dict) -> tuple:
    return (case_mod.hardware(row), case_mod.Case.from_row(row).key())


def pair(predictions: list[dict], rows: list[dict]) -> list[dict]:
    """One entry per prediction that has a measured case."""
    from bench.cases import results

    latest = [r for r in results.latest(rows) if r.get("status") == "ok"]
    measured = {_key(r): r for r in latest}
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
            **{k: p[k] for k in SERIES},
            "measured_source": m["source"], "base": p["base"]["label"], "host_bound": p["host_bound"],
            "run_drift_pct": run_drift(p, m, latest),
            "within_measured_spread": within_spread(p["img_per_s"], m.get("img_per_s_p10"), m.get("img_per_s_p90")),
        })
    return out


def within_spread(predicted: float, p10: float | None, p90: float | None) -> bool | None:
    """Whether the prediction falls between the measured case's own p10 and p90 images/s (its
    steps' spread): a host-bound step varies more within one measurement than 5%, and an error
    inside that band is no evidence against the model. None where the case has no spread."""
    if not p10 or not p90:
        return None
    low, high = sorted((float(p10), float(p90)))
    return low <= predicted <= high


def run_drift(prediction: dict, measured: dict, rows: list[dict]) -> float | None:
    """How far the measured case's own run was from the base at one device: its 1-device case
    of the same setting (the same strategy where it ran one, else any) against the base's
    images/s, in percent. 0 where the base is that run's; None where that run has no 1-device
    case. Runs on other hosts (or other days) differ: a prediction can be no nearer than this."""
    if measured["source"] == prediction["base"]["source"]:
        return 0.0
    setting = case_mod.Case.from_row(measured).baseline_key()
    ones = [r for r in rows if r["source"] == measured["source"] and int(r.get("n_replicas") or 0) == 1
            and case_mod.hardware(r) == case_mod.hardware(measured)
            and case_mod.Case.from_row(r).baseline_key() == setting]
    if not ones:
        return None
    one = next((r for r in ones if r["strategy"] == measured["strategy"]), ones[0])
    return round(100 * (one["img_per_s"] - prediction["base"]["img_per_s"]) / prediction["base"]["img_per_s"], 2)


def summary(pairs: list[dict]) -> list[str]:
    """The errors at 2 or more devices, apart for device-bound and host-bound bases, and for
    measurements whose run sat within 5% of the base at one device."""
    lines = []
    many = [v for v in pairs if v["devices"] > 1]
    for title, chosen in (("device-bound bases", [v for v in many if v.get("host_bound") is False]),
                          ("host-bound bases", [v for v in many if v.get("host_bound")])):
        if not chosen:
            continue
        errors = [abs(v["error_pct"]) for v in chosen]
        near = [abs(v["error_pct"]) for v in chosen
                if v.get("run_drift_pct") is not None and abs(v["run_drift_pct"]) <= 5]
        spread = [v["within_measured_spread"] for v in chosen if v.get("within_measured_spread") is not None]
        lines.append(f"{title}: {len(chosen)} pairs at 2+ devices, |error| median {statistics.median(errors):.1f}%, "
                     f"max {max(errors):.1f}%"
                     + (f"; predicted inside the measured p10-p90: {sum(spread)} of {len(spread)}" if spread else "")
                     + (f"; where the measured run's 1-device case was within 5% of the "
                        f"base: {len(near)} pairs, max {max(near):.1f}%" if near else ""))
    memory = [abs(v["predicted_memory_mib"] / v["measured_memory_mib"] - 1) * 100 for v in many
              if v.get("strategy") in ("fsdp2", "zero1") and v.get("predicted_memory_mib")
              and v.get("measured_memory_mib")]
    if memory:
        lines.append(f"peak memory per GPU of the sharded strategies: {len(memory)} pairs, |error| median "
                     f"{statistics.median(memory):.1f}%, max {max(memory):.1f}%")
    return lines


def render(pairs: list[dict]) -> str:
    if not pairs:
        return "validation: no measured case matches a prediction (same hardware, model, precision, batch, " \
               "knobs, options and device count)"
    head = (f"{'case':<52} {'measured img/s':>15} {'predicted':>10} {'error':>8}  {'memory MiB meas/pred':>20} "
            f"{'run vs base':>11}")
    lines = ["validation (measured vs predicted; error = predicted/measured - 1; run vs base: the measured run's "
             "own 1-device case against the base, where they differ the error carries that difference):", head]
    for v in pairs:
        spread = ""
        if v["measured_img_per_s_p10"] and v["measured_img_per_s_p90"]:
            spread = f" ({v['measured_img_per_s_p10']:.4g}-{v['measured_img_per_s_p90']:.4g})"
        memory = "-"
        if v["measured_memory_mib"] and v["predicted_memory_mib"]:
            memory = f"{v['measured_memory_mib']:.0f}/{v['predicted_memory_mib']:.0f}"
        label = v["label"] + (f", {v['variant']}" if v["variant"] else "")
        drift = "-" if v.get("run_drift_pct") is None else f"{v['run_drift_pct']:+.1f}%"
        inside = {True: ", predicted inside", False: ", predicted outside", None: ""}[v.get("within_measured_spread")]
        lines.append(f"{label:<52} {v['measured_img_per_s']:>15.4g} {v['predicted_img_per_s']:>10.4g} "
                     f"{v['error_pct']:>+7.1f}%  {memory:>20} {drift:>11}"
                     f"{spread and '  measured p10-p90' + spread + inside}")
    return "\n".join(lines + [""] + summary(pairs))
