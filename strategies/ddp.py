"""DistributedDataParallel: one process per device, gradients all-reduced in buckets.

Launched with torchrun (default) or torch.multiprocessing.spawn. NCCL on GPUs, gloo
on the CPU. The process group is created once per worker and reused for every batch
size: re-initialising NCCL in one process is fragile. `torchrun_args` is handed to
torchrun as is, which is how a sweep spans hosts
(`--nnodes 2 --node-rank 0 --rdzv-backend c10d --rdzv-endpoint HOST:PORT`).
"""
from __future__ import annotations

import os
import shlex
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from strategies import common, register
from strategies.base import Strategy, TrainStep


def _spawn_entry(local_rank: int, world_size: int, port: int, body) -> None:
    os.environ.update(
        RANK=str(local_rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    body(local_rank, world_size, local_rank)


@register
class DDP(Strategy):
    name = "ddp"
    summary = "DistributedDataParallel, one process per device (torchrun; NCCL or gloo)"
    supports_apex = True
    options = {
        "launcher": "torchrun",  # or "spawn" (torch.multiprocessing.spawn)
        "torchrun_args": "--standalone",
        "backend": "auto",  # nccl on GPUs, gloo on the CPU
        "bucket_cap_mb": 25,
        "gradient_as_bucket_view": False,
        "static_graph": False,
        # False: BatchNorm running statistics stay per rank instead of being broadcast from
        # rank 0 before every forward (parameters are unaffected).
        "broadcast_buffers": True,
        "timeout_s": 300,  # collectives that wait longer than this fail instead of hanging
    }

    def launch_command(self, spec_path, placement, options):
        if options["launcher"] == "spawn":
            return super().launch_command(spec_path, placement, options)
        return [
            sys.executable, "-m", "torch.distributed.run", *shlex.split(str(options["torchrun_args"])),
            f"--nproc-per-node={placement.n_replicas}", "-m", "bench.worker", spec_path,
        ]

    def run_worker(self, spec, options, body):
        if options["launcher"] == "spawn":
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            n = spec["n_replicas"]
            torch.multiprocessing.spawn(_spawn_entry, args=(n, port, body), nprocs=n, join=True)
        else:
            body(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"]))

    def _device(self, ctx) -> torch.device:
        devices = ctx.all_devices()
        return devices[ctx.local_rank % len(devices)]

    def init_worker(self, ctx):
        device = self._device(ctx)
        backend = ctx.options["backend"]
        if backend == "auto":
            backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(
            backend, rank=ctx.rank, world_size=ctx.world_size,
            timeout=timedelta(seconds=float(ctx.options["timeout_s"])), **kwargs,
        )

    def close_worker(self, ctx):
        if dist.is_initialized():
            dist.destroy_process_group()

    def gather(self, ctx, obj):
        out = [None] * ctx.world_size
        dist.all_gather_object(out, obj)
        return out

    def barrier(self, ctx):
        dist.barrier()

    def build(self, model, ctx):
        device = self._device(ctx)
        model = common.model_to(model, device, ctx)
        optimizer = common.make_optimizer(model.parameters(), ctx.sgd_impl)
        runtime = ctx.precision.runtime(device.type)
        model, optimizer = runtime.prepare(model, optimizer)
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=float(ctx.options["bucket_cap_mb"]),
            gradient_as_bucket_view=common.flag(ctx.options["gradient_as_bucket_view"]),
            static_graph=common.flag(ctx.options["static_graph"]),
            broadcast_buffers=common.flag(ctx.options["broadcast_buffers"]),
        )
        rank, world = ctx.rank, ctx.world_size

        def place(inputs, targets):
            # Each rank loads only its own shard of the global batch.
            return (
                common.inputs_to(common.shard(inputs, world, rank), device, ctx),
                common.shard(targets, world, rank).to(device, non_blocking=True),
            )

        run = common.standard_step(common.maybe_compile(ddp, ctx), device, optimizer, runtime)
        return TrainStep(model, [device], place, run)
