"""Whether the host was busy with other work when a run started, from its rows' load averages
(bench/cases/schema.py: load_avg_start, load_avg_end, host_cpus). The run's own workers load
the host too, so the start is what tells of others; the end is shown beside it."""
from __future__ import annotations

import math

# Busy: other work kept at least half the host's CPUs runnable when the run started (the load
# average counts every CPU of the host, not only those this process may use).
BUSY_SHARE = 0.5


def _number(value) -> float | None:
    return (float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            else None)


def busy(rows: list[dict]) -> tuple[float, int, float | None] | None:
    """(load average at the start, CPUs, load average at the end) where the host was busy at
    the run's start, else None."""
    recorded = [r for r in rows if _number(r.get("load_avg_start")) is not None and _number(r.get("host_cpus"))]
    if not recorded:
        return None
    start, cpus = _number(recorded[0]["load_avg_start"]), int(_number(recorded[0]["host_cpus"]))
    if start < BUSY_SHARE * cpus:
        return None
    return start, cpus, _number(recorded[-1].get("load_avg_end"))


def busy_short(rows: list[dict]) -> str | None:
    """busy_line in one line of the report's first screen."""
    found = busy(rows)
    return None if found is None else (f"The host was busy (load average {found[0]:.1f} on {found[1]} CPUs): every "
                                       "figure may be disturbed; re-run on an idle host.")


def busy_line(rows: list[dict], name: str = "the run") -> str | None:
    """One sentence where the host was busy at the run's start, else None."""
    found = busy(rows)
    if found is None:
        return None
    start, cpus, end = found
    return (f"The host was busy when {name} started: load average {start:.1f} on {cpus} CPUs"
            + (f" ({end:.1f} at its end)" if end is not None else "")
            + ": other work shared the machine, so every figure may be disturbed; re-run on an idle host.")
