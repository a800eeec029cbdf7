"""Where a case runs: a set of CUDA ordinals on each node, or the CPU. No torch."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """Where a case runs: CUDA ordinals, or the CPU when `gpus` is empty."""

    gpus: tuple[int, ...]  # on each node
    n_replicas: int  # model replicas in all (devices on GPU, replicas or processes on CPU), every node's
    nnodes: int = 1  # hosts the replicas span (one process group across them)

    @property
    def device_type(self) -> str:
        return "cuda" if self.gpus else "cpu"

    @property
    def per_node(self) -> int:
        """Replicas (processes) on each node."""
        return self.n_replicas // self.nnodes

    def label(self) -> str:
        if self.nnodes > 1:
            what = f"{len(self.gpus)} GPU" if self.gpus else f"CPU x{self.per_node}"
            return f"{self.nnodes} nodes x {what}"
        if self.gpus:
            return f"{len(self.gpus)} GPU{'s' if len(self.gpus) > 1 else ''} [{','.join(map(str, self.gpus))}]"
        return f"CPU x{self.n_replicas}"
