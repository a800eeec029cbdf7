"""The result row's schema: its columns, which are numbers and which text, the names of older
files' columns, and the checks every row read from a file must pass.

Every figure is validated on reading (finite, positive where it must be, a speed some device
can reach): a hand-edited or damaged file is an error that names the file, the row and the field,
never a verdict. Apart from bench/cases/results.py (writing, locking, reading and caching the
files) because what a row is, and what makes one unusable, is one question of its own.
"""
from __future__ import annotations

import json
import math
import re

from bench.cases import case as case_mod
from bench.cases.fileio import ResultsError
from bench.core import stats
from bench.workloads.data import UNITS, rate_unit, unit_of
from bench.measure.anatomy import COLUMNS as ANATOMY, FLOAT_COLUMNS as ANATOMY_FLOAT, VALUES as ANATOMY_VALUES
from bench.measure.counters import COUNTERS

SCHEMA = "parabench-results/1"
# Where a case's wall time went (seconds): the worker's start-up (first case of each
# worker only), building model, data and step, the warm-up (cuDNN autotuning and lazy
# kernel loading land here), the timed trials, and the counting step. `elapsed_s` is the
# whole case inside the worker.
PHASES = ["worker_start_s", "build_s", "warmup_s", "timed_s", "counters_s"]

FIGURES = [
    "status", "reason",
    "caveat",  # what makes an ok row's figures mislead (bench/cases/caveats.py), '' where nothing does
    # What throughput counts (bench/workloads/data.py): "images", "tokens" (or "samples"), and how many of
    # them one row of the batch holds (1 for an image, T for a sequence of T tokens). Rows written
    # before units existed counted images, one a row (LEGACY_COLUMNS).
    "unit", "items_per_sample",
    "items_per_s", "items_per_s_p10", "items_per_s_p90",
    # The median's confidence interval (bench/core/stats.py): what rankings compare.
    "items_per_s_ci_lo", "items_per_s_ci_hi",
    "wall_items_per_s", "trial_items_per_s_min", "trial_items_per_s_max",
    "step_ms_p10", "step_ms_p50", "step_ms_p90", "step_ms_mean", "n_timed_steps",
    "outliers",  # Tukey's classification of the timed steps, "" where none ("2 of 60 (2 high mild)")
    "step_ms_trials",  # every timed step in ms, ';' within a trial, '|' between trials
    # Percent of the timed trials' wall time the most capped GPU ran below its asked clocks, for its
    # power limit or its temperature (NVML's counters, bench/measure/throttle.py), and the lowest
    # enforced power limit of its GPUs (W); empty without NVML.
    "power_capped_pct", "thermal_capped_pct", "power_limit_w",
    "peak_alloc_mib", "peak_alloc_mib_min", "peak_reserved_mib",
    "peak_alloc_mib_per_device", "peak_reserved_mib_per_device",
    "parameters", "workload_source", "flops_per_item", "tflops", *COUNTERS,
    "counters_scope",  # what the counters cover: "step" (bench/measure/counters.py SCOPE), empty in older rows
    *ANATOMY, "elapsed_s", *PHASES,
    "output_tail",
    "notes",  # what the strategy did with the knobs that they alone do not say (Strategy.notes)
    "screened",  # a search's survey stopped the case after its short first trial, and why ('' where all ran)
    # A compiled case's graphs: how many of them inductor took from its cache (TORCHINDUCTOR_CACHE_DIR, which
    # persists across runs) and how many it compiled afresh during the build and warm-up, in words with the
    # cache's folder and as counts (empty when not compiled).
    "compile_cache", "graphs_from_cache", "graphs_compiled",
]
ENVIRONMENT = [
    "gpu_name", "gpu_count_host", "gpu_memory_mib", "driver", "cuda", "cudnn", "nccl", "torch", "mxnet", "numpy",
    "python", "host", "cpu", "platform", "git_commit", "date", "command", "run_id",
    "hosts", "node_gpu_names",  # every node's host name and GPU model (or CPU), in node order
    "gpu_topology", "host_memory_gib", "torch_git", "environment",  # NCCL_* etc. in force, as JSON
    "worker_scope",  # which cases shared the worker (bench/cases/case.py WORKER_SCOPES)
    "cpus_per_rank",  # the CPUs each rank ran on ("0-15;16-31", rank order; the cpu_bind knob)
    # The host's 1-minute load average (node 0) when the run started and when this case ended (the
    # last row's: the run's end), and its usable CPUs: a busy host disturbs every figure.
    "load_avg_start", "load_avg_end", "host_cpus",
]
COLUMNS = list(case_mod.COLUMNS) + FIGURES + ENVIRONMENT
STATUSES = ("ok", "oom", "error", "timeout", "skipped")
INTEGER = {*COUNTERS[:-1], "items_per_sample", "n_gpus", "n_replicas", "nnodes", "gpus_per_node", "world_size",
           "batch_per_gpu", "warmup",
           "steps", "trials", "seed", "global_batch", "n_timed_steps",
           "gpu_count_host", "anatomy_steps", "parameters", "host_cpus", "graphs_from_cache", "graphs_compiled"}
