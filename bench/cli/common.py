"""What every command shares: the one-line usage error, list parsing, GPU selection."""
from __future__ import annotations

import math
from pathlib import Path

# In the working directory, also when parabench is installed as a package (never inside it).
RESULTS_DIR = Path("results")


class UsageError(Exception):
    """Bad input: one line that names the fix."""


def resume_command(out) -> str:
    """The command that goes on with this one, ready to paste into a shell: this interpreter (the
    one that has torch), the same command and arguments, `--resume` and `--out OUT`, each word quoted."""
    import shlex
    import sys

    kept, words = [], iter(sys.argv[1:])
    for word in words:
        if word == "--resume" or word.startswith("--out="):
            continue
        if word == "--out":
            next(words, None)
            continue
        kept.append(word)
    return shlex.join([sys.executable, "-m", "bench", *kept, "--resume", "--out", str(out)])


def csv(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def listed(text: str | None, flag: str) -> list[str] | None:
    """A list flag's items; None where the flag was not given (its default applies). Given
    empty, or naming an item twice, it is refused: an empty list is not "everything", and a
    repeated item would measure one case twice."""
    if text is None:
        return None
    items = csv(text)
    if not items:
        raise UsageError(f"{flag} is empty: name at least one, or leave {flag} out for its default")
    if len(items) != len(text.split(",")):
        raise UsageError(f"{flag} {text!r} has an empty item between its commas: write each one once, "
                         f"e.g. {','.join(items)}")
    twice = sorted({x for x in items if items.count(x) > 1})
    if twice:
        raise UsageError(f"{flag} lists {', '.join(twice)} more than once: name each once")
    return items


def ints(text: str, what: str) -> list[int]:
    items = listed(text, what)
    try:
        values = [int(x) for x in items]
    except ValueError:
        raise UsageError(f"{what} must be comma-separated whole numbers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise UsageError(f"{what} must be positive, got {text!r}")
    if len(set(values)) < len(values):
        raise UsageError(f"{what} lists a number more than once ({text!r}): name each once")
    return values


def resolve_gpus(text: str | None) -> list[int]:
    """GPU ids from --gpus ('' or 'cpu': none; 'all' or unset: every visible GPU)."""
    from bench.measure import envinfo

    if text is not None and text.strip().lower() in ("", "cpu", "none"):
        return []  # without asking torch: a CPU sweep's parent never imports it
    available = envinfo.gpu_count()
    if text is None or text.strip().lower() == "all":
        return list(range(available))
    try:
        ids = [int(x) for x in csv(text)]
    except ValueError:
        raise UsageError(f"--gpus takes CUDA ordinals such as 0,1, got {text!r}") from None
    if len(set(ids)) != len(ids):
        raise UsageError(f"--gpus lists a GPU twice: {text!r}")
    missing = [i for i in ids if i < 0 or i >= available]
    if missing:
        have = f"{available} GPU{'s' if available != 1 else ''}" + (f" (ids 0-{available - 1})" if available else "")
        raise UsageError(f"GPU id {missing[0]} does not exist: this host has {have}; "
                         "pass --gpus with ids from that range"
                         + ("" if available else " or leave it empty for the CPU"))
    return ids


def fraction(text, flag: str, zero_allowed: bool = False) -> float:
    """A threshold given as a fraction (0.05) or a percentage ("5%"), inside (0, 1): a value of
    1 or more, or of 0 where 0 means nothing, would make the check it sets vacuous."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = math.nan
    low = "0 <=" if zero_allowed else "0 <"
    if not (math.isfinite(value) and (value >= 0 if zero_allowed else value > 0) and value < 1):
        raise UsageError(f"{flag} is a fraction with {low} x < 1 (0.05 or 5%), got {text}: "
                         "a value outside it would let every change pass")
    return value


def check_names(given: list[str], valid: list[str], what: str, flag: str) -> list[str]:
    for name in given:
        if name not in valid:
            raise UsageError(f"unknown {what} {name!r}: choose from {', '.join(valid)} ({flag})")
    return given


def write_json(path: str, payload) -> None:
    from bench.report import compare

    try:
        compare.write_json(path, payload)
    except OSError as exc:
        raise UsageError(f"cannot write {path} ({exc.strerror or exc}): choose a writable path") from None


def refuse_knobs_models_cannot_take(settings, models: list[str]) -> None:
    """A knob asked for explicitly that a model cannot take, refused before anything runs (one line
    that names the fix): channels_last lays out 4-D image batches, and a language model has none."""
    from bench import workloads

    if settings.channels_last in ("on", True):
        flat = [m for m in models if (data := workloads.data_of(m)) is not None and not data.spatial]
        if flat:
            data = workloads.data_of(flat[0])
            raise UsageError(f"--channels-last lays out 4-D image batches; {flat[0]} takes {data.describe()}: "
                             "leave --channels-last out (or give its models a run of their own)")
