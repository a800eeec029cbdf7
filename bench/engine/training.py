"""Pieces every PyTorch strategy shares: the optimiser, the loss, device placement, and the
executions (eager, torch.compile, a whole step captured in a CUDA graph).

Strategies import this inside their hooks, in the worker; nothing that reads results does.
"""
from __future__ import annotations

import os

import torch
from torch import nn

from bench.core import protocol
from bench.core.step import TrainStep, WorkerContext

# The same optimiser in every strategy (and, for SGD, in both frameworks). SGD with momentum is
# what the image workloads train with; AdamW what language models do, with nanoGPT's settings:
# betas (0.9, 0.95), weight decay 0.1 on matrices (weights of linear layers and embeddings)
# and none on biases and norms (its configure_optimizers), learning rate 6e-4.
SGD_SETTINGS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4}
ADAMW_SETTINGS = {"lr": 6e-4, "betas": (0.9, 0.95), "eps": 1e-8}
ADAMW_DECAY = 0.1

# How the update runs: one small kernel per tensor ("for-loop", PyTorch's default on the CPU),
# grouped multi-tensor kernels ("foreach", its default on CUDA), or one fused kernel ("fused").
# Same arithmetic; the launch count differs, which matters on GPUs.
IMPLS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def optimizer_class(name: str) -> type:
    return {"sgd": torch.optim.SGD, "adamw": torch.optim.AdamW}[name]


def optimizer_settings(name: str, impl: str, captured: bool = False) -> dict:
    """The suite's `name` optimiser's keyword arguments but its parameters, with `impl`'s kernels.
    AdamW in a CUDA graph keeps its step count on the GPU (capturable): a captured step cannot
    read it on the host."""
    if name == "sgd":
        return {**IMPLS[impl], **SGD_SETTINGS}
    return {**IMPLS[impl], **ADAMW_SETTINGS, **({"capturable": True} if captured else {})}


def optimizer_arguments(ctx: WorkerContext) -> dict:
    """The case's optimiser arguments, its `--optimizer` and `--optimizer-impl` resolved (for
    strategies that build the optimiser themselves, e.g. ZeroRedundancyOptimizer)."""
    return optimizer_settings(ctx.optimizer or "sgd", ctx.optimizer_impl or "for-loop",
                              captured=ctx.execution == "cuda-graph")


def parameter_groups(name: str, params) -> list[dict] | list:
    """The parameters as the optimiser takes them: AdamW decays matrices only (nanoGPT's two
    groups: a parameter of 2 or more dimensions decays, biases and norms do not); SGD decays all."""
    params = list(params)
    if name != "adamw":
        return params
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": ADAMW_DECAY},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build_optimizer(name: str, params, arguments: dict) -> torch.optim.Optimizer:
    """`name`'s optimiser over `params` with `arguments` (optimizer_arguments): the one way every
    strategy, the parity reference and the hand loops make it."""
    return optimizer_class(name)(parameter_groups(name, params), **arguments)


def make_optimizer(params, ctx: WorkerContext) -> torch.optim.Optimizer:
    """The suite's optimiser for the case: the same in every strategy."""
    return build_optimizer(ctx.optimizer or "sgd", params, optimizer_arguments(ctx))


def flag(value) -> bool:
    """A boolean strategy option, given as a bool or as text ("true", "1", "on"...)."""
    return str(value).lower() in ("1", "true", "yes", "on")


def memory_format(ctx: WorkerContext) -> torch.memory_format:
    return torch.channels_last if ctx.channels_last else torch.contiguous_format


def model_to(model: nn.Module, device: torch.device, ctx: WorkerContext) -> nn.Module:
    return model.to(device=device, memory_format=memory_format(ctx))


def convolve_channels_last(model: nn.Module) -> None:
    """Every 2-D convolution of `model` hands cuDNN a channels_last copy of its weight and its
    input, whatever the layout the tensors themselves are in: for strategies whose parameters
    cannot stay channels_last (FSDP2's shards must be contiguous; DataParallel's replicas get
    theirs from broadcast_coalesced, which rebuilds them contiguous on every device but the
    first). cuDNN's fast channels_last kernels want both operands in it. The copy is part of
    the autograd graph, so the gradient reaches the parameter as usual. The module's class is
    changed, not its forward, so that copies made of it (replicate()) do the same."""
    for module in model.modules():
        if type(module) is nn.Conv2d:
            module.__class__ = ChannelsLastConv2d


