"""Predictions set against measurements, and against two predictors without a model.

For each prediction, the measured case at the same device count with the same model,
precision, per-device batch, knobs and strategy options, on the same hardware (the latest ok
row of it), and the error of the predicted images/s in percent of the measured. Beside it the
errors of two baselines on the same pair:

- linear: the one-device figure times n (no communication, no overlap: what a model has to
  beat to be worth its traces);
- serial: the one-device step plus the all-reduce of every fp32 gradient at n, costed by the
  same probe, none of it hidden behind compute.

A model that does not beat linear scaling on a regime's validations has not earned its place
there; the summary says so per regime (bound by the device, bound by the host). No torch.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from bench.cases import case as case_mod

# What ties a pair to its prediction's series (a report draws the measured point on it).
SERIES = ("hardware", "model", "strategy", "variant", "precision", "batch_per_gpu")
PREDICTORS = {"model": "error_pct", "linear": "linear_error_pct", "serial": "serial_error_pct"}
WITHIN_PCT = 5.0  # what "within" means in the summaries
REGIMES = (("device-bound", False), ("host-bound", True))


def baselines(base: dict, comm, parameters: int, n: int, per_host: int, hosts: int, global_batch: int) -> dict:
    """The two baselines' images/s for a case of n devices from its one-device base."""
    all_reduce = comm.ms("all_reduce", parameters * 4, per_host, hosts) if n > 1 else 0.0
    step_ms = float(base.get("step_ms_p50", base.get("step_ms")))
    return {"linear_img_per_s": round(float(base["img_per_s"]) * n, 2),
            "serial_img_per_s": round(global_batch / ((step_ms + all_reduce) / 1e3), 2),
            "gradient_all_reduce_ms": round(all_reduce, 4)}


def _key(row: dict) -> tuple:
    return (case_mod.hardware(row), case_mod.Case.from_row(row).key())


def _error(predicted: float, measured: float) -> float:
    return round(100 * (predicted - measured) / measured, 2)


