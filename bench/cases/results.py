"""Results files: one schema for every consumer, written atomically as JSON and CSV, read
back validated.

A results file is `NAME.json` ({"schema": ..., "rows": [...]}) with `NAME.csv` beside
it holding the same rows. Both are rewritten through a temporary file and an atomic
rename after every finished case, so an interrupted sweep keeps everything it measured.
A sweep holds an exclusive lock on the file (`NAME.json.lock`) for its whole run.

What a row holds and how each is checked on reading is bench/cases/schema.py's; the safe write
and read of any file, and ResultsError (raised by all three, `results.ResultsError` to callers),
are bench/cases/fileio.py's. Here: writing, locking, loading (validated, and cached while a file
is unchanged) and choosing among the rows.
"""
from __future__ import annotations

import csv
import errno
import fcntl
import io
import itertools
import json
import os
import stat
from pathlib import Path

import strategies

from bench.cases import case as case_mod, caveats
from bench.cases.fileio import ResultsError, atomic_write_bytes, read_json, read_text
from bench.cases.schema import COLUMNS, SCHEMA, STATUSES, today, validated
from bench.core.precision import PRECISIONS


def json_path(path: str | os.PathLike) -> Path:
    p = Path(path)
    return p if p.suffix == ".json" else p.with_suffix(".json")


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


# The most rows a results file holds: the committed runs have at most 135 and a sweep of every
# knob a few thousand. It bounds what a reader does with a file of small rows (a million of
# them took minutes and gigabytes to answer), as fileio's MAX_BYTES bounds the file.
MAX_ROWS = 20_000


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
        row = validated(raw, where, fix)
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
