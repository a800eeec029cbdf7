"""Launchers: how a worker's processes start, find each other and split the batch.

A strategy names its launcher (`Strategy.launcher(options)`); the harness never asks
which strategy it runs. Cases whose launcher `key` is equal share one long-lived worker:
one local process for every single-process case (it drives whichever devices a case
names), one torchrun per GPU count for every DDP-style strategy, one foreign interpreter
for MXNet.

The parent side (`key`, `command`) imports no torch; the worker side (`run`, `init`,
`gather`, `barrier`, `rows`) runs inside the worker.
"""
from __future__ import annotations

import os
import shlex
import socket
import sys
from typing import Callable

from bench.core.launch_spec import LaunchSpec
from bench.core.placement import Placement


class Launcher:
    """One process that drives every device of the placement itself."""

    name = "local"
    multi_process = False
    spans_nodes = False  # can one worker's processes run on several hosts (bench/run/nodes.py)
    # Whether a compiled case may follow another in one of this launcher's workers
    # (torch._dynamo.reset() between them): one process, yes (single's compile reduce-overhead at
    # 1024 and 2048/GPU after 256 in one worker ran as fast as alone on 2 H200s).
    shares_compiled = True
    # Options of the strategy that configure the launcher, not the step.
    options: tuple[str, ...] = ()

    def key(self, placement: Placement, options: dict, execution: str) -> tuple:
        """Cases with the same key can share one worker: one process drives any device set."""
        return (self.name, tuple((k, str(options.get(k))) for k in self.options))

    def processes_per_host(self, placement: Placement) -> int:
        """The worker's processes on each host (the ranks that share its CPUs)."""
        return 1

    def variables(self, placement: Placement) -> dict:
        """Environment variables the launcher gives the worker's processes where the user
        did not set them; rows record them with the user's own."""
        return {}

    module = "bench.run.worker"  # the worker's entry

    def command(self, spec_path: str, placement: Placement, options: dict, rendezvous: list[str] | None = None,
                module: str | None = None) -> list[str]:
        """The worker's command line; `rendezvous` (launchers that span nodes) joins the
        processes of every node into one job; `module`, another entry than the launcher's own
        (the parity check's: bench/checks/parity_worker.py)."""
        return [sys.executable, "-m", module or self.module, spec_path]

    # --- in the worker -------------------------------------------------------------
    def run(self, spec: LaunchSpec, body: Callable[[int, int, int], None]) -> None:
        """Run `body(rank, world_size, local_rank)` in this process (or processes)."""
        body(0, 1, 0)

    def init(self, spec: LaunchSpec, rank: int, world_size: int, local_rank: int) -> None:
        """Once per worker process, before the first case (e.g. a process group)."""

    def close(self) -> None:
        """Once per worker process, after the last case."""

    def gather(self, obj) -> list:
        """Every process's `obj`, in rank order."""
        return [obj]

    def barrier(self) -> None:
        """Line the processes up (before timing starts)."""

    def rows(self, rank: int, world_size: int, global_batch: int) -> tuple[int, int]:
        """The rows of the global batch this process loads: all of them here."""
        return 0, global_batch


class ProcessGroupLauncher(Launcher):
    """One process per device with a torch.distributed process group, created once per
    worker and reused for every case (re-initialising NCCL in one process is fragile)."""

    multi_process = True
    options = ("backend", "timeout_s")
    # A process group's compiled case runs in a worker of its own: on 2 H200s ddp's compile
    # reduce-overhead at 1024/GPU ran 178-194k img/s after the 256/GPU case in the same worker
    # (three times) and 215-217k first in one (five times), torch._dynamo.reset() between them
    # notwithstanding (docs/search.md).
    shares_compiled = False

    def key(self, placement, options, execution):
        # The process group spans this device set. A captured DDP step needs the group's async
        # error handling off from the start (PyTorch's CUDA-graph notes): a worker of its own.
        return super().key(placement, options, execution) + (placement.gpus, placement.n_replicas,
                                                              execution == "cuda-graph")

    def processes_per_host(self, placement):
        return placement.per_node

    def init(self, spec, rank, world_size, local_rank):
        from datetime import timedelta

        import torch
        import torch.distributed as dist

        if any(c.execution == "cuda-graph" for c in spec.cases):
            os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] = "0"
        gpus = spec.gpus
        backend = spec.launcher_options.get("backend", "auto")
        if backend == "auto":
            backend = "nccl" if gpus else "gloo"
        kwargs = {}
        if gpus:
            device = torch.device("cuda", gpus[local_rank % len(gpus)])
            torch.cuda.set_device(device)
            kwargs["device_id"] = device
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=timedelta(seconds=float(spec.launcher_options.get("timeout_s", 300))),
                                **kwargs)

    def close(self):
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()

    def gather(self, obj):
        import torch.distributed as dist

        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, obj)
        return out

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def rows(self, rank, world_size, global_batch):
        # Each rank builds and loads only its own shard of the global batch.
        per = global_batch // world_size
        return rank * per, (rank + 1) * per