FLOAT = {
    "items_per_s", "items_per_s_p10", "items_per_s_p90", "items_per_s_ci_lo", "items_per_s_ci_hi", "wall_items_per_s",
    "trial_items_per_s_min", "trial_items_per_s_max",
    "step_ms_p10", "step_ms_p50", "step_ms_p90", "step_ms_mean", "peak_alloc_mib", "peak_alloc_mib_min",
    "peak_reserved_mib", "flops_per_item", "tflops", "elapsed_s", "gpu_memory_mib", "alloc_mib_per_step",
    *PHASES,
} | ANATOMY_FLOAT | {"host_memory_gib", "load_avg_start", "load_avg_end", "power_capped_pct", "thermal_capped_pct",
                     "power_limit_w"}
AT_LEAST_ONE = {"items_per_sample", "batch_per_gpu", "global_batch", "n_replicas", "nnodes", "steps", "trials"}
# Figures an `ok` row must have, finite and above zero.
REQUIRED_POSITIVE = ("items_per_s", "items_per_s_p10", "items_per_s_p90", "step_ms_p10", "step_ms_p50", "step_ms_p90")
# Figures that, where present, must be finite and not negative.
NON_NEGATIVE = FLOAT - set(REQUIRED_POSITIVE) - {"anatomy_vs_timed_pct"}
# Version fields stay text (CUDA "13.0", not the float 13.0) when a CSV is read back.
TEXT = {"cuda", "cudnn", "nccl", "torch", "mxnet", "numpy", "python", "driver", "gpus", "git_commit", "torch_git",
        "worker_scope", "workload_source", "cpus_per_rank", "caveat", "reason", "date", "gpu_name", "host", "hosts",
        "node_gpu_names", "cpu", "platform", "command", "run_id", "gpu_topology", "environment", "output_tail",
        "outliers", "step_ms_trials", "counters_scope", "unit"}
# Text fields that name what ran and where: shown in headings, table cells and the answer's first
# line, they hold no line breaks, no control characters and none of Markdown's and HTML's own
# characters (a model named 'm|x\n## heading' broke REPORT.md's tables and made a heading of its own).
LABELS = ("strategy", "model", "gpu_name", "node_gpu_names", "cpu", "host", "hosts", "platform", "device")
LABEL_REFUSED = re.compile(r"[\x00-\x1f\x7f-\x9f|<>`]")
# Any other text may span lines (a traceback, nvidia-smi's topology), but a sweep writes no other
# control character: an escape sequence would reach the terminal that prints it.
TEXT_REFUSED = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Text fields that hold a JSON object.
JSON_OBJECTS = ("options", "environment")
# A step anatomy comes whole: the profiled step, its parts and its distance from the timed step.
ANATOMY_TOGETHER = [f"anatomy_{v}_ms" for v in ANATOMY_VALUES] + ["anatomy_vs_timed_pct"]


# Columns of rows written before throughput had a unit (all of them counted images, one a row), and
# their names now: such files (the committed reference set, CI baselines, anyone's old runs) read
# as rows of today's schema.
LEGACY_COLUMNS = {"img_per_s": "items_per_s", "img_per_s_p10": "items_per_s_p10", "img_per_s_p90": "items_per_s_p90",
                  "img_per_s_ci_lo": "items_per_s_ci_lo", "img_per_s_ci_hi": "items_per_s_ci_hi",
                  "wall_img_per_s": "wall_items_per_s", "trial_img_per_s_min": "trial_items_per_s_min",
                  "trial_img_per_s_max": "trial_items_per_s_max", "flops_per_image": "flops_per_item"}
LEGACY_UNIT = {"unit": "images", "items_per_sample": 1}


def today(raw: dict) -> dict:
    """A row (or a search log's entry) under today's column names: a legacy `img_per_s` is `items_per_s`
    and so on, in images one a row; a row of today's schema comes back as it is."""
    if not any(old in raw for old in LEGACY_COLUMNS):
        return raw
    out = {LEGACY_COLUMNS.get(k, k): v for k, v in raw.items()
           if not (k in LEGACY_COLUMNS and LEGACY_COLUMNS[k] in raw)}
    for k, v in LEGACY_UNIT.items():
        if out.get(k) in (None, ""):
            out[k] = v
    return out


