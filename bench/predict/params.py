"""What the simulation needs to know about a model: its parameters in the order autograd
makes their gradients ready, their sizes, their FSDP2 units, its buffers; and the bucket
and partition rules of DDP and ZeroRedundancyOptimizer applied to them.

The ready order is observed, not assumed: one backward pass on a tiny CPU batch with a
post-accumulate-grad hook on every parameter (the order depends on the graph, not on the
batch, the device or the input's size). It differs from the reverse of the registration
order where a block's downsample branch runs first in forward and so last in backward.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

@dataclass(frozen=True)
class Param:
    name: str
    numel: int
    unit: str  # FSDP2 unit: "root" or the module name of the block that holds it
    rows: int = 0  # its size along dim 0, which FSDP2 shards (0: unknown, taken as numel rows of 1)

    def shard_numel(self, n: int) -> int:
        """Elements of one rank's FSDP2 shard: dim 0 padded to a multiple of n, then cut in n."""
        rows = self.rows or self.numel
        return -(-rows // n) * (self.numel // rows)


@dataclass(frozen=True)
class ModelFacts:
    name: str
    ready: tuple[Param, ...]  # in the order their gradients become ready
    buffer_bytes: tuple[int, ...]  # per dtype (DDP broadcasts buffers coalesced by dtype)
    buffer_numel: tuple[int, ...] = ()  # the same, in elements

    @property
    def numel(self) -> int:
        return sum(p.numel for p in self.ready)

    def unit_numel(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.ready:
            out[p.unit] = out.get(p.unit, 0) + p.numel
        return out


def units_by_param(net, model: str) -> dict[str, str]:
    """Parameter name -> FSDP2 unit, the blocks strategies/fsdp2.py wraps on their own
    (bench.workloads.facts.shard_units: the workload's declared blocks); the innermost block
    that holds a parameter owns it, the root everything else."""
    from bench.workloads.facts import shard_units

    names = {id(m): n for n, m in net.named_modules()}
    owner: dict[str, str] = {}
    for block in shard_units(net, model):  # inner blocks first
        for name, _ in block.named_parameters():
            owner.setdefault(f"{names[id(block)]}.{name}", names[id(block)])
    return owner


@functools.lru_cache(maxsize=None)
def facts(model: str) -> ModelFacts:
    import torch

    from bench.workloads import get_workload

    workload = get_workload(model)
    net = workload.build(seed=0)
    order: list[str] = []
    names = {id(p): n for n, p in net.named_parameters()}
    for p in net.parameters():
        p.register_post_accumulate_grad_hook(lambda t: order.append(names[id(t)]))
    channels, height, width = workload.input_shape
    # The order is the graph's: a small input (the network pools adaptively) and batch 2
    # (BatchNorm in training mode needs more than one value per channel) are enough.
    inputs = torch.randn(2, channels, min(height, 32), min(width, 32))
    torch.nn.functional.cross_entropy(net(inputs), torch.tensor([0, 1])).backward()
    sizes = {n: p.numel() for n, p in net.named_parameters()}
    rows = {n: p.shape[0] if p.dim() else 1 for n, p in net.named_parameters()}
    by_dtype: dict = {}
    for b in net.buffers():
        nbytes, numel = by_dtype.get(b.dtype, (0, 0))
        by_dtype[b.dtype] = (nbytes + b.numel() * b.element_size(), numel + b.numel())
    owner = units_by_param(net, model)
    return ModelFacts(model, tuple(Param(n, sizes[n], owner.get(n, "root"), rows[n]) for n in order),
                      tuple(b for b, _ in by_dtype.values()), tuple(k for _, k in by_dtype.values()))


def ddp_buckets(sizes: list[int], cap_bytes: int, first_cap_bytes: int | None = None) -> list[list[int]]:
    """Indices of `sizes` (bytes, in gradient-ready order) per bucket, as DDP's reducer
    rebuilds them after the first iteration (compute_bucket_assignment_by_size): a bucket
    takes tensors until its size reaches its limit, the tensor that crosses the limit
    included; the first bucket's limit is `first_cap_bytes`, every later one `cap_bytes`.
    DDP uses a 1 MiB first bucket only when bucket_cap_mb is left unset; parabench sets it,
    so its first bucket is as large as the others."""
    first = cap_bytes if first_cap_bytes is None else first_cap_bytes
    buckets, current, size = [], [], 0
    for i, nbytes in enumerate(sizes):
        current.append(i)
        size += nbytes
        if size >= (first if not buckets else cap_bytes):
            buckets.append(current)
            current, size = [], 0
    if current:
        buckets.append(current)
    return buckets


def zero_partition(numels: list[int], n: int) -> list[int]:
    """Elements each rank updates under ZeroRedundancyOptimizer: parameters largest first,
    each to the rank with the fewest elements so far (its own greedy rule)."""
    totals = [0] * n
    for numel in sorted(numels, reverse=True):
        rank = totals.index(min(totals))
        totals[rank] += numel
    return totals
