"""A worker process: sweeps the batch sizes of one (strategy, precision, model, GPU set)
group and streams one result event per case to the parent.

Usage (by the sweep, never by hand): python -m bench.worker SPEC.json
"""
from __future__ import annotations

import functools
import gc
import json
import os
import sys
import time
import traceback

import torch

import strategies
from bench import protocol
from bench.models import get_workload, training_flops_per_image
from bench.precision import get_precision
from bench.stats import summarize
from bench.timing import StepClock, peak_memory_mib, reset_peak_memory
from strategies.base import Placement, WorkerContext


def configure_backends(spec: dict) -> None:
    torch.backends.cudnn.benchmark = bool(spec["cudnn_benchmark"])
    torch.backends.cudnn.deterministic = spec.get("mode") == "parity"
    if spec["tf32"] != "default":
        allow = spec["tf32"] == "on"
        torch.backends.cuda.matmul.allow_tf32 = allow
        torch.backends.cudnn.allow_tf32 = allow


def is_oom(exc: BaseException) -> bool:
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def measure_case(strategy, ctx: WorkerContext, workload, data, batch_per_replica: int) -> dict | None:
    spec = ctx.spec
    global_batch = batch_per_replica * ctx.world_size_replicas
    inputs, targets = data[0][:global_batch], data[1][:global_batch]
    model = workload.build(seed=spec["seed"])
    step = strategy.build(model, ctx)

    if spec["data"] == "host":
        # Every step starts from a pinned host batch: the copy is part of the step.
        if step.devices[0].type == "cuda":
            inputs, targets = inputs.pin_memory(), targets.pin_memory()
        run = lambda: step.run(step.place(inputs, targets))  # noqa: E731
    else:
        placed = step.place(inputs, targets)
        run = lambda: step.run(placed)  # noqa: E731

    clock = StepClock(step.devices)
    for _ in range(spec["warmup"]):
        run()
    clock.synchronize()
    reset_peak_memory(step.devices)
    strategy.barrier(ctx)

    step_ms, trial_wall = [], []
    for _ in range(spec["trials"]):
        times, wall = clock.time_trial(run, spec["steps"])
        step_ms.append(times)
        trial_wall.append(wall)
    memory = peak_memory_mib(step.devices)

    # Several processes: a step takes as long as its slowest rank.
    per_rank = strategy.gather(ctx, {"step_ms": step_ms, "wall": trial_wall, "memory": memory})
    if not strategy.reports(ctx):
        return None
    step_ms = [max(col) for col in zip(*[sum(r["step_ms"], []) for r in per_rank])]
    trial_wall = [max(col) for col in zip(*[r["wall"] for r in per_rank])]
    memory = {k: v for r in per_rank for k, v in r["memory"].items()}

    figures = summarize(step_ms, trial_wall, spec["steps"], global_batch)
    flops = training_flops_per_image(spec["model"])
    figures.update(
        global_batch=global_batch,
        n_replicas=ctx.world_size_replicas,
        flops_per_image=flops,
        tflops=flops * figures["img_per_s"] / 1e12,
    )
    if memory:
        ordinals = sorted(memory)
        figures.update(
            peak_alloc_mib=max(memory[o][0] for o in ordinals),
            peak_alloc_mib_min=min(memory[o][0] for o in ordinals),
            peak_reserved_mib=max(memory[o][1] for o in ordinals),
            peak_alloc_mib_per_device=";".join(f"{memory[o][0]:.1f}" for o in ordinals),
            peak_reserved_mib_per_device=";".join(f"{memory[o][1]:.1f}" for o in ordinals),
        )
    return figures


def parity_step(strategy, ctx: WorkerContext, workload, data) -> None:
    """One training step, no timing; the reporting rank saves the parameters it ends with."""
    batch = ctx.spec["batch_sizes"][0]
    global_batch = batch * ctx.world_size_replicas
    step = strategy.build(workload.build(seed=ctx.spec["seed"]), ctx)
    for _ in range(ctx.spec["steps"]):
        step.run(step.place(data[0][:global_batch], data[1][:global_batch]))
    strategy.barrier(ctx)
    if strategy.reports(ctx):
        params = {name: p.detach().float().cpu() for name, p in step.model.named_parameters()}
        torch.save(params, ctx.spec["parity_out"])


def make_context(spec: dict, rank: int = 0, world_size: int = 1, local_rank: int = 0) -> WorkerContext:
    strategy = strategies.get(spec["strategy"])
    placement = Placement(tuple(spec["gpus"]), spec["n_replicas"])
    return WorkerContext(
        spec, placement, get_precision(spec["precision"]), {**strategy.options, **spec["options"]},
        rank, world_size, local_rank, world_size_replicas=world_size if world_size > 1 else placement.n_replicas,
    )


def sweep(spec: dict, rank: int, world_size: int, local_rank: int) -> None:
    strategy = strategies.get(spec["strategy"])
    ctx = make_context(spec, rank, world_size, local_rank)
    configure_backends(spec)
    workload = get_workload(spec["model"])
    strategy.init_worker(ctx)
    try:
        # Synthetic data generated once, for the largest case; smaller cases use a prefix.
        largest = max(spec["batch_sizes"]) * ctx.world_size_replicas
        data = workload.synthetic_batch(largest, seed=spec["seed"])
        if spec.get("mode") == "parity":
            return parity_step(strategy, ctx, workload, data)
        for batch in spec["batch_sizes"]:
            reporting = strategy.reports(ctx)
            if reporting:
                protocol.emit("start", batch_per_gpu=batch)
            started = time.perf_counter()
            try:
                figures = measure_case(strategy, ctx, workload, data, batch)
            except Exception as exc:  # noqa: BLE001 - every failure becomes the case's status
                status = "oom" if is_oom(exc) else "error"
                first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                reason = f"{'rank %d: ' % rank if world_size > 1 else ''}{type(exc).__name__}: {first_line}"
                protocol.emit("result", batch_per_gpu=batch, status=status, reason=reason[:500], rank=rank,
                              traceback=traceback.format_exc()[-2000:])
                # Leave rather than go on: other ranks may be stuck in a collective, and a
                # CUDA error can poison the context. The parent restarts the rest.
                sys.stdout.flush()
                os._exit(protocol.EXIT_AFTER_OOM if status == "oom" else protocol.EXIT_AFTER_ERROR)
            if reporting:
                protocol.emit("result", batch_per_gpu=batch, status="ok", reason="",
                              elapsed_s=time.perf_counter() - started, **(figures or {}))
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    finally:
        strategy.close_worker(ctx)


def main(argv: list[str]) -> None:
    with open(argv[0]) as fh:
        spec = json.load(fh)
    strategy = strategies.get(spec["strategy"])
    options = {**strategy.options, **spec["options"]}
    strategy.run_worker(spec, options, functools.partial(sweep, spec))


if __name__ == "__main__":
    main(sys.argv[1:])