def pair(predictions: list[dict], rows: list[dict], comm=None) -> list[dict]:
    """One entry per prediction that has a measured case. The baselines come with the
    prediction, or (files written before predictions carried them) from `comm` and the
    measured row's parameter count."""
    from bench.cases import results

    latest = [r for r in results.latest(rows) if r.get("status") == "ok"]
    measured = {_key(r): r for r in latest}
    out = []
    for p in predictions:
        m = measured.get((p["hardware"], case_mod.Case.from_row(p).key()))
        if m is None:
            continue
        base = p.get("baselines")
        if base is None and comm is not None and m.get("parameters"):
            base = baselines(p["base"], comm, int(m["parameters"]), p["devices"], p["per_host"], p["hosts"],
                             int(p["global_batch"]))
        out.append({
            "label": case_mod.Case.from_row(p).label(), "variant": p["variant"], "devices": p["devices"],
            "predicted_img_per_s": p["img_per_s"], "measured_img_per_s": m["img_per_s"],
            "measured_img_per_s_p10": m.get("img_per_s_p10"), "measured_img_per_s_p90": m.get("img_per_s_p90"),
            "predicted_step_ms": p["step_ms"], "measured_step_ms": m["step_ms_p50"],
            "error_pct": _error(p["img_per_s"], m["img_per_s"]),
            **({"linear_img_per_s": base["linear_img_per_s"], "serial_img_per_s": base["serial_img_per_s"],
                "linear_error_pct": _error(base["linear_img_per_s"], m["img_per_s"]),
                "serial_error_pct": _error(base["serial_img_per_s"], m["img_per_s"])} if base else {}),
            "predicted_memory_mib": p.get("memory_mib"), "measured_memory_mib": m.get("peak_alloc_mib"),
            "predicted_collective_elements": p.get("collective_elements_per_step"),
            "measured_collective_elements": m.get("collective_elements_per_step"),
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


def scores(pairs: list[dict]) -> dict:
    """Per predictor (model, linear, serial): pairs, |error| median and max, and how many within
    WITHIN_PCT; and in how many pairs the model's |error| was smaller than linear scaling's.
    Pairs at 2 or more devices with both baselines only."""
    judged = [v for v in pairs if v["devices"] > 1 and "linear_error_pct" in v]
    out = {"pairs": len(judged)}
    for name, key in PREDICTORS.items():
        errors = [abs(v[key]) for v in judged]
        out[name] = {"median": statistics.median(errors) if errors else None, "max": max(errors, default=None),
                     "within": sum(e <= WITHIN_PCT for e in errors)}
    out["model_nearer_than_linear"] = sum(abs(v["error_pct"]) < abs(v["linear_error_pct"]) for v in judged)
    return out


def by_regime(pairs: list[dict]) -> dict[str, dict]:
    """scores() for each regime that has pairs."""
    out = {}
    for name, host_bound in REGIMES:
        chosen = [v for v in pairs if bool(v.get("host_bound")) == host_bound]
        found = scores(chosen)
        if found["pairs"]:
            out[name] = found
    return out


def beats_linear(found: dict) -> bool:
    """The model has beaten linear scaling on a set of pairs where it is within 5% more often
    and its median |error| is smaller."""
    return found["model"]["within"] > found["linear"]["within"] and found["model"]["median"] < found["linear"]["median"]


def _said(found: dict) -> str:
    parts = [f"{name} within {WITHIN_PCT:g}% on {found[name]['within']}, |error| median {found[name]['median']:.1f}% "
             f"max {found[name]['max']:.1f}%" for name in PREDICTORS]
    verdict = "" if beats_linear(found) else "; the model has not beaten linear scaling here"
    return (f"{found['pairs']} pairs at 2+ devices: " + "; ".join(parts)
            + f"; the model nearer than linear in {found['model_nearer_than_linear']}{verdict}")


def summary(pairs: list[dict]) -> list[str]:
    """The errors at 2 or more devices per regime, the model beside both baselines, and the
    sharded strategies' memory."""
    lines = []
    many = [v for v in pairs if v["devices"] > 1]
    for name, found in by_regime(many).items():
        lines.append(f"{name} bases: {_said(found)}")
    for title, chosen in (("device-bound bases", [v for v in many if v.get("host_bound") is False]),
                          ("host-bound bases", [v for v in many if v.get("host_bound")])):
        spread = [v["within_measured_spread"] for v in chosen if v.get("within_measured_spread") is not None]
        near = [abs(v["error_pct"]) for v in chosen
                if v.get("run_drift_pct") is not None and abs(v["run_drift_pct"]) <= 5]
        if spread or near:
            lines.append(f"{title}: " + "; ".join(filter(None, [
                f"predicted inside the measured p10-p90: {sum(spread)} of {len(spread)}" if spread else "",
                f"where the measured run's 1-device case was within 5% of the base: {len(near)} pairs, "
                f"max {max(near):.1f}%" if near else ""])))
    counted = [v for v in pairs if v.get("predicted_collective_elements") is not None
               and v.get("measured_collective_elements") is not None]
    if counted:
        same = sum(int(v["predicted_collective_elements"]) == int(v["measured_collective_elements"]) for v in counted)
        lines.append(f"communication per step: the simulated collectives carry the elements the measured run's carried "
                     f"(its profiler's count) in {same} of {len(counted)} pairs")
    memory = [abs(v["predicted_memory_mib"] / v["measured_memory_mib"] - 1) * 100 for v in many
              if v.get("strategy") in ("fsdp2", "zero1") and v.get("predicted_memory_mib")
              and v.get("measured_memory_mib")]
    if memory:
        lines.append(f"peak memory per GPU of the sharded strategies: {len(memory)} pairs, |error| median "
                     f"{statistics.median(memory):.1f}%, max {max(memory):.1f}%")
    return lines


def _pct(value) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def render(pairs: list[dict]) -> str:
    if not pairs:
        return "validation: no measured case matches a prediction (same hardware, model, precision, batch, " \
               "knobs, options and device count)"
    head = (f"{'case':<52} {'measured img/s':>15} {'predicted':>10} {'error':>8} {'linear':>8} {'serial':>8}  "
            f"{'memory MiB meas/pred':>20} {'run vs base':>11}")
    lines = ["validation (error = predicted/measured - 1; linear: n x the 1-device figure; serial: the 1-device step "
             "+ the all-reduce of every gradient, not hidden; run vs base: the measured run's own 1-device case "
             "against the base, where they differ the error carries that difference):", head]
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
                     f"{v['error_pct']:>+7.1f}% {_pct(v.get('linear_error_pct')):>8} "
                     f"{_pct(v.get('serial_error_pct')):>8}  {memory:>20} {drift:>11}"
                     f"{spread and '  measured p10-p90' + spread + inside}")
    return "\n".join(lines + [""] + summary(pairs))


# --- committed validations -------------------------------------------------------------------
def recheck(predictions_file: Path, results_files: list[Path] | None = None, probe_file: Path | None = None
            ) -> list[dict]:
    """The pairs of a predictions file written by `bench predict --validate`, paired again with
    the results files (default: those in its folder) and with both baselines from the probe
    (default: the one probe file in its folder); the traces are not needed."""
    from bench.cases import results
    from bench.predict import probe, store

    folder = Path(predictions_file).parent
    doc = store.load(predictions_file)
    files = results_files or sorted(f for f in folder.glob("*.json") if results.may_be_results(f))
    comms = [probe_file] if probe_file else sorted(folder.glob(f"*{probe.SUFFIX}"))
    if len(comms) != 1:
        raise ValueError(f"{folder}: {len(comms)} probe files (*{probe.SUFFIX}) for {Path(predictions_file).name}: "
                         "name the one it was made with (--probe)")
    comm = probe.comm_model(probe.load(comms[0]))
    return pair(doc["predictions"], results.load_many(files), comm)


# The validations committed with the repository: probe, one-GPU bases and 2-GPU runs taken on
# one host (`make predict-validate`), each run in a folder of its own.
COMMITTED = Path(__file__).resolve().parents[2] / "results" / "reference" / "h200x2" / "predict-validate"


def committed_pairs(folder: Path = COMMITTED) -> list[dict]:
    """Every committed run's pairs, each marked with its run folder (runs are told apart by
    their path, never pooled by file name), recomputed from the files; [] where there are none."""
    out = []
    for predictions in sorted(Path(folder).glob("run-*/validation.predictions.json")):
        run = predictions.parent.name
        out += [{**v, "run": run} for v in recheck(predictions)]
    return out


def error_ranges(pairs: list[dict]) -> dict[tuple[str, bool], dict]:
    """(hardware, host-bound) -> the model's signed error range at 2 or more devices: min and
    max in percent, the pairs and the device counts it was validated at."""
    out: dict = {}
    for v in pairs:
        if v["devices"] < 2:
            continue
        got = out.setdefault((v["hardware"], bool(v.get("host_bound"))), {"errors": [], "devices": set()})
        got["errors"].append(v["error_pct"])
        got["devices"].add(v["devices"])
    return {k: {"min": min(g["errors"]), "max": max(g["errors"]), "pairs": len(g["errors"]),
                "devices": sorted(g["devices"])} for k, g in out.items()}
