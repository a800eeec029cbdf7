"""Where a sweep's time went, in one line, from its rows' phase columns (bench/cases/results.py
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


def summary(rows: list[dict], wall_s: float) -> str:
    warm, timed = _sum(rows, "warmup_s"), _sum(rows, "timed_s")
    start, build, count = _sum(rows, "worker_start_s"), _sum(rows, "build_s"), _sum(rows, "counters_s")
    rest = max(0.0, wall_s - warm - timed - start - build - count)
    return (f"{wall_s:.0f} s in all: measuring {warm + timed:.0f} s (warm-up {warm:.0f}, timed {timed:.0f}), "
            f"worker start-up {start:.0f} s, building and compiling {build:.0f} s, counting {count:.0f} s, "
            f"the rest {rest:.0f} s")
