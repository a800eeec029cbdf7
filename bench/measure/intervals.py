"""Interval arithmetic on (start, end) spans in microseconds, for the step anatomy: the
union of overlapping spans, clipping to a window, what two sets share, and a window split
into parts by layers taken in priority order."""
from __future__ import annotations


def union(intervals) -> list[tuple[float, float]]:
    """Sorted, disjoint intervals covering the same time."""
    out: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return [(a, b) for a, b in out]


def clip(intervals, start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in intervals if b > start and a < end]


def length(intervals) -> float:
    return sum(b - a for a, b in intervals)


def overlap(a: list, b: list) -> float:
    """Time covered by both of two disjoint sorted interval lists."""
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0.0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def subtract(a: list, b: list) -> list[tuple[float, float]]:
    """The parts of disjoint sorted intervals `a` that disjoint sorted intervals `b` leave."""
    out = []
    for start, end in a:
        for lo, hi in b:
            if hi <= start or lo >= end:
                continue
            if lo > start:
                out.append((start, lo))
            start = max(start, hi)
            if start >= end:
                break
        if start < end:
            out.append((start, end))
    return out


def partition_spans(window: tuple[float, float], layers: list[tuple[str, list]]) -> dict[str, list]:
    """Each layer's own intervals in `window`: the time it covers that no earlier layer covers."""
    start, end = window
    covered: list = []
    spans = {}
    for name, intervals in layers:
        mine = union(clip(intervals, start, end))
        spans[name] = subtract(mine, covered)
        covered = union(covered + mine)
    return spans


def partition(window: tuple[float, float], layers: list[tuple[str, list]]) -> dict[str, float]:
    """Split `window` among the layers in priority order: each gets the time it covers that
    no earlier layer covers; `idle` gets the rest. The parts add up to the window."""
    spans = partition_spans(window, layers)
    parts = {name: length(s) for name, s in spans.items()}
    parts["idle"] = (window[1] - window[0]) - sum(parts.values())
    return parts
