"""DistributedDataParallel: one process per device, gradients all-reduced in buckets.

Launched by torchrun (default) or torch.multiprocessing.spawn; NCCL on GPUs, gloo on the
CPU; one process group per worker, shared by every case it runs. `torchrun_args` is
handed to torchrun as is. `comm_hook` registers one of PyTorch's built-in communication
hooks: fp16/bf16 compress the gradients before the all-reduce, powersgd replaces it by a
rank-1 PowerSGD approximation after two exact steps; all three change the numbers.
"""
from __future__ import annotations

from strategies import register
from strategies.base import Collective, Strategy, TrainStep


def buffer_sync(on: bool) -> dict:
    """DDP's arguments for the broadcast_buffers option. On is DDP's default: nothing is passed
    (torch 2.13 deprecates `broadcast_buffers` with a FutureWarning on every construction). Off:
    `forward_sync_buffers=False` where torch has it (it still syncs the buffers once at start-up,
    where every rank holds the same seeded ones anyway), `broadcast_buffers=False` before."""
    import inspect

    from torch.nn.parallel import DistributedDataParallel

    if on:
        return {}
    newer = "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers": False} if newer else {"broadcast_buffers": False}


def comm_hook(ddp, name: str) -> None:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if dist.get_backend() == "fake":
        if name not in ("none", *COMPRESSED):
            raise ValueError(f"comm_hook={name} cannot run in a fake world: it needs its collectives' real results")
        ddp.register_comm_hook(name, fake_world_hook)
        return
    if name == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif name == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif name == "powersgd":
        # Two exact all-reduce steps first (PowerSGD's own warm-up), then rank-1 compression.
        state = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)


COMPRESSED = {"fp16": "float16", "bf16": "bfloat16"}


def fake_world_hook(name: str, bucket):
    """In a fake world (`bench fit`: rank 0 of n whose collectives do nothing) the reducer still
    needs each bucket's all-reduced gradients back: the bucket is returned as it is, so that
    the rank keeps the memory a real all-reduce leaves it (the bucket, reduced in place), and
    a compressing hook's copy of the bucket in its dtype is made as the hook makes it."""
    import torch

    buffer = bucket.buffer()
    if name in COMPRESSED:
        buffer.copy_(buffer.to(getattr(torch, COMPRESSED[name])))
    done = torch.futures.Future()
    done.set_result(buffer)
    return done


@register
class DDP(Strategy):
    name = "ddp"
    summary = "DistributedDataParallel, one process per device (torchrun; NCCL or gloo)"
    order, colour, reference = 20, "tab:red", True
    # Gradients all-reduced in buckets during backward (BatchNorm's buffers, broadcast from rank 0
    # before each forward, are a few KiB and left out).
    sends = (Collective("all_reduce", "gradients", when="in buckets, during backward"),)
    apex_levels = ("O1", "O2", "O3")  # amp.initialize runs before the DDP wrapping (build)
    executions = ("eager", "compile", "cuda-graph")
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
        "comm_hook": "none",
        "timeout_s": 300,  # collectives that wait longer than this fail instead of hanging
    }
    option_choices = {"launcher": ("torchrun", "spawn"), "backend": ("auto", "nccl", "gloo"),
                      "comm_hook": ("none", "fp16", "bf16", "powersgd")}
    # What PyTorch's DDP notes suggest for speed; each is a lever of its own in a search.
    search_options = {"gradient_as_bucket_view": True, "static_graph": True, "bucket_cap_mb": 100}

    def unavailable_reason(self, placement, precision, execution="eager", options=None):
        if (options or {}).get("comm_hook") == "bf16" and not placement.gpus:
            return "comm_hook=bf16 needs NCCL: PyTorch's bf16_compress_hook does not run on gloo"
        return super().unavailable_reason(placement, precision, execution, options)

    def launcher(self, options):
        from bench.engine import launchers

        return launchers.by_name(options["launcher"])

    def wrap(self, model, device, ctx):
        """The model as this strategy trains it (DDP here; subclasses shard or swap the optimiser)."""
        import torch
        from torch.nn.parallel import DistributedDataParallel

        from bench.engine import training

        def make():
            return DistributedDataParallel(
                model,
                device_ids=[device.index] if device.type == "cuda" else None,
                bucket_cap_mb=float(ctx.options["bucket_cap_mb"]),
                gradient_as_bucket_view=training.flag(ctx.options["gradient_as_bucket_view"]),
                static_graph=training.flag(ctx.options["static_graph"]),
                **buffer_sync(training.flag(ctx.options["broadcast_buffers"])),
            )

        if ctx.execution == "cuda-graph":
            # PyTorch's CUDA-graph notes: DDP must be constructed in a side-stream context.
            side = torch.cuda.Stream(device)
            with torch.cuda.stream(side):
                ddp = make()
            torch.cuda.current_stream(device).wait_stream(side)
        else:
            ddp = make()
        comm_hook(ddp, ctx.options["comm_hook"])
        return ddp

    def make_optimizer(self, model, ctx):
        from bench.engine import training

        return training.make_optimizer(model.parameters(), ctx)

    def build(self, model, ctx):
        from bench.engine import training

        device = ctx.device()
        model = training.model_to(model, device, ctx)
        optimizer = self.make_optimizer(model, ctx)
        runtime = ctx.precision.runtime(device.type)
        model, optimizer = runtime.prepare(model, optimizer)
        # DDP wraps the model with its loss, so that a compiled step compiles the loss too (training.LossOf).
        wrapped = self.wrap(training.LossOf(model, ctx.criterion), device, ctx)

        def place(inputs, targets):
            # This rank's shard of the global batch: the launcher gave it nothing else.
            return training.inputs_to(inputs, device, ctx), targets.to(device, non_blocking=True)

        run = training.standard_step(training.maybe_compile(wrapped, ctx), optimizer, runtime)
        return TrainStep(model, [device], place, run, optimizer)
