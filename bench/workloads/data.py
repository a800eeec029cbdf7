"""What a workload feeds its model and what its throughput counts: images (or other fixed-size
samples) with one class each, or sequences of token ids with next-token targets.

A workload's data says how to make rows [start, stop) of its fixed synthetic global batch (a row is
an image, or a sequence of T tokens: `describe`), what throughput counts (images, tokens: `unit`, and
`items_per_sample`, how many of those one row holds), whether its batches are 4-D images that a
memory format can lay out (`spatial`), the loss a step takes, the optimiser it trains with by
default and the per-GPU batches a sweep measures where none are given. Torch-free: the sweep's
parent reads it to label rows and resolve defaults; the rows themselves are made in the worker.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# Rows come in blocks, each from its own seeded stream, so that any slice of the global batch
# equals that slice of a larger one and each rank builds only its own rows.
BLOCK = 64


@dataclass(frozen=True)
class Unit:
    """What throughput counts: `name` in sentences ("images"), `one` for one of them, `short` in
    rates and column heads ("img/s", "tokens/s")."""

    name: str
    one: str
    short: str

    @property
    def rate(self) -> str:
        return f"{self.short}/s"

    @property
    def heading(self) -> str:
        """The rate as a table's column says it: "images/s", "tokens/s"."""
        return f"{self.name}/s"


IMAGES = Unit("images", "image", "img")
SAMPLES = Unit("samples", "sample", "samples")
TOKENS = Unit("tokens", "token", "tokens")
UNITS = {u.name: u for u in (IMAGES, SAMPLES, TOKENS)}


def ladders() -> str:
    """Each kind of data's default per-GPU batches, as --help says them."""
    return "; ".join(f"{kind.kind}: {','.join(map(str, kind.batches['cuda']))} on GPUs, "
                     f"{','.join(map(str, kind.batches['cpu']))} on the CPU" for kind in (Images, Tokens))


def unit_named(name) -> Unit:
    """The unit a row names; rows written before units existed counted images."""
    return UNITS.get(str(name or "images"), IMAGES)


def unit_of(row) -> Unit:
    """What a results row's throughput counts (a dict or a pandas row); images for rows written before units."""
    value = row.get("unit") if hasattr(row, "get") else None
    return unit_named(value if isinstance(value, str) else None)


def rate_unit(row) -> str:
    """'img/s', 'tokens/s': how a row's rate is written."""
    return unit_of(row).rate


