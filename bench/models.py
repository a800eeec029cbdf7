"""The two ResNet-18 workloads: which network, which input, which synthetic data.

`resnet18` is the standard ImageNet network (3x224x224 input, 7x7 stride-2 stem,
max-pool, 1000 classes, 11,689,512 parameters). `resnet18-small` keeps the same
four stages of basic blocks but takes 1x28x28 input through a 3x3 stride-1 stem
with no max-pool and ends in 10 classes. The network itself is in bench/resnet.py.

Importing this module loads no torch, so that the sweep's parent, which only needs the
names, stays light; building a model or data loads it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class Workload:
    """One model with its input shape: everything a strategy needs to build the same job."""

    name: str
    input_shape: tuple[int, int, int]
    num_classes: int
    small_input: bool
    width: int = 64  # channels of the first stage; 64 is ResNet-18

    def build(self, seed: int = 0) -> nn.Module:
        """The model with weights that depend on `seed` alone (identical in every strategy)."""
        import torch

        from bench.resnet import ResNet18

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return ResNet18(self.input_shape[0], self.num_classes, self.small_input, self.width)

    def synthetic_batch(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed random batch on the CPU; the first rows are the same for any `batch`."""
        return self.synthetic_rows(0, batch, seed)

    def synthetic_rows(self, start: int, stop: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [start, stop) of the fixed random global batch, built without the others:
        each rank of a multi-process job makes only its own shard. Rows come in blocks,
        each from its own seeded stream, so any slice equals that slice of a larger batch."""
        import torch

        first, last = start // _BLOCK, (stop - 1) // _BLOCK if stop > start else start // _BLOCK - 1
        inputs, targets = [], []
        for block in range(first, last + 1):
            block_inputs, block_targets = _block(self.input_shape, self.num_classes, seed, block)
            inputs.append(block_inputs)
            targets.append(block_targets)
        if not inputs:
            return torch.empty((0, *self.input_shape)), torch.empty((0,), dtype=torch.long)
        offset = first * _BLOCK
        return (torch.cat(inputs)[start - offset : stop - offset].contiguous(),
                torch.cat(targets)[start - offset : stop - offset].contiguous())


_BLOCK = 64


# A long-lived worker builds the same rows for case after case: each block is made once
# (resnet18's is 38.5 MB; 32 of them at most). Callers get copies (torch.cat), never a block.
@functools.lru_cache(maxsize=32)
def _block(input_shape: tuple, num_classes: int, seed: int, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    return (torch.randn((_BLOCK, *input_shape), generator=_stream(seed, 1, block)),
            torch.randint(0, num_classes, (_BLOCK,), generator=_stream(seed, 2, block)))


def _stream(seed: int, which: int, block: int) -> torch.Generator:
    # Inputs and targets come from separate streams per block of rows.
    import torch

    return torch.Generator().manual_seed((seed * 4 + which) * 1_000_003 + block)


WORKLOADS: dict[str, Workload] = {
    "resnet18-small": Workload("resnet18-small", (1, 28, 28), 10, small_input=True),
    "resnet18": Workload("resnet18", (3, 224, 224), 1000, small_input=False),
}


def get_workload(name: str) -> Workload:
    if name not in WORKLOADS:
        raise KeyError(f"unknown model {name!r}: choose one of {', '.join(WORKLOADS)}")
    return WORKLOADS[name]


_FLOPS_CACHE: dict[str, float] = {}


def training_flops_per_image(name: str) -> float:
    """FLOPs of one forward+backward pass per image, counted by torch.utils.flop_counter.

    The counter sees matrix products and convolutions (what the tensor cores do);
    element-wise work such as BatchNorm and ReLU is not counted, as is customary.
    """
    if name not in _FLOPS_CACHE:
        from torch import nn
        from torch.utils.flop_counter import FlopCounterMode

        workload = get_workload(name)
        model = workload.build()
        inputs, targets = workload.synthetic_batch(2)
        counter = FlopCounterMode(display=False)
        with counter:
            nn.functional.cross_entropy(model(inputs), targets).backward()
        _FLOPS_CACHE[name] = counter.get_total_flops() / 2
    return _FLOPS_CACHE[name]