def today_log(log: dict) -> dict:
    """A search's log (bench/run/search.py) under today's names: its measurements' and levers' rates
    as `items_per_s` (`base_items_per_s`), where a log written before units says img_per_s."""
    def entry(e):
        if not isinstance(e, dict):
            return e
        e = today(e) if any(old in e for old in LEGACY_COLUMNS) else e
        return {("base_items_per_s" if k == "base_img_per_s" else k): v for k, v in e.items()}

    return {k: [entry(e) for e in v] if isinstance(v, list) else v for k, v in log.items()}


def _shown(value) -> str:
    """A field's value as an error message shows it: at most 40 characters of it."""
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:37]}... ({len(text):,} characters)"


def _coerce(row: dict, where: str, fix: str) -> dict:
    out = {}
    for c in COLUMNS:
        v = row.get(c)
        if isinstance(v, (list, dict)):  # every field is one value: a list or a table breaks whatever reads it
            raise ResultsError(f"{where}: field {c} is a {type(v).__name__}, not a single value; {fix}")
        if v == "" and c in INTEGER | FLOAT:
            v = None
        if isinstance(v, float) and math.isnan(v) and c not in FLOAT | INTEGER:
            v = None  # an empty text cell as a table library reads it
        if v is not None and c in INTEGER:
            number = float(v)
            if not math.isfinite(number):  # NaN and infinity are no count: never None, never skipped
                raise ResultsError(f"{where}: field {c} is {_shown(v)}, not a usable figure; {fix}")
            v = int(number)
        elif v is not None and c in FLOAT:
            v = float(v)
        elif v is not None and c in TEXT:
            v = str(v)
        out[c] = v
    for c, v in out.items():
        found = (LABEL_REFUSED if c in LABELS else TEXT_REFUSED).search(v) if isinstance(v, str) else None
        if found:
            raise ResultsError(f"{where}: field {c} holds {found.group(0)!r}, which no sweep writes there; {fix}")
    for c in JSON_OBJECTS:
        if out.get(c) not in (None, ""):
            try:
                parsed = json.loads(out[c])
            except (TypeError, ValueError, RecursionError):
                parsed = None
            if not isinstance(parsed, dict):
                raise ResultsError(f"{where}: field {c} is {str(out[c])[:40]!r}, not a JSON object; {fix}")
    return out


def _counts(row: dict, where: str, fix: str) -> None:
    """Counts as the file holds them (before the case columns are derived from them): none below
    0, and a batch, a replica, a node, a step or a trial at least 1."""
    for c in sorted(INTEGER):
        v = row.get(c)
        if v is not None and v < (1 if c in AT_LEAST_ONE else 0):
            raise ResultsError(f"{where}: field {c} is {_shown(v)}, not a usable count; {fix}")


def _validate(row: dict, where: str, fix: str) -> None:
    """Every figure finite, and positive where a measurement must be; a spread that holds its
    median; JSON fields that parse to an object."""
    for c in FLOAT:
        v = row.get(c)
        if v is not None and (not math.isfinite(v) or (c in NON_NEGATIVE and v < 0)):
            raise ResultsError(f"{where}: field {c} is {_shown(v)}, not a usable figure; {fix}")
    if row.get("anatomy_step_ms") is not None:
        missing = [c for c in ANATOMY_TOGETHER if row.get(c) is None]
        if missing:
            raise ResultsError(f"{where} has a step anatomy without {', '.join(missing)}; {fix}")
    if row.get("unit") not in (None, "") and row["unit"] not in UNITS:
        raise ResultsError(f"{where}: field unit is {_shown(row['unit'])}, not one of {', '.join(UNITS)}; {fix}")
    if row["status"] == "ok":
        for c in REQUIRED_POSITIVE:
            v = row.get(c)
            if v is None or not v > 0:
                raise ResultsError(f"{where}: field {c} of an ok row is {v!r}; it must be a positive number; {fix}")
        for low, mid, high in (("items_per_s_p10", "items_per_s", "items_per_s_p90"),
                               ("step_ms_p10", "step_ms_p50", "step_ms_p90")):
            # Rounding of a written figure may move it by an ulp or so; a spread beside its median is no spread.
            if not (row[low] <= row[mid] * (1 + 1e-9) and row[mid] <= row[high] * (1 + 1e-9)):
                raise ResultsError(f"{where}: {mid} {row[mid]:g} lies outside {low}-{high} "
                                   f"({row[low]:g}-{row[high]:g}): no measured spread is like that; {fix}")
        lo, hi = row.get("items_per_s_ci_lo"), row.get("items_per_s_ci_hi")
        if (lo is None) != (hi is None) or (lo is not None
                                            and not lo <= row["items_per_s"] * (1 + 1e-9) <= hi * (1 + 2e-9)):
            raise ResultsError(f"{where}: the median's interval items_per_s_ci_lo-items_per_s_ci_hi ({lo}-{hi}) does "
                               "not "
                               f"hold its median {row['items_per_s']:g}; {fix}")
        if row.get("step_ms_trials"):
            try:
                steps = sum(len(t) for t in stats.parse_series(row["step_ms_trials"]))
            except ValueError:
                raise ResultsError(f"{where}: field step_ms_trials is {row['step_ms_trials'][:40]!r}, "
                                   f"not step times in ms ('1.2;1.3|1.2;1.4'); {fix}") from None
            if row.get("n_timed_steps") is not None and steps != row["n_timed_steps"]:
                raise ResultsError(f"{where}: step_ms_trials holds {steps} steps, n_timed_steps says "
                                   f"{row['n_timed_steps']}; {fix}")


