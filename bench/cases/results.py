"""Result rows: one schema for every consumer, written atomically as JSON and CSV.

A results file is `NAME.json` ({"schema": ..., "rows": [...]}) with `NAME.csv` beside
it holding the same rows. Both are rewritten through a temporary file and an atomic
rename after every finished case, so an interrupted sweep keeps everything it measured.
A sweep holds an exclusive lock on the file (`NAME.json.lock`) for its whole run.

Every figure is validated on reading (finite, positive where it must be): a hand-edited
or damaged file is an error that names the file, the row and the field, never a verdict.
"""
from __future__ import annotations

import csv
import errno
import fcntl
import io
import itertools
import json
import math
import os
import re
import stat
from pathlib import Path

import strategies

from bench.cases import case as case_mod, caveats
from bench.core import stats
from bench.core.precision import PRECISIONS
from bench.workloads.data import UNITS, rate_unit, unit_of  # noqa: F401 - unit_of is read from here too
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
    "screened",  # a search's survey measured one trial only, and why ('' where all ran)
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
           "gpu_count_host", "anatomy_steps", "parameters", "host_cpus"}
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


class ResultsError(Exception):
    """A results file that cannot be used; the message names the file and the fix."""


def json_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p if p.suffix == ".json" else p.with_suffix(".json")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write through a temporary file and rename; on failure nothing is left behind and the
    old file, if any, is untouched."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _csv_text(clean: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in clean:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return buf.getvalue()


def write(path: str | os.PathLike, rows: list[dict], document: dict | None = None) -> None:
    """The rows, and beside them `document`'s sections (a search's log: bench/run/search.py)."""
    path = json_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = [{c: row.get(c) for c in COLUMNS} for row in rows]
    doc = {"schema": SCHEMA, **{k: v for k, v in (document or {}).items() if k not in ("schema", "rows")},
           "rows": clean}
    atomic_write_bytes(path, (json.dumps(doc, indent=1, default=str) + "\n").encode())
    atomic_write_bytes(path.with_suffix(".csv"), _csv_text(clean).encode())


def check_writable(path: str | os.PathLike) -> None:
    """Before the first case: can both files be written there? ResultsError names the fix."""
    path = json_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path.parent / f".{path.name}.probe", b"x")
        os.unlink(path.parent / f".{path.name}.probe")
    except OSError as exc:
        raise ResultsError(f"cannot write results in {path.parent} ({exc.strerror or exc}): "
                           f"choose a writable --out or --results-dir") from None


class Lock:
    """An exclusive lock on a results file for a whole sweep (flock: released by the kernel
    if the holder dies, so a stale lock file never blocks anyone)."""

    def __init__(self, path: str | os.PathLike):
        self.path = json_path(path).with_name(json_path(path).name + ".lock")
        self.fd = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise ResultsError(f"{json_path(self.path.with_suffix(''))} is being written by another parabench run "
                                   f"(PID {holder}): wait for it to finish, or choose another --out") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(self.fd)
            self.fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


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


# The largest results file read: a row takes about 10 kB at most (a failed case's traceback
# and output tail, 4 kB each), so this holds tens of thousands of cases; a larger file is no
# results file, and reading it whole would take the host's memory.
MAX_BYTES = 256 * 2**20
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


# The most rows a results file holds: the committed runs have at most 135 and a sweep of every
# knob a few thousand. It bounds what a reader does with a file of small rows (a million of
# them took minutes and gigabytes to answer), as MAX_BYTES bounds the file.
MAX_ROWS = 20_000


def read_text(path: Path, fix: str = "", kind: str = "results file") -> str:
    """The file's text, read only where it is a regular file of a results file's size: a pipe
    would block, a device (/dev/zero) would never end. ResultsError (one line) otherwise."""
    a_kind = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such {kind}") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise ResultsError(f"{path} is a folder: pass the results files in it ({os.path.join(path, '*.json')})")
    if not stat.S_ISREG(info.st_mode):
        raise ResultsError(f"{path} is not a regular file (a pipe, a device or a socket): pass {a_kind}")
    if info.st_size == 0:
        raise ResultsError(f"{path}: the file is empty; {fix}")
    if info.st_size > MAX_BYTES:
        raise ResultsError(f"{path} is {info.st_size / 2**20:,.0f} MiB, more than any {kind} "
                           f"({MAX_BYTES // 2**20} MiB at most): pass {a_kind}")
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES + 1).decode()
    except UnicodeDecodeError as exc:
        raise ResultsError(f"{path}: not text, so no {kind} ({exc.reason} at byte {exc.start}); {fix}") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot be read ({exc.strerror or exc})") from None


