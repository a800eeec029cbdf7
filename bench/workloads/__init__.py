"""Workloads: the models the suite trains, each with its data (bench/workloads/data.py): images
with classes, or sequences of token ids for a language model, and the unit throughput counts.
Here: the Workload class and the registry of the built-in ones, and `get_workload`, which gives
the workload of any model name.

A model name on the command line is one of:

- a built-in workload, registered by a module in this folder (`register(Workload(...))`);
  every module here is imported when the registry is first asked, so adding one is adding
  one file. ResNet-18 (`resnet18`, `resnet18-small`) is the reference workload, the same
  network in every strategy and in MXNet (resnet18.py); `vit-large` is the one whose
  model state is large enough for sharding to matter (vit.py); `gpt2-124m`, `gpt2-350m` and
  `gpt2-1.5b` are language models of nanoGPT's shape (gpt.py);
- `PREFIX:NAME` for a registered source (sources.py: `timm:NAME`, `torchvision:NAME`);
- `package.module:factory`: the user's own code, a callable that returns the model, or a
  dict (or object) with `model` and optionally `input_shape` and `num_classes` (images), or
  `vocab_size` and `seq_len` (a language model), `loss`, `blocks` (see `from_factory_result`
  in resolve.py).

Importing this package loads no torch, and neither does checking a name
(resolve.py `check_name`), nor naming its source (resolve.py `source_of`), nor `probe`
(probing.py), which resolves names that are not built in in a process of their own: the
sweep's parent stays light. Resolving such a name (`get_workload`, through resolve.py) imports
its package or module; building a model or data loads torch; both happen in the worker (or in
`probe`'s process).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from bench.core.discovery import import_modules
from bench.workloads.data import Data, Images, from_facts

if TYPE_CHECKING:
    import torch
    from torch import nn


class WorkloadError(LookupError):
    """A model name that cannot be used; the message is one line that names the fix."""


@dataclass(frozen=True)
class Workload:
    """One model with its data (bench/workloads/data.py): everything a strategy needs to build the same job."""

    name: str
    data: Data  # what one row of the batch is, how the synthetic rows are made, what throughput counts
    factory: Callable[[], "nn.Module"]  # builds the model from torch's (seeded) random state
    summary: str = ""
    source: str = "built-in"  # where the model comes from, recorded in every row
    # The arguments of the same network in MXNet Gluon (strategies/gluon/models.py), or None
    # where MXNet has no such network.
    mxnet: dict | None = None
    # The modules that sharding strategies (FSDP2) wrap on their own: class names (every
    # outermost module of those classes), or a callable model -> modules; None: the
    # repeated blocks found by `repeated_blocks`.
    blocks: tuple[str, ...] | Callable[["nn.Module"], list] | None = None
    # The training loss, loss(output, targets) -> scalar; None: the data's own (cross-entropy over
    # the classes, or over the vocabulary at every position).
    loss: Callable | None = field(default=None, compare=False)
    order: int = 50  # where it is listed: the reference workload first (`names`)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """One row's shape: (C, H, W) for an image, (T,) for a sequence of token ids."""
        return self.data.shape

    @property
    def num_classes(self) -> int:
        """The classes of an image, the vocabulary of a language model."""
        return self.data.classes

    def build(self, seed: int = 0) -> nn.Module:
        """The model with weights that depend on `seed` alone (identical in every strategy)."""
        import torch

        with torch.random.fork_rng(devices=[]), default_dtype_kept():
            torch.manual_seed(seed)
            return self.factory()

    def criterion(self) -> Callable:
        """The loss the training step takes (the same in every strategy)."""
        return self.loss if self.loss is not None else self.data.loss()

    def synthetic_batch(self, batch: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """A fixed random batch on the CPU; the first rows are the same for any `batch`."""
        return self.synthetic_rows(0, batch, seed)

    def synthetic_rows(self, start: int, stop: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """Rows [start, stop) of the fixed random global batch, built without the others:
        each rank of a multi-process job makes only its own shard; any slice equals that slice
        of a larger batch (bench/workloads/data.py)."""
        return self.data.rows(start, stop, seed)


class default_dtype_kept:
    """torch's default dtype as it was before a factory ran: one that sets it (float64) must not
    change the dtype of the data, nor of anything built after it in the process."""

    def __enter__(self):
        import torch

        self.dtype = torch.get_default_dtype()

    def __exit__(self, *exc):
        import torch

        torch.set_default_dtype(self.dtype)


_REGISTRY: dict[str, Workload] = {}


def register(workload: Workload) -> Workload:
    _REGISTRY[workload.name] = workload
    return workload


def _load() -> None:
    import_modules(__name__, __path__)


def names() -> list[str]:
    """Every built-in workload: by `order` (the reference ResNet-18 first), then as registered."""
    _load()
    return sorted(_REGISTRY, key=lambda n: _REGISTRY[n].order)


def builtin(name: str) -> Workload | None:
    """The built-in workload of that name, or None (torch-free)."""
    _load()
    return _REGISTRY.get(name)


@functools.lru_cache(maxsize=None)
def get_workload(name: str) -> Workload:
    """The workload of any model name; a name that is not built in is resolved here (its
    package or module imported, its model probed once on the meta device: resolve.py)."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name]
    from bench.workloads.resolve import resolved  # it imports this package: not at import

    return resolved(name)


def data_of(name: str) -> Data | None:
    """The data of a model name, torch-free: a built-in workload's, or what `probe` found for
    another name in this process (probing.py); None where neither knows it."""
    _load()
    if name in _REGISTRY:
        return _REGISTRY[name].data
    from bench.workloads.probing import PROBED  # it imports this package: not at import

    found = PROBED.get(name)
    return from_facts(found) if found and "error" not in found else None


def data_or_images(name: str) -> Data:
    """The data of a model name (`data_of`), or, where it is not known here, images of 3x224x224 in
    1000 classes: what every row written before the data had a kind was."""
    return data_of(name) or Images((3, 224, 224), 1000)

