"""The MXNet Gluon worker: the same sweep and result protocol as bench/run/worker.py, run
by the MXNet environment's interpreter. It never imports torch: the initial weights and
the synthetic batch come from the files the parent exported from PyTorch.

Usage (by the sweep, never by hand): .venv-mxnet/bin/python -m strategies.gluon.worker SPEC.json
"""
from __future__ import annotations

import functools
import json
import os
import sys
import time
import traceback

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

from strategies.gluon import models as mx_models
from bench.core import protocol
from bench.core.launch_spec import LaunchSpec
from bench.core.step import CaseSpec
from bench.core.stats import summarize

SGD = {"learning_rate": 0.1, "momentum": 0.9, "wd": 1e-4}  # bench/engine/training.py's SGD_SETTINGS


def contexts(spec: CaseSpec) -> list:
    if spec.gpus:
        return [mx.gpu(i) for i in spec.gpus]
    return [mx.cpu(i) for i in range(spec.n_replicas)]


def build_trainer(spec: CaseSpec, ctx: list, weights: dict):
    net = mx_models.build(spec.extra["network"])
    mx_models.load_torch_weights(net, weights, ctx)
    net.hybridize(static_alloc=True, static_shape=True)
    trainer = gluon.Trainer(net.collect_params(), "sgd", dict(SGD), kvstore=spec.options.get("kvstore", "device"))
    if spec.precision == "amp-fp16":
        from mxnet.contrib import amp

        amp.init_trainer(trainer)
    return net, trainer


def make_step(spec: CaseSpec, ctx: list, net, trainer, inputs: np.ndarray, targets: np.ndarray):
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    batch = inputs.shape[0]
    xs = gluon.utils.split_and_load(mx.nd.array(inputs), ctx, even_split=True)
    ys = gluon.utils.split_and_load(mx.nd.array(targets), ctx, even_split=True)
    amp_on = spec.precision == "amp-fp16"

    def step():
        with autograd.record():
            losses = [loss_fn(net(x), y) for x, y in zip(xs, ys)]
        if amp_on:
            from mxnet.contrib import amp

            with amp.scale_loss(losses, trainer) as scaled:
                autograd.backward(scaled)
        else:
            autograd.backward(losses)
        # The kvstore sums the gradients of every context; step(batch) divides by the global batch.
        trainer.step(batch)

    return step


def device_memory_mib(ctx: list) -> list[float]:
    used = []
    for c in ctx:
        if c.device_type == "gpu":
            free, total = mx.context.gpu_memory_info(c.device_id)
            used.append((total - free) / 2**20)
    return used


def measure(case: CaseSpec, ctx: list, weights: dict, inputs, targets) -> dict:
    net, trainer = build_trainer(case, ctx, weights)
    step = make_step(case, ctx, net, trainer, inputs, targets)
    for _ in range(case.warmup):
        step()
    mx.nd.waitall()
    step_ms, walls = [], []
    for _ in range(case.trials):
        trial_start = time.perf_counter()
        for _ in range(case.steps):
            t0 = time.perf_counter()
            step()
            mx.nd.waitall()  # MXNet is asynchronous: bound every step
            step_ms.append((time.perf_counter() - t0) * 1000)
        walls.append(time.perf_counter() - trial_start)
    figures = summarize(step_ms, walls, case.steps, case.global_batch)
    # The reference workload's images, one a row.
    figures.update(flops_per_item=case.extra["flops_per_item"], unit="images", items_per_sample=1,
                   tflops=case.extra["flops_per_item"] * figures["items_per_s"] / 1e12)
    used = device_memory_mib(ctx)
    if used:  # what the driver reports in use per device (MXNet keeps no peak counter)
        figures.update(peak_alloc_mib=max(used), peak_alloc_mib_min=min(used), peak_reserved_mib=max(used),
                       peak_alloc_mib_per_device=";".join(f"{u:.1f}" for u in used))
    return figures


def main(argv: list[str], run_case=None, spec_type: type[LaunchSpec] = LaunchSpec) -> None:
    """Run the spec's cases, each by `run_case(case, ctx, weights, inputs, targets)` (its row's
    figures): `measure` unless another is given (the parity check's, strategies/gluon/parity.py,
    which reads its own spec_type and is handed the spec)."""
    with open(argv[0]) as fh:
        spec = spec_type.from_json(json.load(fh))
    run_case = functools.partial(run_case, spec=spec) if run_case else measure
    os.unlink(argv[0])  # read: nothing is left behind whatever happens next
    amp_initialised = False
    for case in spec.cases:
        protocol.emit("start", key=list(case.key))
        started = time.perf_counter()
        try:
            if case.precision == "amp-fp16" and not amp_initialised:
                from mxnet.contrib import amp

                amp.init()
                amp_initialised = True
            ctx = contexts(case)
            weights = dict(np.load(case.extra["weights_file"]))
            data = np.load(case.extra["data_file"])
            inputs, targets = data["inputs"], data["targets"].astype(np.float32)
            figures = run_case(case, ctx, weights, inputs, targets)
        except Exception as exc:  # noqa: BLE001 - every failure becomes the case's status
            text = str(exc)
            status = "oom" if "out of memory" in text.lower() or isinstance(exc, MemoryError) else "error"
            first = text.strip().splitlines()[0][:400] if text.strip() else ""
            protocol.emit("result", key=list(case.key), status=status, reason=f"{type(exc).__name__}: {first}",
                          traceback=traceback.format_exc()[-4000:])
            sys.stdout.flush()
            os._exit(protocol.EXIT_AFTER_OOM if status == "oom" else protocol.EXIT_AFTER_ERROR)
        protocol.emit("result", key=list(case.key), status="ok", reason="", mxnet=mx.__version__, numpy=np.__version__,
                      elapsed_s=time.perf_counter() - started, **figures)


if __name__ == "__main__":
    main(sys.argv[1:])
