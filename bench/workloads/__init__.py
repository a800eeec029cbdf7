"""Workloads: the models the suite trains, each with its input shape and synthetic data.

A workload is registered by a module in this folder (`register(Workload(...))`); every
module here is imported when the registry is first asked, so adding a workload is adding
one file (docs/extending.md). ResNet-18 (`resnet18`, `resnet18-small`) is the reference
workload, the same network in every strategy and in MXNet (resnet18.py).

Importing this package loads no torch, so that the sweep's parent, which only needs the
names, stays light; building a model or data loads it.
"""
from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(frozen=True)
class Workload:
    """One model with its input shape: everything a strategy needs to build the same job."""

    name: str
    input_shape: tuple[int, ...]
    num_classes: int
    factory: Callable[[], "nn.Module"]  # builds the model from torch's (seeded) random state
    summary: str = ""
    source: str = "built-in"  # where the model comes from, recorded in every row
    # The arguments of the same network in MXNet Gluon (strategies/gluon/models.py), or None
    # where MXNet has no such network.
    mxnet: dict | None = None

    def build(self, seed: int = 0) -> nn.Module:
        """The model with weights that depend on `seed` alone (identical in every strategy)."""
        import torch

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return self.factory()

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


_REGISTRY: dict[str, Workload] = {}
_loaded = False


def register(workload: Workload) -> Workload:
    _REGISTRY[workload.name] = workload
    return workload


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


def names() -> list[str]:
    """Every registered workload, in registration order."""
    _load()
    return list(_REGISTRY)


def get_workload(name: str) -> Workload:
    _load()
    if name not in _REGISTRY:
        raise KeyError(f"unknown model {name!r}: choose one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


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