# What no measurement can be: more devices than any cluster has, or a device that trains faster than
# 10 PFLOP/s (ten times an H200's dense bf16 peak); without a FLOP count, ten billion items a second
# per device (the suite's image workloads are 2.7 GFLOP an image and up, its smallest GPT 0.9 MFLOP a token).
MAX_DEVICES = 65_536
MAX_FLOPS_PER_DEVICE = 1e16
MAX_ITEMS_PER_S = 1e10
# How far a row's rate may lie from its global batch's items over its median step (the rounding of a CSV).
STEP_AGREEMENT = 0.01


def _sense(row: dict, where: str, fix: str) -> None:
    """Figures a measurement can have: a device count within the host's (and any cluster's), a
    speed no device reaches refused."""
    for c in ("n_gpus", "n_replicas", "world_size"):
        if row.get(c) is not None and row[c] > MAX_DEVICES:
            raise ResultsError(f"{where}: field {c} is {row[c]:,}, more devices than any cluster has; {fix}")
    host, nodes = row.get("gpu_count_host"), row.get("nnodes") or 1
    if row.get("n_gpus") and host and row["n_gpus"] > host * nodes:
        raise ResultsError(f"{where}: {row['n_gpus']} GPUs on {nodes} host(s) of {host} GPUs; {fix}")
    if row["status"] != "ok":
        return
    fastest = row["items_per_s_p90"]
    devices = row.get("n_gpus") or row.get("n_replicas") or 1
    flops = row.get("flops_per_item")
    rate = rate_unit(row)
    if flops and fastest * flops / devices > MAX_FLOPS_PER_DEVICE:
        raise ResultsError(f"{where}: {fastest:.3g} {rate} of {flops:.3g} FLOP each is "
                           f"{fastest * flops / devices:.3g} FLOP/s per device, beyond any device "
                           f"({MAX_FLOPS_PER_DEVICE:.0e}); {fix}")
    if not flops and fastest / devices > MAX_ITEMS_PER_S:
        raise ResultsError(f"{where}: {fastest:.3g} {rate}, beyond what any device trains; {fix}")
    batch, step = row.get("global_batch"), row.get("step_ms_p50")
    items = (batch or 0) * (row.get("items_per_sample") or 1)
    if batch and step and not math.isclose(row["items_per_s"], items * 1000 / step, rel_tol=STEP_AGREEMENT):
        # The row's rate is its global batch's items over its median step (bench/core/stats.py `summarize`).
        raise ResultsError(f"{where}: {row['items_per_s']:.4g} {rate}, where its median step of {step:.4g} ms at a "
                           f"global batch of {batch} ({items} {unit_of(row).name}) makes {items * 1000 / step:.4g}; "
                           f"{fix}")


def validated(raw: dict, where: str, fix: str) -> dict:
    """A row read from a file (under today's names) as the suite uses it: each field of its type, the
    case columns as today's Case reads them, every figure checked. ResultsError names `where`, the
    field and `fix`."""
    try:
        row = _coerce(raw, where, fix)
        _counts(row, where, fix)
        # The case columns as today's Case reads them (settings a row predates get their
        # default there; `raw` keeps the columns of older schemas, such as `compile`).
        row.update(case_mod.Case.from_row({**raw, **row}).row())
    except (TypeError, ValueError, OverflowError) as exc:
        raise ResultsError(f"{where} has a malformed number ({exc}); {fix}") from None
    _validate(row, where, fix)
    _sense(row, where, fix)
    return row