def read_json(path: str | os.PathLike, kind: str, fix: str):
    """A side file's JSON (a fit file, a probe, predictions): read with the checks a results
    file gets (no pipe, device or oversized file; text; not nested past the parser), so that
    every file the suite reads is read one way. ResultsError (one line) otherwise."""
    path = Path(path)
    text = read_text(path, fix, kind)
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ResultsError(f"{path}: cannot read {'an' if kind[0] in 'aeiou' else 'a'} {kind}: "
                           f"not JSON ({exc}); {fix}") from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply to be a {kind}; {fix}") from None


def load_document(path: str | os.PathLike, schema: str, kind: str, fix: str, lists: tuple[str, ...] = ()) -> dict:
    """A JSON file of parabench's own (a fit, an instruction count), checked: read as
    `read_json` reads, a JSON object whose `schema` is `schema`, each key of `lists` a list.
    ResultsError names what is wrong and `fix`."""
    doc = read_json(path, kind, fix)
    a_kind = f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"
    if not isinstance(doc, dict) or doc.get("schema") != schema:
        raise ResultsError(f"{path} is not {a_kind} ({schema}); {fix}")
    missing = [k for k in lists if not isinstance(doc.get(k), list)]
    if missing:
        raise ResultsError(f"{path}: {a_kind} without its {' or '.join(missing)}; {fix}")
    return doc


# Validated rows of the files read last, by (path, inode, size, modification time): a report reads
# one file for each of its parts, and validating 20,000 rows takes seconds. A file written since
# is read again; the least recently read go first beyond _LOADED_ROWS rows in all.
_LOADED: dict[tuple, list[dict]] = {}
_LOADED_ROWS = 5 * MAX_ROWS


