"""What is measured from a workload's model (torch, in the worker or `list`): its parameters
and FLOPs per item (an image, a token), and the blocks a sharding strategy wraps on its own."""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

from bench.workloads import WorkloadError, get_workload

if TYPE_CHECKING:
    from torch import nn


@functools.lru_cache(maxsize=None)
def facts(name: str) -> dict:
    """{'parameters', 'flops_per_item', 'items_per_sample', 'unit'} of a workload: the model built on
    the meta device (no memory, no arithmetic) and one training step of two rows counted by
    torch.utils.flop_counter; on the CPU where the model cannot be built on the meta device.

    An item is what throughput counts (bench/workloads/data.py): an image, or a token of a
    language model, whose FLOPs per token are the step's over its batch's tokens. The counter sees
    matrix products, convolutions and attention (what the tensor cores do); element-wise work
    such as normalisation and activations is not counted, nor an embedding's lookup, as is
    customary: for a GPT this is 6N + 12 L T d per token, PaLM's count (appendix B), N its
    parameters without the position embedding. FLOPs are of one forward+backward pass.
    """
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    workload = get_workload(name)
    data = workload.data
    rows = 2

    def count(device: str) -> dict:
        with torch.device(device):
            model = workload.build()
            inputs, targets = data.example(rows)
        counter = FlopCounterMode(display=False)
        with counter:
            workload.criterion()(model(inputs), targets).backward()
        # Counted after the step: lazy modules have their parameters by then.
        return {"parameters": sum(p.numel() for p in model.parameters()),
                "flops_per_item": counter.get_total_flops() / (rows * data.items_per_sample),
                "items_per_sample": data.items_per_sample, "unit": data.unit.name}

    try:
        return count("meta")
    except Exception:  # noqa: BLE001 - a factory that needs real tensors (loads weights...)
        return count("cpu")


@functools.lru_cache(maxsize=None)
def saved_bytes_per_sample(name: str) -> float | None:
    """Bytes that autograd keeps for backward per row of the batch (an image, a sequence) of an
    fp32 forward pass, counted on the meta device (no memory, no arithmetic) at batch 4 less
    batch 2, so that what does not grow with the batch (saved weights) drops out; each saved
    tensor counted once. A lower bound of what a training step holds at its peak: resnet18-small
    at batch 128 counted 0.44 GiB where its forward grew the process by 0.50 GiB, resnet18 at 16
    0.33 against 0.38 (torch 2.13 CPU). None where the model cannot run on the meta device."""
    import torch

    workload = get_workload(name)

    def saved(batch: int) -> int:
        seen, total = set(), 0

        def pack(tensor):
            nonlocal total
            if id(tensor) not in seen:
                seen.add(id(tensor))
                total += tensor.numel() * tensor.element_size()
            return tensor

        with torch.device("meta"):
            model = workload.build()
            inputs, _ = workload.data.example(batch)
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            model(inputs)
        return total

    try:
        return max(0.0, (saved(4) - saved(2)) / 2)
    except Exception:  # noqa: BLE001 - a model that needs real tensors: no estimate
        return None


def training_flops_per_item(name: str) -> float:
    """FLOPs of one forward+backward pass per item, an image or a token (see `facts`)."""
    return facts(name)["flops_per_item"]


def parameters(name: str) -> int:
    return facts(name)["parameters"]


# --- the units a sharding strategy wraps -----------------------------------------------


def outermost(model: nn.Module, chosen: Callable[[nn.Module], bool]) -> list:
    """The modules under `model` for which `chosen` holds, none inside another."""
    found, stack = [], list(reversed(list(model.children())))
    while stack:
        module = stack.pop()
        if chosen(module):
            found.append(module)
        else:
            stack.extend(reversed(list(module.children())))
    return found


def repeated_blocks(model: nn.Module) -> list:
    """A model's repeated blocks, found without knowing the model: walking down from the
    root, where a module has two or more children of one class that hold parameters, those
    children are blocks (and are not searched further). ResNet: its four stages; a
    transformer: its layers (timm's `blocks`, torchvision's `encoder.layers`)."""
    from collections import Counter

    found, stack = [], [model]
    while stack:
        module = stack.pop()
        children = [c for c in module.children() if next(c.parameters(), None) is not None]
        counts = Counter(type(c) for c in children)
        for child in children:
            (found if counts[type(child)] > 1 else stack).append(child)
    return found


def shard_units(model: nn.Module, name: str | None = None) -> list:
    """The modules a sharding strategy wraps on their own for the case's model `name`
    (its declared blocks), or the repeated blocks where the name is not known here."""
    try:
        workload = get_workload(name) if name else None
    except (KeyError, WorkloadError):
        workload = None
    return units_of(workload, model) if workload else repeated_blocks(model)


def units_of(workload, model: nn.Module) -> list:
    """The workload's declared blocks in `model` (class names, or a callable model -> modules),
    else its repeated blocks; inner ones first."""
    if callable(workload.blocks):
        return list(workload.blocks(model))
    if workload.blocks:
        return outermost(model, lambda m: type(m).__name__ in workload.blocks)
    return repeated_blocks(model)
