"""Pieces every PyTorch strategy shares: the optimiser, the loss, device placement."""
from __future__ import annotations

import torch
from torch import nn

from strategies.base import Strategy, TrainStep, WorkerContext

# The same optimiser in every strategy and both frameworks.
SGD_SETTINGS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}

loss_fn = nn.CrossEntropyLoss()


# How the SGD update runs: one small kernel per tensor ("for-loop", PyTorch's default on
# the CPU), grouped multi-tensor kernels ("foreach", its default on CUDA), or one fused
# kernel ("fused"). Same arithmetic; the launch count differs, which matters on GPUs.
SGD_IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def default_sgd_impl(on_gpu: bool) -> str:
    """PyTorch's own choice when neither foreach nor fused is asked for."""
    return "foreach" if on_gpu else "for-loop"


def make_optimizer(params, impl: str = "for-loop") -> torch.optim.Optimizer:
    return torch.optim.SGD(params, **SGD_IMPLS[impl], **SGD_SETTINGS)


def flag(value) -> bool:
    """A boolean strategy option, given as a bool or as text ("true", "1", "on"...)."""
    return str(value).lower() in ("1", "true", "yes", "on")


def memory_format(ctx: WorkerContext) -> torch.memory_format:
    return torch.channels_last if ctx.channels_last else torch.contiguous_format


def model_to(model: nn.Module, device: torch.device, ctx: WorkerContext) -> nn.Module:
    return model.to(device=device, memory_format=memory_format(ctx))


def inputs_to(inputs: torch.Tensor, device: torch.device, ctx: WorkerContext) -> torch.Tensor:
    return inputs.to(device, non_blocking=True).contiguous(memory_format=memory_format(ctx))


def maybe_compile(module: nn.Module, ctx: WorkerContext) -> nn.Module:
    return torch.compile(module) if ctx.compile else module


def shard(tensor: torch.Tensor, n: int, index: int) -> torch.Tensor:
    """Replica `index`'s equal slice of the global batch."""
    per = tensor.shape[0] // n
    return tensor[index * per : (index + 1) * per]


class AutocastForward(nn.Module):
    """Runs the wrapped module's forward under the case's autocast.

    parallel_apply re-enters autocast in its worker threads with the *default* dtype
    (float16 on CUDA), so bf16 under DataParallel would silently run in fp16; entering
    autocast inside forward, as PyTorch's AMP notes advise for DataParallel, keeps it.
    """

    def __init__(self, module: nn.Module, runtime):
        super().__init__()
        self.module = module
        self.runtime = runtime

    def forward(self, x):
        with self.runtime.autocast():
            return self.module(x)


def standard_step(forward, targets_device: torch.device, optimizer, runtime):
    """`place` and `run` for strategies whose forward returns the whole batch's output
    on one device (single, DataParallel and friends, DDP)."""

    def run(batch):
        inputs, targets = batch
        with runtime.autocast():
            loss = loss_fn(forward(inputs), targets)
        runtime.backward(loss, optimizer)
        runtime.step(optimizer)
        runtime.update()
        optimizer.zero_grad(set_to_none=True)

    return run


class FromDeviceZero(Strategy):
    """Base of the DataParallel family: one process, parameters and the whole batch on the
    first GPU, replicas made from them every step and run in threads. A subclass only says
    how its forward spreads the batch (`make_forward`)."""

    needs_cuda = True
    replicas_in_threads = True
    supports_compile = False

    def make_forward(self, module: nn.Module, devices: list[torch.device]):
        raise NotImplementedError

    def build(self, model, ctx):
        devices = ctx.all_devices()
        model = model_to(model, devices[0], ctx)
        optimizer = make_optimizer(model.parameters(), ctx.sgd_impl)
        runtime = ctx.precision.runtime("cuda")
        forward = self.make_forward(AutocastForward(model, runtime), devices)

        def place(inputs, targets):
            # The whole batch goes to device 0; the forward scatters it.
            return inputs_to(inputs, devices[0], ctx), targets.to(devices[0], non_blocking=True)

        return TrainStep(model, devices, place, standard_step(forward, devices[0], optimizer, runtime))