class ChannelsLastConv2d(nn.Conv2d):
    """A Conv2d that convolves channels_last copies (convolve_channels_last)."""

    def _conv_forward(self, inputs, weight, bias):
        # clone, not contiguous(): a one-channel or 1x1 weight is "contiguous" in both layouts, and
        # cuDNN takes the output layout from the strides it is given.
        if inputs.dim() == 4:  # an unbatched (3-D) input has no channels_last layout
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        return super()._conv_forward(inputs, weight.clone(memory_format=torch.channels_last), bias)


def inputs_to(inputs: torch.Tensor, device: torch.device, ctx: WorkerContext) -> torch.Tensor:
    inputs = inputs.to(device, non_blocking=True)
    # A memory format lays out 4-D batches only (token ids are 2-D): the case refuses channels_last for others.
    return inputs.contiguous(memory_format=memory_format(ctx)) if inputs.dim() == 4 else inputs


# A process that compiles a case's graphs without running them (bench/run/precompile.py) sets
# this: a function of the compile mode that gives torch.compile's backend in place of inductor.
side_backend = None


def lower_backward_with_forward() -> None:
    """AOTAutograd lowers a graph's backward when it lowers the forward, not at the first backward
    (the same kernels, compiled earlier): a process that never runs a backward leaves it in
    inductor's cache all the same."""
    import torch._functorch.config as functorch_config

    if hasattr(functorch_config, "force_non_lazy_backward_lowering"):
        functorch_config.force_non_lazy_backward_lowering = True


def maybe_compile(module: nn.Module, ctx: WorkerContext) -> nn.Module:
    if ctx.execution != "compile":
        return module
    # A search's workers beside side compiles: they find the side processes' graphs in the cache only so
    # (lowered lazily, the backwards of DDP's split pieces came out with other keys and were compiled afresh).
    if os.environ.get(protocol.LOWER_BACKWARD_ENV) == "1":
        lower_backward_with_forward()
    mode = None if ctx.compile_mode == "default" else ctx.compile_mode
    if side_backend is not None:
        return torch.compile(module, backend=side_backend(mode))
    return torch.compile(module, mode=mode)


class LossOf(nn.Module):
    """The model and its loss as one module, (inputs, targets) -> loss: what a strategy compiles, so
    that the loss is compiled with the model, as nanoGPT's model computes its loss in its forward.
    A language model's cross-entropy over (batch, T, 50304) logits is then compiled too instead of
    running eagerly on fp32 copies of the logits."""

    def __init__(self, model: nn.Module, criterion):
        super().__init__()
        self.model = model
        self.criterion = criterion

    def forward(self, inputs, targets):
        return self.criterion(self.model(inputs), targets)


def compiled_loss(model: nn.Module, ctx: WorkerContext) -> nn.Module:
    """`model` with the case's loss (LossOf), under torch.compile where the case's execution says so."""
    return maybe_compile(LossOf(model, ctx.criterion), ctx)


def compiled_graphs() -> int:
    """Graphs torch.compile has made in this process so far (dynamo's own count)."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"]


def compile_cache_counts() -> tuple[int, int, int]:
    """Graphs inductor took from its FX graph cache, compiled afresh into it, and compiled outside it
    (the cache off, or a graph it declines to cache) in this process so far: a forward and a
    backward graph each."""
    from torch._dynamo.utils import counters

    inductor = counters["inductor"]
    return inductor["fxgraph_cache_hit"], inductor["fxgraph_cache_miss"], inductor["fxgraph_cache_bypass"]


def compile_cache_columns(hits: int, misses: int, bypassed: int, traced: int) -> dict:
    """A compiled case's graphs: how many came from inductor's cache and how many were compiled
    (afresh into the cache, or outside it), and in words with the cache's folder (`compile_cache`).
    `traced`: the graphs dynamo made for the case, which says whether any was compiled at all."""
    import os

    folder = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or "inductor's default folder"
    compiled = misses + bypassed
    if hits + compiled:
        said = f"{hits} of {hits + compiled} graphs from the cache in {folder}" + (
            f", {misses} compiled afresh" if misses else "") + (
            f", {bypassed} compiled outside the cache" if bypassed else "")
    elif traced:  # counts unknown: none rather than a false 0
        return {"compile_cache": "graphs compiled with no count from inductor's cache (is it off, "
                                 "TORCHINDUCTOR_FX_GRAPH_CACHE=0?)", "graphs_from_cache": None, "graphs_compiled": None}
    else:
        said = "no graph compiled in this case: the worker held them from an earlier case"
    return {"compile_cache": said, "graphs_from_cache": hits, "graphs_compiled": compiled}


def shard(tensor: torch.Tensor, n: int, index: int) -> torch.Tensor:
    """Replica `index`'s equal slice of the batch."""
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


