"""The cost of a collective: a latency + bandwidth (alpha-beta) model of ring algorithms.

NCCL's tests define the convention: a collective on a message of S bytes among n ranks
pushes factor(n) x S bytes through every rank's link, with factor 2(n-1)/n for a ring
all-reduce (a reduce-scatter then an all-gather) and (n-1)/n for a reduce-scatter or an
all-gather (S is the whole tensor: the reduce-scatter's input, the all-gather's output),
and 1 for a broadcast (every rank but the root receives S and passes it on).
The bus bandwidth, factor x S / time, is then the same for every n on a ring, which is what
lets a fit at one device count speak for another.

time(S, n) = alpha(n) + factor(n) x S / busbw

alpha(n) is the latency: a fixed part (launching the collective) and one hop per ring
step, 2(n-1) steps for an all-reduce and n-1 for the others. Fits at two or more counts
separate the two parts (least squares of alpha against the steps); a fit at one count
cannot, and its latency is taken as fixed: NCCL's small-message latency on NVLink grows
far slower with the count than one hop per step.
Across hosts the collective is hierarchical: inside each host a ring over its GPUs, across
hosts a ring over the hosts in which every GPU of a host moves its shard at once, so that
the host's network carries factor(hosts) x S per collective.

Times are in milliseconds, sizes in bytes, bandwidths in GB/s (1e9 bytes per second).
No torch: the CLI and the tests read and fit probes without it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def bus_factor(collective: str, n: int) -> float:
    """Bytes through each rank's link per byte of message (NCCL-tests' bus bandwidth factor)."""
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}: one of {', '.join(COLLECTIVES)}")
    if n <= 1:
        return 0.0
    if collective == "broadcast":
        return 1.0
    return (2 if collective == "all_reduce" else 1) * (n - 1) / n


def ring_steps(collective: str, n: int) -> int:
    """Steps of the ring, each one hop's latency: 2(n-1) for all-reduce, n-1 otherwise (a
    broadcast's pipeline fills in n-1 hops)."""
    if n <= 1:
        return 0
    return (2 if collective == "all_reduce" else 1) * (n - 1)


@dataclass(frozen=True)
class Link:
    """A ring: latency per step (us), bus bandwidth (GB/s), fixed latency per call (us)."""

    hop_us: float
    busbw_gbps: float
    source: str = ""
    base_us: float = 0.0


def ring_ms(collective: str, nbytes: float, n: int, link: Link) -> float:
    if n <= 1 or nbytes <= 0:
        return 0.0
    return ((link.base_us + ring_steps(collective, n) * link.hop_us) / 1e3
            + bus_factor(collective, n) * nbytes / (link.busbw_gbps * 1e9) * 1e3)


def hierarchical_ms(collective: str, nbytes: float, per_host: int, hosts: int, intra: Link, inter: Link) -> float:
    """Two levels. All-reduce: reduce-scatter inside the host, all-reduce of the shards across
    hosts, all-gather inside the host; reduce-scatter: inside, then across; all-gather: across,
    then inside; broadcast: across, then inside (not pipelined: an upper bound). The host's
    `per_host` GPUs cross the network at the same time, each with a 1/per_host shard, so
    together they move factor(hosts) x S through the host's link (`inter` is the host's
    bandwidth, not a GPU's)."""
    if hosts <= 1:
        return ring_ms(collective, nbytes, per_host, intra)
    across = ring_ms(collective, nbytes, hosts, inter)
    if collective == "all_reduce":
        inside = ring_ms("reduce_scatter", nbytes, per_host, intra) + ring_ms("all_gather", nbytes, per_host, intra)
    else:
        inside = ring_ms(collective, nbytes, per_host, intra)
    return inside + across


# --- fitting -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Fit:
    collective: str
    n: int
    alpha_us: float
    busbw_gbps: float
    rel_rms: float  # root mean square of (fit - measured) / measured over the points
    points: int

    def link(self) -> Link:
        """Its own count's ring: the whole latency as the fixed part."""
        return Link(0.0, self.busbw_gbps, f"{self.collective} fitted at {self.n} devices", base_us=self.alpha_us)

    def ms(self, nbytes: float) -> float:
        return ring_ms(self.collective, nbytes, self.n, self.link())


