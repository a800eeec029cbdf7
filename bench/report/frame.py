"""Results as a table for the report: loading, labels, and ratios taken within one run.

Every ratio the report prints (speed-up, efficiency, amp over fp32) divides two rows of
the same results file (`same_run`): a figure from another sweep, on a machine then busier
or idler, would fake a difference.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

import strategies
from bench.cases import ranking, results
from bench.cases.case import Case, hardware
from bench.core.knobs import STEP_KNOBS
from bench.report.regime import add_regimes

def default_inputs(folder: Path) -> list[Path]:
    """Results files under `folder`, leaving out the CI baselines, probe files, superseded
    runs kept in `archive-*` folders (report those by naming the files), the traces of
    `run --anatomy` and other tools' JSON kept beside the results (pytest-benchmark's
    saves). A file that does not parse is kept, so that loading it says what is wrong with it."""
    def inside(p: Path) -> tuple[str, ...]:
        return p.relative_to(folder).parts[:-1]

    return sorted(p for p in folder.rglob("*.json")
                  if "baselines" not in inside(p) and "traces" not in inside(p)
                  and not any(part.startswith("archive") for part in inside(p))
                  and not p.name.endswith(".probe.json") and results.may_be_results(p))


def run_labels(paths) -> dict[str, str]:
    """Each results file's name as the report shows it: the file name where no other file
    shares it, else as many of its folders as tell it apart (`run-1/measured.json`,
    `run-2/measured.json`). Runs are told apart by their path, never pooled by a name."""
    parts = {str(p): Path(p).parts for p in paths}
    labels = {}
    for key, mine in parts.items():
        for n in range(1, len(mine) + 1):
            if not any(other[-n:] == mine[-n:] for k, other in parts.items() if k != key):
                break
        labels[key] = "/".join(mine[-n:])
    return labels


def _load(paths: list[Path]) -> list[dict]:
    """Every row of the files, each row's `source` its file's label (`run_labels`): the one
    key that says which run a row belongs to."""
    labels = run_labels(paths)
    rows = results.load_many(paths)
    for r in rows:
        r["path"] = r["source"]  # where the file lies (its sections beside the rows are read from there)
        r["source"] = labels.get(r["source"], r["source"])
    return rows


def load_frame(paths: list[Path]) -> pd.DataFrame:
    """Every row of the files, speed-ups taken against the baseline of each row's own file,
    then one row per case (the same case twice: the latest ok row wins)."""
    rows = _load(paths)
    if not rows:
        raise results.ResultsError(f"{', '.join(map(str, paths))}: no result rows to report")
    kept = {id(r) for r in results.latest(rows)}
    frame = pd.DataFrame(rows).assign(hardware=[hardware(r) for r in rows], variant=[variant(r) for r in rows],
                                      _kept=[id(r) in kept for r in rows])
    frame = add_speedups(frame)
    frame = add_regimes(frame)  # within each file's ladders, before the merge drops rows
    frame = frame[frame["_kept"]].drop(columns="_kept")
    return frame.sort_values("date", kind="stable").reset_index(drop=True)


def newest(paths: list[Path]) -> list[Path]:
    """The newest run of `paths`: the file whose latest row is the latest (by the rows' own
    dates, not the files' times: a copied file keeps its run's date); ties go to the later
    name. A file without rows is no run."""
    dated = []
    for path in paths:
        rows = results.load(path)
        if rows:
            dated.append((max(str(r.get("date") or "") for r in rows), str(path), path))
    return [max(dated)[2]] if dated else list(paths[-1:])


def load_runs(paths: list[Path]) -> pd.DataFrame:
    """Every file's own rows, one per case within each file (its latest ok row), speed-ups
    paired within the file, and each case's regime: what the answer compares, run by run.
    Unlike `load_frame`, a case measured in two files stays twice, once per run."""
    loaded = _load(paths)
    rows = []
    for source in dict.fromkeys(r["source"] for r in loaded):
        rows += results.latest([r for r in loaded if r["source"] == source])
    if not rows:
        raise results.ResultsError(f"{', '.join(map(str, paths))}: no result rows to report")
    frame = pd.DataFrame(rows).assign(hardware=[hardware(r) for r in rows], variant=[variant(r) for r in rows])
    return add_regimes(add_speedups(frame))


def run_name(source) -> str:
    """A run as the report names it: rows loaded here carry their file's label as `source`."""
    return str(source)


