"""One training step of each single-process strategy, as pytest-benchmark benchmarks.

    make pytest-bench                      # runs and saves (--benchmark-autosave)
    make pytest-bench ARGS="--benchmark-compare --benchmark-compare-fail=median:15%"

Each benchmark is one synchronised step on the resident synthetic batch; images/s and
peak memory go into extra_info. torchrun strategies (ddp) and MXNet cannot be timed
inside one Python process: `python -m bench compare` covers those.
"""
import pytest
import torch

import strategies
from bench.cases.case import Case, Settings
from bench.workloads import get_workload
from bench.measure.timing import StepClock, peak_memory_mib, reset_peak_memory
from bench.run.worker import configure_backends, make_context
from strategies.base import Placement

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
CASES = [("single", (), 1, 4), ("allreduce-scratch", (), 2, 2)]
if GPUS:
    CASES = [("single", (0,), 1, 256)] + [(s, tuple(range(min(GPUS, 2))), min(GPUS, 2), 256)
                                         for s in ("dp", "dp-fn", "dp-manual", "allreduce-scratch")]


@pytest.mark.parametrize("strategy, gpus, replicas, batch", CASES,
                         ids=[f"{c[0]}-{'gpu' if c[1] else 'cpu'}x{c[2]}-b{c[3]}" for c in CASES])
def test_training_step(benchmark, software, strategy, gpus, replicas, batch):
    spec = Case.make(strategy, "fp32", "resnet18-small", Placement(gpus, replicas), batch, "eager", Settings()).spec()
    configure_backends(spec)
    workload = get_workload("resnet18-small")
    step = strategies.get(strategy).build(workload.build(), make_context(spec))
    placed = step.place(*workload.synthetic_batch(batch * replicas))
    clock = StepClock(step.devices)

    def one_step():
        step.run(placed)
        clock.synchronize()

    for _ in range(3):  # warm-up: cuDNN autotuning, allocator growth
        one_step()
    reset_peak_memory(step.devices)
    benchmark.pedantic(one_step, rounds=10 if not gpus else 30, iterations=1)
    median = benchmark.stats.stats.median
    memory = peak_memory_mib(step.devices)
    benchmark.extra_info.update(
        global_batch=batch * replicas, items_per_s=batch * replicas / median,
        peak_alloc_mib=max((m[0] for m in memory.values()), default=None),
        gpus=list(gpus), cudnn_benchmark=spec.cudnn_benchmark, **software,
    )