def load(path: str | os.PathLike) -> list[dict]:
    """Rows of a results file (.json or .csv), validated; ResultsError names what is wrong.
    Each call gets rows of its own to change."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path), st.st_ino, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None
    except OSError:
        key = None
    rows = _LOADED.pop(key, None) if key else None
    if rows is None:
        rows = _load(path)
    if key:
        _LOADED[key] = rows  # the most recently read last
        while sum(map(len, _LOADED.values())) > _LOADED_ROWS and len(_LOADED) > 1:
            _LOADED.pop(next(iter(_LOADED)))
    return [dict(r) for r in rows]


def _load(path: Path) -> list[dict]:
    fix = "re-run the sweep into a new file, or pass another results file"
    text = read_text(path, fix)
    try:
        if path.suffix == ".csv":
            raw_rows = list(itertools.islice(csv.DictReader(io.StringIO(text, newline="")), MAX_ROWS + 1))
            header = set(raw_rows[0]) if raw_rows else set()
            rate = "items_per_s" if "items_per_s" in header else "img_per_s"  # a file written before units
            schema = SCHEMA if {"strategy", "status", rate} <= header else None
        else:
            doc = json.loads(text)
            schema = doc.get("schema") if isinstance(doc, dict) else None
            raw_rows = doc.get("rows") if isinstance(doc, dict) else None
    except (ValueError, csv.Error) as exc:  # JSONDecodeError, and an integer of more digits than Python reads
        raise ResultsError(f"{path}: corrupt or truncated results file ({str(exc)[:200]}); {fix}") from None
    except RecursionError:
        raise ResultsError(f"{path}: JSON nested too deeply to be a results file; {fix}") from None
    if schema is None:
        raise ResultsError(f"{path}: not a parabench results file (no '{SCHEMA}' schema); {fix}")
    if schema != SCHEMA:
        raise ResultsError(f"{path}: results schema {schema!r}, this parabench reads {SCHEMA!r}; {fix}")
    if not isinstance(raw_rows, list) or not all(isinstance(r, dict) for r in raw_rows):
        raise ResultsError(f"{path}: 'rows' is not a list of result rows; {fix}")
    if len(raw_rows) > MAX_ROWS:
        raise ResultsError(f"{path} holds more than {MAX_ROWS:,} rows, more than any sweep writes; {fix}")
    rows, seen = [], {}
    for i, raw in enumerate(raw_rows):
        where = f"{path}: row {i}"
        raw = today(raw)
        missing = [c for c in ("strategy", "precision", "model", "batch_per_gpu", "status") if raw.get(c) in (None, "")]
        if missing:
            raise ResultsError(f"{where} lacks {', '.join(missing)}; {fix}")
        if raw["status"] not in STATUSES:
            raise ResultsError(f"{where} has unknown status {raw['status']!r}; {fix}")
        if strategies.info(str(raw["strategy"])) is None:  # a typo, an edit, another checkout's strategy
            raise ResultsError(f"{where} has strategy {str(raw['strategy'])[:40]!r}, which no registered strategy is "
                               f"(this parabench knows {', '.join(strategies.names())}; one of your own goes in "
                               f"strategies/ or PARABENCH_STRATEGY_PATH: docs/extending.md); {fix}")
        if raw["precision"] not in PRECISIONS:  # every table and figure is laid out by precision
            raise ResultsError(f"{where} has unknown precision {str(raw['precision'])[:40]!r} (this parabench knows "
                               f"{', '.join(PRECISIONS)}); {fix}")
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
        key = case_mod.identity(row)
        if key in seen:  # a sweep writes one row per case: two are an edit, and which one holds is no rule's
            raise ResultsError(f"{where} measures the same case as row {seen[key]} "
                               f"({case_mod.Case.from_row(row).label()}); a results file holds one row per case: "
                               f"keep one, or put the other in a file of its own")
        seen[key] = i
        row["caveat"] = caveats.caveat(row)  # by today's rules, also for rows written before them
        row["source"] = str(path)
        rows.append(row)
    return rows


def sections(path: str | os.PathLike) -> dict:
    """A results file's sections beside its rows (e.g. "search"), {} where it has none or is a CSV.
    Read after `load` has checked the file."""
    path = Path(path)
    if path.suffix == ".csv":
        path = json_path(path)
        if not path.exists():
            return {}
    try:  # the JSON beside a CSV has not been checked: a pipe there would block
        doc = read_json(path, "results file", "")
    except ResultsError:
        return {}
    return {k: v for k, v in doc.items() if k not in ("schema", "rows")} if isinstance(doc, dict) else {}


def load_many(paths: list[str | os.PathLike]) -> list[dict]:
    rows = []
    for p in paths:
        rows.extend(load(p))
    return rows


def may_be_results(path) -> bool:
    """False for JSON that parses and is not a results file (another tool's, such as
    pytest-benchmark's saves, or parabench's instruction counts); a file that cannot be read
    or does not parse may be a damaged results file, and loading it says so."""
    try:
        doc = json.loads(read_text(Path(path)))
    except (ResultsError, ValueError, RecursionError):
        return True
    return isinstance(doc, dict) and str(doc.get("schema", "")).startswith("parabench-results")


def latest(rows: list[dict]) -> list[dict]:
    """One row per measurement (case and hardware), by the documented rule: the latest `ok`
    row wins; a case never measured ok keeps its latest row. Latest by the row's date (rows
    of several files come in file-name order, which says nothing of when they ran); rows of
    one date keep their order. Returned in date order."""
    chosen: dict[tuple, dict] = {}
    for row in sorted(rows, key=lambda r: str(r.get("date") or "")):
        key = case_mod.identity(row)
        kept = chosen.get(key)
        if kept is None or row["status"] == "ok" or kept["status"] != "ok":
            chosen.pop(key, None)
            chosen[key] = row
    return list(chosen.values())


def duplicates(rows: list[dict]) -> list[str]:
    """Labels of cases that appear more than once."""
    seen, dup = set(), []
    for row in rows:
        key = case_mod.identity(row)
        if key in seen:
            dup.append(case_mod.Case.from_row(row).label())
        seen.add(key)
    return dup