def load_anatomy(paths: list[Path]) -> pd.DataFrame:
    """The rows that carry a step anatomy (run --anatomy), the latest of each case, kept
    apart from the frame above: a later run of the same case without --anatomy must not
    hide the breakdown, and a breakdown is shown with its own run's timing."""
    rows = [r for r in _load(paths) if r.get("anatomy_step_ms") is not None]
    if not rows:
        return pd.DataFrame()
    rows = results.latest(rows)
    return pd.DataFrame(rows).assign(hardware=[hardware(r) for r in rows], variant=[variant(r) for r in rows])


def _flag(value) -> bool:
    return str(value).lower() in ("true", "1")


def variant(row: dict) -> str:
    """The knobs that set this row apart from the suite's defaults, e.g. 'channels_last'."""
    return Case.from_row(row).variant()


def label(row) -> str:
    nnodes = row.get("nnodes")
    if nnodes is not None and nnodes == nnodes and nnodes > 1:  # not NaN: rows from before multi-node have none
        where = Case.from_row(row).where()
    else:
        where = f"{int(row['n_gpus'])} GPU" if row["n_gpus"] else f"CPU x{int(row['n_replicas'])}"
    return f"{row['strategy']} ({where}{', ' + row['variant'] if row['variant'] else ''})"


def _order(frame: pd.DataFrame) -> pd.DataFrame:
    rank = {s: i for i, s in enumerate(strategies.names())}
    return frame.assign(_r=frame["strategy"].map(lambda s: rank.get(s, 99))).sort_values(
        ["_r", "n_gpus", "variant", "batch_per_gpu"]).drop(columns="_r")


def same_run(keys: list[str], frame: pd.DataFrame) -> list[str]:
    """`keys` plus the results file: a ratio divides two figures of the same run only (a
    `single` from another sweep, on a machine then busier or idler, would fake a speed-up)."""
    return [c for c in keys if c in frame] + (["source"] if "source" in frame else [])


def add_speedups(frame: pd.DataFrame) -> pd.DataFrame:
    """Speed-up over `single` at the same per-GPU batch, same hardware, model, precision and
    layout knobs, measured in the same run; scaling efficiency = speed-up / devices."""
    match = same_run(["hardware", "model", "precision", "batch_per_gpu", "execution", *STEP_KNOBS], frame)
    added = ["single_items_per_s", "single_items_per_s_p10", "single_items_per_s_p90", "speedup", "efficiency",
             "efficiency_lo", "efficiency_hi"]
    frame = frame.drop(columns=added, errors="ignore")  # idempotent
    base = frame[(frame["strategy"] == strategies.baseline()) & (frame["status"] == "ok")]
    # A disturbed baseline divides nothing: a speed-up over it would be the disturbance's.
    base = base[[not ranking.disturbed(r) for _, r in base.iterrows()]] if len(base) else base
    rates = ["items_per_s", "items_per_s_p10", "items_per_s_p90"]
    base = base.sort_values("date").drop_duplicates(match, keep="last")[match + rates]
    merged = frame.merge(base.rename(columns={r: f"single_{r}" for r in rates}), on=match, how="left")
    merged["speedup"] = merged["items_per_s"] / merged["single_items_per_s"]
    devices = merged["n_gpus"].where(merged["n_gpus"] > 0, merged["n_replicas"])
    merged["efficiency"] = merged["speedup"] / devices
    # The efficiency's range from both spreads: slow end over the baseline's fast end, and back.
    merged["efficiency_lo"] = merged["items_per_s_p10"] / merged["single_items_per_s_p90"] / devices
    merged["efficiency_hi"] = merged["items_per_s_p90"] / merged["single_items_per_s_p10"] / devices
    return merged


def amp_speedups(group: pd.DataFrame) -> pd.DataFrame:
    """amp images/s over fp32 images/s, same strategy, GPUs and batch, same run; the fp32 row
    with the same knobs where there is one, else the newest fp32 row (the label then says which)."""
    ok = group[group["status"] == "ok"]
    keys = same_run(["strategy", "n_gpus", "batch_per_gpu"], group)
    fp32 = ok[ok["precision"] == "fp32"].sort_values("date")
    amp = ok[ok["precision"] != "fp32"]
    columns = keys + ["items_per_s", "variant"]
    same = amp.merge(fp32.drop_duplicates(keys + ["variant"], keep="last")[columns]
                     .assign(variant_fp32=fp32["variant"]),
                     on=keys + ["variant"], suffixes=("", "_fp32"))
    rest = amp[~amp.index.isin(amp.reset_index().merge(same[keys + ["variant"]], on=keys + ["variant"])["index"])]
    other = rest.merge(fp32.drop_duplicates(keys, keep="last")[columns], on=keys, suffixes=("", "_fp32"))
    merged = pd.concat([same, other], ignore_index=True)
    merged["amp_speedup"] = merged["items_per_s"] / merged["items_per_s_fp32"]
    return merged
