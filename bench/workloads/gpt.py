"""Language models: GPT-2's sizes in nanoGPT's shape (the network is in _gpt.py), trained on
sequences of 1024 synthetic token ids with next-token targets, vocabulary 50304 (GPT-2's 50257
padded to a multiple of 64, as nanoGPT pads it), AdamW by default. Throughput counts tokens.

| workload | layers | heads | width | parameters (tied embeddings) |
| --- | --- | --- | --- | --- |
| gpt2-124m | 12 | 12 | 768 | 124.5 M |
| gpt2-350m | 24 | 16 | 1024 | 354.9 M |
| gpt2-1.5b | 48 | 25 | 1600 | 1,557.7 M |
| gpt-tiny | 2 | 2 | 64 | 0.1 M (vocabulary 512, 64 tokens: the CPU tests) |

The fp32 model state of gpt2-1.5b (weights, gradients and AdamW's two moments, 16 bytes a
parameter) is about 25 GB: what DDP replicates on every GPU, ZeRO-1 shards the moments of and
FSDP2 shards whole. FSDP2 shards each transformer `Block` on its own (`blocks`).
"""
from __future__ import annotations

from bench.workloads import Workload, register
from bench.workloads.data import Tokens

VOCABULARY, SEQUENCE = 50304, 1024


def gpt(**kwargs):
    """A factory of the GPT family (bench.workloads._gpt.GPT's arguments)."""
    def build():
        from bench.workloads._gpt import GPT

        return GPT(**kwargs)

    return build


def _register(name: str, layers: int, heads: int, width: int, vocab: int = VOCABULARY, seq_len: int = SEQUENCE,
              note: str = "") -> None:
    register(Workload(name, Tokens(vocab, seq_len), gpt(vocab_size=vocab, seq_len=seq_len, layers=layers, heads=heads,
                                                           width=width),
                      summary=f"GPT, nanoGPT's shape: {layers} layers, {heads} heads, width {width}, "
                              f"{seq_len} tokens, vocabulary {vocab}{note}",
                      blocks=("Block",), order=30))


_register("gpt2-124m", 12, 12, 768)
_register("gpt2-350m", 24, 16, 1024)
_register("gpt2-1.5b", 48, 25, 1600)
_register("gpt-tiny", 2, 2, 64, vocab=512, seq_len=64, note=" (the CPU tests' language model)")