class Torchrun(ProcessGroupLauncher):
    """torchrun (torch.distributed.run): the launcher PyTorch's users run DDP with."""

    name = "torchrun"
    options = ProcessGroupLauncher.options + ("torchrun_args",)
    spans_nodes = True

    def variables(self, placement):
        # torchrun's own rule: one OpenMP thread per process when it starts several.
        return {"OMP_NUM_THREADS": "1"} if placement.per_node > 1 else {}

    def command(self, spec_path, placement, options, rendezvous=None, module=None):
        extra = shlex.split(str(options.get("torchrun_args", "")))
        if rendezvous:
            extra = [a for a in extra if a != "--standalone"]  # one host's default; the rendezvous replaces it
        return [sys.executable, "-m", "torch.distributed.run", *extra, *(rendezvous or []),
                f"--nproc-per-node={placement.per_node}", "-m", module or self.module, spec_path]

    def run(self, spec, body):
        # torchrun's error files: a rank that dies of an exception leaves its traceback for
        # torchrun's summary (the worker also sends it on the events channel).
        from torch.distributed.elastic.multiprocessing.errors import record

        record(body)(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))


class FakeWorld(ProcessGroupLauncher):
    """One process as rank 0 of a world of `world_size` ranks whose collectives do nothing
    (PyTorch's fake process group): the rank's own memory at that world size, its shards,
    buckets and gathered parameters included, measured on one device (`bench fit`); a rank's
    graphs compiled beside a search (bench/run/precompile.py). The other
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
                           "torch that has it, or import FakeStore from its new place in bench/engine/launchers.py"
                           ) from None
    return FakeStore()


FAKE_WORLD = FakeWorld()


def _spawn_entry(local_rank: int, world_size: int, port: int, body) -> None:
    os.environ.update(RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    body(local_rank, world_size, local_rank)


class Spawn(ProcessGroupLauncher):
    """torch.multiprocessing.spawn from one worker process."""

    name = "spawn"

    def run(self, spec, body):
        import torch.multiprocessing

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        n = spec.n_replicas
        torch.multiprocessing.spawn(_spawn_entry, args=(n, port, body), nprocs=n, join=True)


class Interpreter(Launcher):
    """Another Python interpreter running its own worker module (MXNet's environment)."""

    def __init__(self, name: str, python: Callable[[], str], module: str):
        self.name = name
        self.python = python
        self.module = module

    def command(self, spec_path, placement, options, rendezvous=None, module=None):
        return [str(self.python()), "-m", module or self.module, spec_path]


def worker_environment(launcher: Launcher, placement: Placement, env: dict) -> dict:
    """`env` with the launcher's variables added where `env` does not set them. A case on the
    CPU runs with no GPU visible, whatever `env` says: PyTorch code that asks whether CUDA is
    available takes its CUDA path on a GPU host even for CPU tensors (DDP's PowerSGD hook calls
    torch.cuda.synchronize(cpu) and fails)."""
    variables = {**launcher.variables(placement), **env}
    if not placement.gpus:
        variables["CUDA_VISIBLE_DEVICES"] = ""
    return variables


LOCAL = Launcher()
TORCHRUN = Torchrun()
SPAWN = Spawn()
BY_NAME = {launcher.name: launcher for launcher in (LOCAL, TORCHRUN, SPAWN)}


def by_name(name: str) -> Launcher:
    return BY_NAME[name]