def grad_clearer(optimizer):
    """A callable that clears the optimiser's gradients after a step: zero_grad(set_to_none=True)
    where zero_grad takes it. Apex O2/O3 replace an optimiser's zero_grad by one without
    arguments (it zeroes the fp16 model gradients in place and drops the fp32 master ones):
    that one is called as it is. Resolved once, when the step is built, after amp.initialize."""
    import inspect

    try:
        params = inspect.signature(optimizer.zero_grad).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the standard call
        return lambda: optimizer.zero_grad(set_to_none=True)
    if any(p.name == "set_to_none" or p.kind is p.VAR_KEYWORD for p in params):
        return lambda: optimizer.zero_grad(set_to_none=True)
    return optimizer.zero_grad


def trained_parameters(model: nn.Module, optimizer) -> dict:
    """Name -> the tensor the optimiser updates: Apex O2's fp32 master copy of an fp16
    parameter (paired by Apex itself), the model's own parameter otherwise."""
    stash = getattr(optimizer, "_amp_stash", None)
    masters = {}
    if stash is not None and getattr(stash, "lazy_init_called", False) and hasattr(stash, "all_fp32_from_fp16_params"):
        masters = {id(half): master for half, master in zip(stash.all_fp16_params, stash.all_fp32_from_fp16_params)}
    return {name: masters.get(id(p), p) for name, p in model.named_parameters()}


def standard_step(forward, optimizer, runtime, criterion=None):
    """`run` for strategies whose forward returns the batch's output on one device (single,
    DataParallel and friends, DDP and the sharded strategies); `criterion` is the workload's
    loss (ctx.criterion), or None where `forward(inputs, targets)` returns the loss itself (a
    LossOf, compiled with its loss: `compiled_loss`). The phases are labelled for the profiler, so
    that the step anatomy can tell the optimiser apart exactly."""
    from torch.profiler import record_function

    clear_grads = grad_clearer(optimizer)

    def run(batch):
        inputs, targets = batch
        with record_function("parabench.forward"), runtime.autocast():
            loss = criterion(forward(inputs), targets) if criterion is not None else forward(inputs, targets)
        with record_function("parabench.backward"):
            runtime.backward(loss, optimizer)
        with record_function("parabench.optimizer"):
            runtime.step(optimizer)
            runtime.update()
            clear_grads()

    return run


def full_tensor(tensor):
    """A parameter as one whole tensor (FSDP2 keeps DTensor shards)."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def capture_whole_step(step: TrainStep, placed, warmup_steps: int = 11, restore: bool = False):
    """The whole training step (forward, backward, optimiser update) captured once in a CUDA
    graph; returns a `run` that replays it on the captured batch.

    PyTorch's CUDA-graph recipe: warm up on a side stream (DDP needs 11 eager iterations
    before capture, to build its buckets), leave the gradients unset before capture so
    that backward allocates them from the graph's pool, then capture one step. Replays
    reuse the same input memory: the batch is resident, as in the eager `device` mode.
    `restore` puts parameters, buffers and momentum back to where they were before the
    warm-up (in place, so the graph's addresses stay valid): replays then are the first
    training steps, which is what the parity tests compare.
    """
    device = step.devices[0]
    with torch.cuda.device(device):
        return _capture(step, placed, device, warmup_steps, restore)


def _capture(step: TrainStep, placed, device, warmup_steps: int, restore: bool):
    saved = [t.detach().clone() for t in _state(step)] if restore else None
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(warmup_steps):
            step.run(placed)
    torch.cuda.current_stream(device).wait_stream(side)
    torch.cuda.synchronize(device)
    if step.optimizer is not None:
        grad_clearer(step.optimizer)()
    # The graph's private pool holds the step's memory from here on: timing.peak_memory_mib counts it.
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step.run(placed)
    if restore:
        with torch.no_grad():
            for tensor, value in zip(_state(step), saved):
                tensor.copy_(value)
            for state in step.optimizer.state.values():
                for value in state.values():  # SGD's momentum*0 + grad; AdamW's step 0 and empty moments
                    if isinstance(value, torch.Tensor):
                        value.zero_()
        torch.cuda.synchronize(device)

    def replay(_batch):
        graph.replay()

    return replay


def _state(step: TrainStep) -> list:
    return list(step.model.parameters()) + list(step.model.buffers())
