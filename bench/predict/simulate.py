"""One training step at n devices, replayed from a measured one-device step.

Weak scaling: every device keeps the measured per-device batch, so forward and backward
compute stay what they were on one device; what changes is communication and, for the
sharded strategies, the optimiser's share. Communication runs on its own channel (NCCL's
stream, gloo's threads), one collective at a time in issue order, beside compute:

- DDP: a bucket's all-reduce is launched when its last gradient is ready, buckets in
  order, one after the other; what runs past backward's end is exposed. With
  broadcast_buffers, the buffers are broadcast before every forward (exposed).
- ZeRO-1: DDP's all-reduce, then each rank updates its own parameters (the largest
  rank's share of ZeroRedundancyOptimizer's greedy partition) and broadcasts them, one
  broadcast per parameter (exposed: nothing overlaps them).
- FSDP2: per unit (stage, root) an all-gather before its forward, one unit ahead so it
  overlaps the previous unit's compute; in backward the unit is gathered again
  (reshard_after_forward) one unit ahead, and its gradients reduce-scattered when its
  last gradient is ready; the update is 1/n of the elements.

Units' compute: backward's per-unit times are measured (gradient ready times); forward's
are taken in the same proportions. Times in ms; the step's forward/backward/tail split
and the ready times come from bench.predict.timeline.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bench.predict.params import ModelFacts, ddp_buckets, zero_partition

WIRE_BYTES = {"none": 4, "fp16": 2, "bf16": 2}  # bytes per gradient element in DDP's all-reduce


@dataclass(frozen=True)
class Target:
    strategy: str
    per_host: int
    hosts: int
    options: dict
    param_bytes: int = 4  # what FSDP2 all-gathers per parameter element

    @property
    def n(self) -> int:
        return self.per_host * self.hosts


@dataclass
class Sim:
    forward: float
    backward: float
    tail: float
    comm: float  # every collective's time, hidden or not
    optimizer: float  # the optimiser's busy time after sharding
    notes: list[str] = field(default_factory=list)
    # The elements the step's collectives carry, counted as the profiler counts them
    # (bench.measure.counters: each collective's input tensor), so that a measured run's
    # collective_elements_per_step can be set against them exactly.
    elements: int = 0

    @property
    def step(self) -> float:
        return self.forward + self.backward + self.tail


def bucket_schedule(ready: list[float], costs: list[float]) -> list[tuple[float, float]]:
    """(start, end) of each bucket's all-reduce: launched when its last gradient is ready,
    in bucket order, one at a time."""
    out, free = [], 0.0
    for r, cost in zip(ready, costs):
        start = max(r, free)
        free = start + cost
        out.append((start, free))
    return out


def _ms(comm, collective: str, nbytes: float, t: Target) -> float:
    return comm.ms(collective, nbytes, t.per_host, t.hosts)


def ddp(step, facts: ModelFacts, comm, t: Target) -> Sim:
    hook = str(t.options.get("comm_hook", "none"))
    if hook not in WIRE_BYTES:
        raise ValueError(f"comm_hook={hook} is not modelled (it changes what is sent, not only its size)")
    sizes = [p.numel * 4 for p in facts.ready]
    buckets = ddp_buckets(sizes, int(float(t.options.get("bucket_cap_mb", 25)) * 2**20))
    costs = [_ms(comm, "all_reduce", sum(sizes[i] for i in b) * WIRE_BYTES[hook] / 4, t) for b in buckets]
    schedule = bucket_schedule([step.ready[b[-1]] for b in buckets], costs)
    end = max(step.backward, schedule[-1][1]) if schedule else step.backward
    broadcast = 0.0
    if broadcasting(t.options):
        broadcast = sum(_ms(comm, "broadcast", b, t) for b in facts.buffer_bytes)
    notes = [f"DDP: {len(buckets)} bucket{'s' if len(buckets) > 1 else ''} of " + "/".join(f"{sum(sizes[i] for i in b) / 2**20:.1f}" for b in buckets)
             + " MiB (bucket_cap_mb as set; gradient-ready order)"]
    elements = facts.numel + (sum(facts.buffer_numel) if broadcasting(t.options) else 0)
    return Sim(step.forward + broadcast, end, step.tail, sum(costs) + broadcast, step.optimizer, notes, elements)


def broadcasting(options: dict) -> bool:
    return str(options.get("broadcast_buffers", True)).lower() in ("1", "true", "yes", "on")


def zero1(step, facts: ModelFacts, comm, t: Target) -> Sim:
    sim = ddp(step, facts, comm, t)
    share = max(zero_partition([p.numel for p in facts.ready], t.n)) / facts.numel
    optimizer = step.optimizer * share
    broadcasts = sum(_ms(comm, "broadcast", p.numel * 4, t) for p in facts.ready) if t.n > 1 else 0.0
    sim.tail = step.tail - (step.optimizer - optimizer) + broadcasts
    sim.comm += broadcasts
    sim.optimizer = optimizer
    sim.elements += facts.numel  # every parameter broadcast from its owner, at any world size
    sim.notes.append(f"ZeRO-1: the busiest rank updates {100 * share:.0f}% of the elements, then "
                     f"{len(facts.ready)} parameter broadcasts (one per parameter)")
    return sim


def backward_segments(facts: ModelFacts, ready: list[float]) -> list[tuple[str, float]]:
    """Backward cut into runs of one FSDP unit's gradients, each with its compute time
    (from the previous run's last gradient to its own)."""
    out: list[list] = []
    previous = 0.0
    for p, r in zip(facts.ready, ready):
        if out and out[-1][0] == p.unit:
            out[-1][1] += r - previous
        else:
            out.append([p.unit, r - previous])
        previous = r
    return [(u, d) for u, d in out]


def _fsdp_forward(segments, ag: dict) -> tuple[float, float]:
    """Forward: a unit computes once it is gathered; the next unit's all-gather may start
    once this unit's parameters are copied out, at its compute's start (FSDP2's implicit
    prefetch holds one all-gather result ahead). Returns (compute end, channel free)."""
    channel = compute = started = 0.0
    gathered: dict = {}
    for unit, duration in segments:
        if unit not in gathered:
            channel = max(channel, started) + ag[unit]
            gathered[unit] = channel
        started = max(compute, gathered[unit])
        compute = started + duration
    return compute, channel


def _fsdp_backward(segments, ag: dict, rs: dict, start: float, channel: float, regather: bool) -> float:
    """Backward from `start`: each unit gathered again (with `regather`) one unit ahead of
    its compute, its gradients reduce-scattered after its last run. Returns the end."""
    order = list(dict.fromkeys(u for u, _ in segments))
    last = {u: i for i, (u, _) in enumerate(segments)}
    ready: dict = {}

    def gather(unit, at):
        nonlocal channel
        if regather and unit not in ready:
            channel = max(channel, at) + ag[unit]
            ready[unit] = channel

    gather(order[0], start)
    compute = start
    for i, (unit, duration) in enumerate(segments):
        gather(unit, compute)
        begin = max(compute, ready.get(unit, 0.0))
        following = order[order.index(unit) + 1:order.index(unit) + 2]
        for nxt in following:  # FSDP2's backward prefetch: the next unit, when this one starts
            gather(nxt, begin)
        compute = begin + duration
        if last[unit] == i:
            channel = max(channel, compute) + rs[unit]
    return max(compute, channel)


def fsdp2(step, facts: ModelFacts, comm, t: Target) -> Sim:
    units = facts.unit_numel()
    ag = {u: _ms(comm, "all_gather", k * t.param_bytes, t) for u, k in units.items()}
    rs = {u: _ms(comm, "reduce_scatter", k * 4, t) for u, k in units.items()}
    backward = backward_segments(facts, list(step.ready))
    scale = step.forward / step.backward if step.backward > 0 else 0.0
    forward = [(u, d * scale) for u, d in reversed(backward)]
    forward_end, channel = _fsdp_forward(forward, ag)
    regather = str(t.options.get("reshard_after_forward", True)).lower() in ("1", "true", "yes", "on")
    end = _fsdp_backward(backward, ag, rs, forward_end, channel, regather)
    optimizer = step.optimizer / t.n
    tail = step.tail - (step.optimizer - optimizer)
    notes = [f"FSDP2: {len(units)} units ({', '.join(units)}), all-gather before forward"
             + (" and again before backward (reshard_after_forward), the root included" if regather else "")
             + "; reduce-scatter after each unit's backward; forward's per-unit compute in backward's proportions"]
    comm_ms = sum(ag.values()) * (2 if regather else 1) + sum(rs.values())
    # Each all-gather's input is this rank's padded shard, each reduce-scatter's the padded whole;
    # a world of one skips both (strategies/fsdp2.py: world_of_one_skips).
    shard = sum(p.shard_numel(t.n) for p in facts.ready)
    elements = shard * ((2 if regather else 1) + t.n) if t.n > 1 else 0
    return Sim(forward_end, end - forward_end, tail, comm_ms, optimizer, notes, elements)


STRATEGIES = {"ddp": ddp, "zero1": zero1, "fsdp2": fsdp2}


def simulate(step, facts: ModelFacts, comm, t: Target) -> Sim:
    if len(step.ready) != len(facts.ready):
        raise ValueError(f"the trace accumulates {len(step.ready)} gradients per step, {facts.name} has "
                         f"{len(facts.ready)} parameters: the traces are not of this model")
    if t.strategy not in STRATEGIES:
        raise ValueError(f"cannot predict {t.strategy}: predictions cover {', '.join(STRATEGIES)}")
    return STRATEGIES[t.strategy](step, facts, comm, t)
