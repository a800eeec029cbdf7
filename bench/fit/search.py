"""The largest batch per device that fits, found with as few probes as the memory allows.

A probe runs the training step at one batch size and says whether it fit (`ok`) or ran out
of memory (`oom`), with its peak memory; a probe that fit with less than the headroom to spare
(`tight`: a real process's allocator may fragment more than the probe's did) or failed otherwise
(`error`, `timeout`) counts as not fitting, and `max_errors` failures other than memory end the
search. Memory grows about linearly
with the batch (the training state is fixed, activations are per image), so a line through
what fit predicts where the limit is: its slope between the largest batch that ran and the
largest at 3/4 of it or less (else the slope found at another device count or strategy,
`slope_mib`: activations per image do not change with n, or one a count's own nearer probes
give where that is lower), anchored at the largest batch's memory. The line
is drawn on what a probe's verdict weighs (`needed`: the larger of its peak allocated and
reserved, plus its largest block, bench/fit/worker.py `judged`), so that it aims where verdicts
turn from fits to tight: on one H200 resnet18's largest block was a quarter of its peak, and a
line on allocated memory alone aimed 40% past the batches that were promised. The next probe
goes just under the predicted limit, the one after just over it. Below the first batch that failed near the line (or
the largest batch of the count before, where it fails at this one), one probe goes a resolution
under it; then bisection closes what is left, until
the smallest batch that failed is within `resolution` (a fraction) of the largest that fit.

Pure: no torch, no processes; the worker runs it, and the parent replays it after a worker
died in a probe (the probes so far are all it needs).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

FITS = "ok"
TIGHT = "tight"  # it ran, with less than the headroom to spare (bench/fit/worker.py): not promised
FAILED = ("oom", "error", "timeout", TIGHT)
# A failure this close to the line's predicted limit is the line's own small error.
NEAR_LINE = 0.10


@dataclass(frozen=True)
class Search:
    limit_mib: float  # the memory a probe may use up to (the device's or the budget, less any headroom)
    first: tuple[int, ...] = (8, 64)  # the small batches the line starts from
    resolution: float = 0.02  # stop once (smallest failed - largest fit) <= resolution x largest fit
    max_batch: int = 65536  # the search's ceiling: a batch that fits there is reported as "at least"
    max_errors: int = 2  # failures other than out of memory that end the search (a broken case)
    max_jump: int = 8  # a probe goes at most this many times past the largest batch that fit
    slope_mib: float | None = None  # MiB per image measured at another device count or strategy
    asked_mib: float | None = None  # what the first batch asked at the count or strategy before (`asked`)

    def at_next_count(self, probes: list[dict]) -> "Search":
        """The search for the next device count of the same case: it starts at the largest batch
        that fit here (the memory per device does not grow with n), with this count's slope; where
        that batch asks no less memory there (ddp's, the same at every n >= 2), next at the
        smallest batch above it that did not fit for want of memory (tight or out of memory; not
        one that errored or hung), which closes the search where this one finished. Both are
        batches the worker has run, whose rows it holds and whose kernels it has chosen: on one
        H200 resnet18's probes at a batch run before took 2.3-2.7 s, at a new one near the
        limit 8.8-19.6 s."""
        lo, hi = bracket(probes)
        slope = measured_slope(probes) or self.slope_mib or measured_slope(probes, near=True)
        if not lo:
            return dataclasses.replace(self, slope_mib=slope)
        at_lo = next((p for p in _ok(probes) if p["batch"] == lo), None)
        short = hi is not None and next(p for p in probes if p["batch"] == hi)["status"] in ("oom", TIGHT)
        return dataclasses.replace(self, first=(lo, hi) if short else (lo,), slope_mib=slope,
                                   asked_mib=None if at_lo is None else asked(at_lo))


def start_after(how: Search, before: list[dict] | None) -> Search:
    """The search of a strategy at its first device count, after another strategy of the same model
    and precision searched there (`before`, its probes): it starts at the largest batch that fit
    for that one, with its slope, as the next device count does (`at_next_count`); the strategies
    differ there by what their state holds, a few percent (gpt2-1.5b on one H200: ddp, zero1 and
    fsdp2 all fit 31 sequences, after 10 probes each from the line's first batches). The start
    only saves probes: from any start the search closes on a batch that fit and one within its
    resolution above it that did not. A worker started again after the strategy before finished
    in another is handed those probes in its plan (bench/fit/spec.py FitItem.after)."""
    if not before or not bracket(before)[0]:
        return how
    return how.at_next_count(before)


def needed(probe: dict) -> float:
    """MiB a probe's verdict weighs (bench/fit/worker.py `judged`): the larger of its peak allocated
    and peak reserved, plus its largest block, which a real run may need afresh (none on the CPU)."""
    return max(probe["peak_alloc_mib"], probe.get("peak_reserved_mib") or 0.0) + (probe.get("largest_block_mib") or 0.0)


def asked(probe: dict) -> float:
    """MiB a probe's step asked of its allocator: its peak allocated plus its largest block."""
    return probe["peak_alloc_mib"] + (probe.get("largest_block_mib") or 0.0)


def _ok(probes: list[dict]) -> list[dict]:
    """The probes that ran to their end (tight ones too: their peaks are measured), by batch; not
    one whose largest block is unknown (its allocator freed its cache to retry)."""
    return sorted((p for p in probes if p["status"] in (FITS, TIGHT) and p.get("peak_alloc_mib") is not None
                   and not ("largest_block_mib" in p and p["largest_block_mib"] is None)), key=lambda p: p["batch"])


def bracket(probes: list[dict]) -> tuple[int, int | None]:
    """(largest batch that fit or 0, smallest batch above it that failed or None)."""
    lo = max((p["batch"] for p in probes if p["status"] == FITS), default=0)
    failed = [p["batch"] for p in probes if p["status"] in FAILED and p["batch"] > lo]
    return lo, min(failed, default=None)


def smallest_oom(probes: list[dict]) -> int | None:
    """The smallest batch above the largest that fit that ran out of memory with all of the memory
    (a tight probe ran: a real run there may fit, so only this is a "fails")."""
    lo, _ = bracket(probes)
    return min((p["batch"] for p in probes if p["status"] == "oom" and p["batch"] > lo), default=None)


def measured_slope(probes: list[dict], weigh=needed, near: bool = False) -> float | None:
    """MiB per image near the largest batch that fit: between it and the largest that fit at
    3/4 of it or less, on what a verdict weighs (`needed`); None without such a pair (the slope
    carried from another count or strategy serves then), unless `near` takes the nearest below
    it. Between two batches a step apart the reserved memory's noise is the slope: resnet18's
    read 16 to 104 MiB an image where it is about 18. Small batches peak in the optimiser's step,
    where activations are gone, so a slope taken there alone is too low; the search's jumps are
    capped for that reason."""
    ok = _ok(probes)
    if len(ok) < 2 or ok[0]["batch"] == ok[-1]["batch"]:
        return None
    top = ok[-1]
    other = next((p for p in reversed(ok[:-1]) if p["batch"] <= 0.75 * top["batch"]), ok[-2] if near else None)
    if other is None:
        return None
    slope = (weigh(top) - weigh(other)) / (top["batch"] - other["batch"])
    return slope if slope > 0 else None


def predicted_limit(probes: list[dict], search: Search) -> float | None:
    """The batch at which the line reaches the limit, or None without a line; anchored at the
    largest batch's `needed` memory (the module's docstring says why). Where two fits lie at the
    line's limit and no probe was tight, reserved memory has stopped growing with the batch (a
    caching allocator holds memory up to the limit, and without headroom such a probe still
    fits): the line is drawn on what the step asked of its allocator instead (`asked`). With
    headroom such probes are tight, and the line stays. On one H100, with verdicts on allocated
    memory alone, a line on reserved memory crept up 1% a probe."""
    ok = _ok(probes)
    slope = measured_slope(probes) or search.slope_mib
    if not ok or not slope:
        return None
    nearer = measured_slope(probes, near=True)
    if search.slope_mib and nearer and nearer < slope:
        # This count's own probes say its memory grows more slowly than the slope carried to it:
        # a guess short of the limit would creep. Down by half at most a guess (their slope is noisy).
        slope = max(nearer, slope / 2)
    top, weigh = ok[-1], needed
    at_limit = [p for p in ok if p["status"] == FITS
                and search.limit_mib - needed(p) < slope * _resolution(p["batch"], search)]
    if len(at_limit) >= 2 and not any(p["status"] == TIGHT for p in probes):
        weigh, slope = asked, measured_slope(probes, asked) or slope
    return top["batch"] + (search.limit_mib - weigh(top)) / slope


def _resolution(lo: int, search: Search) -> int:
    return max(1, math.floor(lo * search.resolution))


def _back(failed: int, search: Search) -> int:
    """How far under a failed batch to probe so that, if it fits, the search is done."""
    return max(1, math.floor(failed * search.resolution / (1 + search.resolution)))


def _worth_repeating(start: int, probes: list[dict], search: Search) -> bool:
    """Whether to probe `start`, a first batch. The batch that failed at the count before
    (`at_next_count`) only where the batch that fit there asks no less memory here (half a step's
    worth less at most, or half the resolution of it without a slope): where memory per device
    fell, the line goes further."""
    if search.asked_mib is None or start == search.first[0]:
        return True
    here = next((p for p in _ok(probes) if p["batch"] == search.first[0]), None)
    if here is None:
        return False
    step = _resolution(here["batch"], search)
    slack = search.slope_mib * step / 2 if search.slope_mib else search.asked_mib * search.resolution / 2
    return asked(here) >= search.asked_mib - slack


def done(probes: list[dict], search: Search) -> bool:
    lo, hi = bracket(probes)
    if sum(p["status"] in ("error", "timeout") for p in probes) >= search.max_errors:
        return True
    if hi is None:
        return lo >= search.max_batch
    return hi == 1 or hi - lo <= _resolution(lo, search)


def next_batch(probes: list[dict], search: Search) -> int | None:
    """The batch to probe next, or None when the search is over."""
    if done(probes, search):
        return None
    tried = {p["batch"] for p in probes}
    lo, hi = bracket(probes)
    if lo == 0:  # nothing fit yet: the first batch, then halve below what failed
        if hi is None:
            return search.first[0]
        carried = search.slope_mib is not None and hi == search.first[0]
        if carried and sum(p["status"] in FAILED for p in probes) == 1:
            # The largest batch of the count before failed here: what this count holds beyond it (the
            # communicator's reserve, DDP's buckets) is a few percent of the memory, so one probe a
            # resolution under it first. On one H200 vit-large's 809 fit at n = 1 and failed at n = 2,
            # and halving took six more probes to reach the 796 that fit.
            return max(1, hi - _back(hi, search))
        return max(1, hi // 2)
    upper = hi if hi is not None else search.max_batch + 1  # no probe at or past it
    reach = min(upper, search.max_jump * lo + 1)
    for start in search.first:
        if start not in tried and lo < start < reach and _worth_repeating(start, probes, search):
            return start
    # On what a verdict weighs, reserved memory included: a caching allocator near the limit holds
    # memory up to it, and such a probe is tight, not a fit. (While verdicts weighed allocated
    # memory alone, a line on reserved memory put the limit just past every batch that fit: on one
    # H100, resnet18's search crept up 1% a probe.)
    predicted = predicted_limit(probes, search)
    if predicted is not None:
        step = _resolution(lo, search)
        # Just under the predicted limit (a fit there leaves little to close), then just over it.
        # Below a batch that failed, only a guess more than a step below it: the line was wrong there.
        below = reach if hi is None else hi - step
        # Each a step past the largest fit at least: closer, a fit there gains less than the
        # resolution, and the search would creep.
        for guess in (math.floor(predicted - step / 4), max(math.ceil(predicted + step / 4), lo + step)):
            if lo + step <= guess < min(reach, below) and guess not in tried:
                return guess
    if hi is None:  # the line points past the jump, or there is none (a flat start): as far as a jump goes
        return min(search.max_jump * lo, search.max_batch)
    middle = (lo + hi) // 2
    near = [] if predicted is None else [p["batch"] for p in probes if p["status"] in FAILED and p["batch"] > lo
                                         and abs(p["batch"] / predicted - 1) <= NEAR_LINE]
    if near == [hi]:
        # The line's guess failed, and nothing else near it: the limit most often lies just under it
        # (what the allocator needs beyond its peak, and fragmentation, are not on the line). One probe
        # a resolution below the failure closes the search if it fits; if not, bisection goes on, one
        # probe later than it would have. On one H200 timm:resnet50 failed at the line's 3328, and
        # bisection from 512 took six probes of 12-19 s to reach 3284.
        if hi - _back(hi, search) > middle:
            return hi - _back(hi, search)
    return middle


def run(search: Search, probe, probes: list[dict] | None = None) -> list[dict]:
    """Probe until the search is over; `probe(batch)` returns the probe's fields."""
    probes = list(probes or [])
    while (batch := next_batch(probes, search)) is not None:
        probes.append({"batch": batch, **probe(batch)})
    return probes


def outcome(probes: list[dict], search: Search) -> dict:
    """What the search found: the largest batch that fit, the smallest that failed above it,
    whether the search is over, and the two in words."""
    lo, hi = bracket(probes)
    errors = [p for p in probes if p["status"] in ("error", "timeout")]
    finished = done(probes, search)
    out = {"largest_fit": lo or None, "smallest_failed": hi, "smallest_oom": smallest_oom(probes),
           "probes": len(probes), "finished": finished}
    if not probes:
        out["said"] = "not measured"
    elif lo == 0:
        out["said"] = ("nothing fits, not even batch 1" if hi == 1 and not errors
                       else f"no batch ran ({errors[-1]['status']})" if errors and finished else "not finished")
    elif hi is None:
        out["said"] = (f"at least {lo} (the search's ceiling)" if lo >= search.max_batch
                       else f"at least {lo} (then {errors[-1]['status']})" if errors
                       else f"at least {lo} (not finished)")
    else:
        failed = next(p for p in probes if p["batch"] == hi)
        out["said"] = f"{lo} ({failed['status']} at {hi}" + (")" if finished else ", not finished)")
    return out