class Synthetic:
    """What every kind of data shares: rows [start, stop) of its fixed synthetic global batch, made
    block by block (`block`), so that each rank makes only its own and any slice equals that slice of
    a larger batch."""

    def rows(self, start: int, stop: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        return _rows(self, start, stop, seed)


@dataclass(frozen=True)
class Images(Synthetic):
    """Float samples of `shape` (C, H, W for images), one of `classes` classes each: ResNet's and
    ViT's data, and any user model that declares an input shape."""

    shape: tuple[int, ...]
    classes: int
    kind = "images"
    items_per_sample = 1
    optimizer = "sgd"  # the suite's SGD with momentum, as the image workloads have always trained
    # Per-GPU batches a sweep measures where none are given: from host-bound to GPU-bound on an H200.
    batches = {"cuda": (256, 1024, 2048), "cpu": (2, 4)}
    fit_first = (8, 64)  # the batches `bench fit`'s search starts from

    @property
    def unit(self) -> Unit:
        return IMAGES if len(self.shape) == 3 else SAMPLES

    @property
    def spatial(self) -> bool:
        """Batches are 4-D (N, C, H, W): the channels_last memory format applies."""
        return len(self.shape) == 3

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.shape))} {self.unit.name}, {self.classes} classes"

    def bytes_per_sample(self) -> int:
        return math.prod(self.shape) * 4 + 8  # float32 inputs, an int64 class

    def block(self, seed: int, index: int):
        import torch

        return (torch.randn((BLOCK, *self.shape), generator=_stream(seed, 1, index)),
                torch.randint(0, self.classes, (BLOCK,), generator=_stream(seed, 2, index)))

    def example(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of `batch` rows on torch's current default device (meta: no memory)."""
        import torch

        # Classes not known yet (a model whose output width says them): any target, the forward is what counts.
        return torch.randn((batch, *self.shape)), torch.randint(0, max(self.classes, 1), (batch,))

    def loss(self):
        from torch import nn

        return nn.CrossEntropyLoss()

    def check_output(self, out) -> str | None:
        """What is wrong with the model's output for this data (a shape the loss cannot take), or None."""
        shape = getattr(out, "shape", None)
        if shape is None or len(shape) != 2:
            return (f"must return logits of shape (batch, classes) for input {'x'.join(map(str, self.shape))}, got "
                    f"{tuple(shape) if shape is not None else type(out).__name__}")
        return None

    def facts(self) -> dict:
        """The data as the probe reports it (`from_facts` reads it back)."""
        return {"kind": self.kind, "input_shape": list(self.shape), "num_classes": self.classes}


@dataclass(frozen=True)
class Tokens(Synthetic):
    """Sequences of `seq_len` token ids in [0, vocab_size), each position's target the next token
    (a language model's data, as nanoGPT trains it): a row is a sequence, throughput counts tokens."""

    vocab_size: int
    seq_len: int
    kind = "tokens"
    unit = TOKENS
    spatial = False
    optimizer = "adamw"  # what language models train with (nanoGPT's betas and weight decay)
    # Sequences per GPU: what fits beside the logits of a 50k vocabulary at T = 1024 for GPT-2's sizes
    # on an 80-141 GB GPU (nanoGPT trains gpt2-124m at 12 of 1024 per GPU).
    batches = {"cuda": (8, 16, 32), "cpu": (2, 4)}
    fit_first = (1, 8)

    @property
    def items_per_sample(self) -> int:
        return self.seq_len

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.seq_len,)

    @property
    def classes(self) -> int:
        return self.vocab_size

    def describe(self) -> str:
        return f"sequences of {self.seq_len} tokens, vocabulary {self.vocab_size}"

    def bytes_per_sample(self) -> int:
        return 2 * self.seq_len * 8  # int64 ids and targets

    def block(self, seed: int, index: int):
        import torch

        # One stream per block: seq_len + 1 tokens a row, inputs its first seq_len, targets its last.
        sequences = torch.randint(0, self.vocab_size, (BLOCK, self.seq_len + 1), generator=_stream(seed, 1, index))
        return sequences[:, :-1].contiguous(), sequences[:, 1:].contiguous()

    def example(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        return (torch.randint(0, self.vocab_size, (batch, self.seq_len)),
                torch.randint(0, self.vocab_size, (batch, self.seq_len)))

    def loss(self):
        from bench.workloads._gpt import NextTokenLoss

        return NextTokenLoss()

    def check_output(self, out) -> str | None:
        shape = getattr(out, "shape", None)
        if shape is None or len(shape) != 3 or shape[1] != self.seq_len:
            got = tuple(shape) if shape is not None else type(out).__name__
            return (f"must return logits of shape (batch, {self.seq_len}, vocabulary) for token ids of shape "
                    f"(batch, {self.seq_len}), got {got} (a Hugging Face model: return its .logits)")
        return None

    def facts(self) -> dict:
        return {"kind": self.kind, "vocab_size": self.vocab_size, "seq_len": self.seq_len}


Data = Images | Tokens


def from_facts(facts: dict) -> Data:
    """The data of a probe's (or a declaration's) facts: tokens where a vocabulary and a sequence
    length are given, images otherwise (the input shape defaults to 3x224x224)."""
    if facts.get("kind") == "tokens" or facts.get("vocab_size") is not None:
        return Tokens(int(facts["vocab_size"]), int(facts["seq_len"]))
    shape = tuple(int(d) for d in (facts.get("input_shape") or (3, 224, 224)))
    return Images(shape, int(facts["num_classes"]))


def _rows(data: Data, start: int, stop: int, seed: int):
    import torch

    first, last = start // BLOCK, (stop - 1) // BLOCK if stop > start else start // BLOCK - 1
    inputs, targets = [], []
    for index in range(first, last + 1):
        block_inputs, block_targets = _block(data, seed, index)
        inputs.append(block_inputs)
        targets.append(block_targets)
    if not inputs:
        return data.example(0)  # no rows, of the data's shape and dtype
    offset = first * BLOCK
    return (torch.cat(inputs)[start - offset: stop - offset].contiguous(),
            torch.cat(targets)[start - offset: stop - offset].contiguous())


# A long-lived worker builds the same rows for case after case: each block is made once
# (resnet18's is 38.5 MB; 32 of them at most). Callers get copies (torch.cat), never a block.
@functools.lru_cache(maxsize=32)
def _block(data: Data, seed: int, index: int):
    return data.block(seed, index)


def _stream(seed: int, which: int, block: int) -> torch.Generator:
    # Inputs and targets come from separate streams per block of rows.
    import torch

    return torch.Generator().manual_seed((seed * 4 + which) * 1_000_003 + block)

