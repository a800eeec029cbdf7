"""Result rows: one schema for every consumer, written atomically as JSON and CSV.

A results file is `NAME.json` ({"schema": ..., "rows": [...]}) with `NAME.csv` beside
it holding the same rows. Both are rewritten through a temporary file and an atomic
rename after every finished case, so an interrupted sweep keeps everything it measured.
"""
from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

SCHEMA = "parabench-results/1"

AXES = ["strategy", "precision", "model", "device", "gpus", "n_gpus", "n_replicas", "batch_per_gpu"]
SETTINGS = [
    "data", "channels_last", "compile", "cudnn_benchmark", "tf32", "sgd_impl", "options", "warmup", "steps", "trials", "seed",
]
FIGURES = [
    "global_batch", "status", "reason",
    "img_per_s", "img_per_s_p10", "img_per_s_p90", "wall_img_per_s", "trial_img_per_s_min", "trial_img_per_s_max",
    "step_ms_p10", "step_ms_p50", "step_ms_p90", "step_ms_mean", "n_timed_steps",
    "peak_alloc_mib", "peak_alloc_mib_min", "peak_reserved_mib",
    "peak_alloc_mib_per_device", "peak_reserved_mib_per_device",
    "flops_per_image", "tflops", "elapsed_s", "output_tail",
]
ENVIRONMENT = [
    "gpu_name", "gpu_count_host", "gpu_memory_mib", "driver", "cuda", "cudnn", "nccl", "torch", "mxnet", "numpy",
    "python", "host", "cpu", "platform", "git_commit", "date", "command", "run_id",
]
COLUMNS = AXES + SETTINGS + FIGURES + ENVIRONMENT
STATUSES = ("ok", "oom", "error", "timeout", "skipped")
INTEGER = {
    "n_gpus", "n_replicas", "batch_per_gpu", "warmup", "steps", "trials", "seed", "global_batch", "n_timed_steps",
    "gpu_count_host",
}
FLOAT = {
    "img_per_s", "img_per_s_p10", "img_per_s_p90", "wall_img_per_s", "trial_img_per_s_min", "trial_img_per_s_max",
    "step_ms_p10", "step_ms_p50", "step_ms_p90", "step_ms_mean", "peak_alloc_mib", "peak_alloc_mib_min",
    "peak_reserved_mib", "flops_per_image", "tflops", "elapsed_s", "gpu_memory_mib",
}
# Files written before the SGD implementation was a setting all used the per-tensor loop.
LEGACY_DEFAULTS = {"sgd_impl": "for-loop"}
# What makes two rows the same measurement (for --resume and comparisons).
CASE_KEY = AXES + SETTINGS


class ResultsError(Exception):
    """A results file that cannot be used; the message names the file and the fix."""


def case_key(row: dict) -> tuple:
    return tuple("" if row.get(k) is None else str(row.get(k)) for k in CASE_KEY)


def json_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p if p.suffix == ".json" else p.with_suffix(".json")


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", newline="") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write(path: str | os.PathLike, rows: list[dict]) -> None:
    path = json_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = [{c: row.get(c) for c in COLUMNS} for row in rows]
    _atomic_write(path, json.dumps({"schema": SCHEMA, "rows": clean}, indent=1, default=str) + "\n")
    from io import StringIO

    buf = StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in clean:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    _atomic_write(path.with_suffix(".csv"), buf.getvalue())


def _coerce(row: dict) -> dict:
    out = {}
    for c in COLUMNS:
        v = row.get(c)
        if (v == "" and c in INTEGER | FLOAT) or (isinstance(v, float) and math.isnan(v)):
            v = None
        if v is not None and c in INTEGER:
            v = int(float(v))
        elif v is not None and c in FLOAT:
            v = float(v)
        out[c] = v
    return out


def load(path: str | os.PathLike) -> list[dict]:
    """Rows of a results file (.json or .csv), validated; ResultsError names what is wrong."""
    path = Path(path)
    fix = "re-run the sweep into a new file, or pass another results file"
    if not path.exists():
        raise ResultsError(f"{path}: no such results file")
    if path.stat().st_size == 0:
        raise ResultsError(f"{path}: the file is empty; {fix}")
    try:
        if path.suffix == ".csv":
            with open(path, newline="") as fh:
                raw_rows = list(csv.DictReader(fh))
            header = set(raw_rows[0]) if raw_rows else set()
            schema = SCHEMA if {"strategy", "status", "img_per_s"} <= header else None
        else:
            with open(path) as fh:
                doc = json.load(fh)
            schema = doc.get("schema") if isinstance(doc, dict) else None
            raw_rows = doc.get("rows") if isinstance(doc, dict) else None
    except (json.JSONDecodeError, UnicodeDecodeError, csv.Error) as exc:
        raise ResultsError(f"{path}: corrupt or truncated results file ({exc}); {fix}") from None
    if schema is None:
        raise ResultsError(f"{path}: not a parabench results file (no '{SCHEMA}' schema); {fix}")
    if schema != SCHEMA:
        raise ResultsError(f"{path}: results schema {schema!r}, this parabench reads {SCHEMA!r}; {fix}")
    if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
        raise ResultsError(f"{path}: 'rows' is not a list of result rows; {fix}")
    rows = []
    for i, raw in enumerate(raw_rows):
        missing = [c for c in ("strategy", "precision", "model", "batch_per_gpu", "status") if raw.get(c) in (None, "")]
        if missing:
            raise ResultsError(f"{path}: row {i} lacks {', '.join(missing)}; {fix}")
        if raw["status"] not in STATUSES:
            raise ResultsError(f"{path}: row {i} has unknown status {raw['status']!r}; {fix}")
        raw = {**LEGACY_DEFAULTS, **raw}
        try:
            rows.append(_coerce(raw))
        except (TypeError, ValueError) as exc:
            raise ResultsError(f"{path}: row {i} has a malformed number ({exc}); {fix}") from None
    return rows


def load_many(paths: list[str | os.PathLike]) -> list[dict]:
    rows = []
    for p in paths:
        rows.extend(load(p))
    return rows
