"""Reading and writing parabench's files safely, whatever they hold: ResultsError, the atomic write, and
the checked read.

Every file the suite writes (results, pages, figures, fits, probes) is written through a temporary
file and a rename (`atomic_write_bytes`); every file it reads is read as `read_text` reads (a
regular file of a sane size, text), and a JSON side file of its own as `read_json` and
`load_document` read it. Apart from bench/cases/results.py because none of this knows what a result
row is: fits, probes, instruction counts and the report's pages use it too.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path


class ResultsError(Exception):
    """A results file that cannot be used; the message names the file and the fix."""


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


# The largest results file read: a row takes about 10 kB at most (a failed case's traceback
# and output tail, 4 kB each), so this holds tens of thousands of cases; a larger file is no
# results file, and reading it whole would take the host's memory.
MAX_BYTES = 256 * 2**20


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
