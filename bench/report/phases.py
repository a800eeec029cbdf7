"""Where a sweep's time went, in one line, from its rows' phase columns (bench/cases/schema.py
PHASES) and the sweep's wall time: measuring (warm-up and timed windows), worker start-up,
building and compiling (build_s: model, data, step, torch.compile or CUDA-graph capture),
counting (the counted step), and the rest (launching workers, imports, clean-up, writing)."""
from __future__ import annotations


def _sum(rows: list[dict], column: str) -> float:
    total = 0.0
    for row in rows:
        value = row.get(column)
        if isinstance(value, (int, float)) and value == value:
            total += value
    return total


def _s(seconds: float) -> str:
    """Whole seconds, but under a second keeps a decimal: a measured 0.3 s never reads as 0."""
    return f"{seconds:.1f}" if 0 < seconds < 0.95 else f"{seconds:.0f}"


def summary(rows: list[dict], wall_s: float) -> str:
    recorded = [r for r in rows if isinstance(r.get("timed_s"), (int, float)) and r["timed_s"] == r["timed_s"]]
    if not recorded:  # nothing measured here (every case skipped, resumed or from a worker that keeps no phases)
        return f"{_s(wall_s)} s in all (no case recorded where its time went)"
    warm, timed = _sum(rows, "warmup_s"), _sum(rows, "timed_s")
    start, build, count = _sum(rows, "worker_start_s"), _sum(rows, "build_s"), _sum(rows, "counters_s")
    rest = max(0.0, wall_s - warm - timed - start - build - count)
    return (f"{_s(wall_s)} s in all: measuring {_s(warm + timed)} s (warm-up {_s(warm)}, timed {_s(timed)}), "
            f"worker start-up {_s(start)} s, building and compiling {_s(build)} s, counting {_s(count)} s, "
            f"the rest {_s(rest)} s")