def fit(collective: str, n: int, points: list[tuple[float, float]]) -> Fit:
    """Least squares of time = alpha + factor x bytes / busbw over (bytes, ms) points, on
    relative errors (weights 1/time^2): small messages, whose time is mostly latency, and
    large ones, mostly bandwidth, count alike. A negative latency (noise at the small end)
    is clamped to zero and the bandwidth refitted alone."""
    if n < 2:
        raise ValueError("a collective needs 2 or more devices to be fitted")
    if len({b for b, _ in points}) < 2:
        raise ValueError(f"{collective} at {n} devices: 2 or more message sizes are needed for a fit")
    if any(t <= 0 for _, t in points):
        raise ValueError(f"{collective} at {n} devices: a time is not positive")
    factor = bus_factor(collective, n)
    xs = [factor * b for b, _ in points]  # bytes through the link
    ys = [t for _, t in points]
    ws = [1 / y**2 for y in ys]
    sw, sx, sy = sum(ws), sum(w * x for w, x in zip(ws, xs)), sum(w * y for w, y in zip(ws, ys))
    sxx, sxy = sum(w * x * x for w, x in zip(ws, xs)), sum(w * x * y for w, x, y in zip(ws, xs, ys))
    det = sw * sxx - sx * sx
    slope = (sw * sxy - sx * sy) / det  # ms per byte
    alpha = (sy - slope * sx) / sw
    if alpha < 0:
        alpha, slope = 0.0, sxy / sxx
    if slope <= 0:
        raise ValueError(f"{collective} at {n} devices: times do not grow with the message size, no bandwidth to fit")
    resid = [(alpha + slope * x - y) / y for x, y in zip(xs, ys)]
    return Fit(collective, n, alpha * 1e3, 1 / slope / 1e6, math.sqrt(sum(r * r for r in resid) / len(resid)),
               len(points))


def latency(collective: str, fits: list[Fit]) -> tuple[float, float]:
    """(fixed us, us per ring step) from fits at several counts: least squares of alpha over
    the ring's steps, both parts kept at zero or above; one count gives a fixed latency."""
    if len(fits) < 2:
        return fits[0].alpha_us, 0.0
    xs = [ring_steps(collective, f.n) for f in fits]
    ys = [f.alpha_us for f in fits]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    hop = max(0.0, sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx) if sxx else 0.0
    base = my - hop * mx
    if base < 0:
        base, hop = 0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    return base, hop


# --- a probe's fits as a cost model ----------------------------------------------------------
@dataclass
class CommModel:
    """Collective costs at any device count from the fits of a probe.

    Inside a host, a count that was measured uses its own fit; another count takes the bus
    bandwidth of the nearest measured count and the latency of the measured counts (fixed
    part and per step, see the module's note), and says so. Across hosts, `inter` is the
    network: given by the user, not measured."""

    fits: dict  # (collective, n) -> Fit
    inter: Link | None = None
    source: str = ""
    stated: Link | None = None  # a link given instead of probed: every collective and count

    def intra_link(self, collective: str, n: int) -> tuple[Link, str]:
        if self.stated is not None:
            return self.stated, self.stated.source
        measured = sorted(k for c, k in self.fits if c == collective)
        if not measured:
            raise ValueError(f"the probe has no {collective} fit: run probe-comm on 2 or more devices")
        if n in measured:
            return self.fits[(collective, n)].link(), f"{collective} fitted at {n}"
        nearest = min(measured, key=lambda k: (abs(math.log(k / max(n, 1))), -k))
        base_us, hop_us = latency(collective, [self.fits[(collective, k)] for k in measured])
        bandwidth = self.fits[(collective, nearest)].busbw_gbps
        grows = f" + {hop_us:.2f} us per ring step" if len(measured) > 1 else " (one count measured: fixed)"
        note = (f"{collective} at {n}: bus bandwidth of {nearest} devices, {bandwidth:.1f} GB/s; latency "
                f"{base_us:.1f} us{grows} from the fits at {', '.join(map(str, measured))}")
        return Link(hop_us, bandwidth, note, base_us=base_us), note

    def ms(self, collective: str, nbytes: float, per_host: int, hosts: int = 1) -> float:
        if per_host * hosts <= 1:
            return 0.0
        if hosts <= 1 and self.stated is None and (collective, per_host) in self.fits:
            return self.fits[(collective, per_host)].ms(nbytes)
        link = self.intra_link(collective, max(per_host, 2))[0] if per_host > 1 else Link(0.0, 1.0)
        if hosts > 1 and self.inter is None:
            raise ValueError("a prediction across hosts needs the network: give --inter-host-gbps")
        return hierarchical_ms(collective, nbytes, per_host, hosts, link, self.inter or link)

    def describe(self, collective: str, per_host: int, hosts: int = 1) -> str:
        if per_host * hosts <= 1:
            return f"{collective}: none at 1 device"
        parts = [self.intra_link(collective, per_host)[1]] if per_host > 1 else []
        if hosts > 1:
            parts.append(f"{hosts} hosts over {self.inter.busbw_gbps * 8:g} Gb/s per host, "
                         f"{self.inter.hop_us:g} us per hop (hierarchical)")
        return "; ".join(parts)
