"""The fake world of n: rank 0 of n ranks on one device, whose collectives do nothing."""
from __future__ import annotations

from bench.engine.launchers import ProcessGroupLauncher


class FakeWorld(ProcessGroupLauncher):
    """One process as rank 0 of a world of `world_size` ranks whose collectives do nothing
    (PyTorch's fake process group): the rank's own memory at that world size, its shards,
    buckets and gathered parameters included, measured on one device (`bench fit`). The other
    ranks do not exist, so nothing a collective returns is real: a strategy that needs real
    results (DDP's reducer) says what to do instead in a fake world itself."""

    name = "fake-world"
    multi_process = False

    def processes_per_host(self, placement):
        return 1

    def init(self, spec, rank, world_size, local_rank):
        import torch
        import torch.distributed as dist

        if spec.gpus:
            torch.cuda.set_device(spec.gpus[0])
        dist.init_process_group("fake", store=fake_store(), rank=0, world_size=world_size)

    def run(self, spec, body):
        body(0, spec.n_replicas, 0)

    def gather(self, obj):
        return [obj]  # the other ranks do not exist

    def barrier(self):
        pass


def fake_store():
    """The store the fake process group starts from. Importing the module that holds it also
    registers the `fake` backend with torch.distributed. PyTorch keeps it among its testing
    helpers: a torch that moves it is named in one line (tests/test_fit.py checks it is there)."""
    try:
        from torch.testing._internal.distributed.fake_pg import FakeStore
    except ImportError as exc:
        import torch

        raise RuntimeError(f"torch {torch.__version__} has no fake process group at "
                           f"torch.testing._internal.distributed.fake_pg ({exc}): a fake world needs one; install a "
                           "torch that has it, or import FakeStore from its new place in bench/fit/world.py"
                           ) from None
    return FakeStore()


FAKE_WORLD = FakeWorld()
