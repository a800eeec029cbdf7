"""Does the harness cost anything? A bare training loop against the suite's `single`.

Both run in this process on the same GPU, alternating, so that clocks and thermals are
shared: `python -m bench check bareloop --model resnet18 --batch 256 --precision amp-fp16 --channels-last`.
The bare loop is timed the most favourable way (host clock, one synchronisation at each
end of a run of steps); the suite's figure is its own (median of per-step CUDA-event
intervals), and its whole-trial wall-clock figure is printed beside it.
"""
from __future__ import annotations

import json
import statistics
import time

import torch

import strategies
from bench.cases.case import Case, settings as make_settings
from bench.checks.handloop import _loop
from bench.run.worker import Job, configure_backends, measure_case
from bench.core.launch_spec import LaunchSpec
from bench.core.placement import Placement


def bare_loop(model_name: str, batch: int, precision: str, channels_last: bool, warmup: int, steps: int,
              kernels: str) -> float:
    """Items (images, tokens) per second of a plain loop: the 20 lines a user would write
    (bench/checks/handloop.py's eager loop)."""
    step, items = _loop(model_name, batch, precision, channels_last, kernels, "eager")
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    return items * steps / (time.perf_counter() - start)


def suite_single(model_name: str, batch: int, precision: str, channels_last: bool, warmup: int, steps: int,
                 kernels: str, gpu: int | None = 0) -> dict:
    """The suite's row of its one-device baseline, measured in this process on `gpu` (None: the CPU)."""
    settings = make_settings(warmup=warmup, steps=steps, trials=3, channels_last="on" if channels_last else "auto",
                             cudnn_benchmark="on", optimizer_impl=kernels)
    # The registry's one-device baseline (strategies/single.py), set against the bare loop.
    gpus = () if gpu is None else (gpu,)
    case = Case.make(strategies.baseline(), precision, model_name, Placement(gpus, 1), batch, "eager", settings).spec()
    configure_backends(case)
    return measure_case(Job(LaunchSpec.local("local", gpus, cases=(case,)), 0, 1, 0), case)


def run(args) -> None:
    """`python -m bench check bareloop`: rounds of the bare loop and the suite's step, interleaved."""
    torch.backends.cudnn.benchmark = True
    bare, suite, suite_wall = [], [], []
    for _ in range(args.rounds):
        bare.append(bare_loop(args.model, args.batch, args.precision, args.channels_last, args.warmup, args.steps,
                              args.optimizer_impl))
        figures = suite_single(args.model, args.batch, args.precision, args.channels_last, args.warmup, args.steps,
                               args.optimizer_impl)
        suite.append(figures["items_per_s"])
        suite_wall.append(figures["wall_items_per_s"])
    result = {
        "case": vars(args), "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
        "bare_items_per_s": bare, "suite_items_per_s": suite, "suite_wall_items_per_s": suite_wall,
        "suite_over_bare": statistics.median(suite) / statistics.median(bare),
        "suite_wall_over_bare": statistics.median(suite_wall) / statistics.median(bare),
    }
    print(json.dumps(result, indent=1, default=str))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1, default=str)
