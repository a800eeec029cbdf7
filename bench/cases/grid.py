"""The grid of cases a sweep measures: every strategy on the device sets it can use, at
every precision, model, execution and batch size."""
from __future__ import annotations

import strategies
from bench.cases.case import Case, strategy_options
from bench.core.placement import Placement


def default_batches(model: str, on_gpu: bool) -> tuple[int, ...]:
    """The per-GPU batches a sweep measures for `model` where none are given: its data's
    (bench/workloads/data.py: images from host-bound to GPU-bound, sequences that fit)."""
    from bench.workloads import data_or_images

    return data_or_images(model).batches["cuda" if on_gpu else "cpu"]


def build_cases(strategy_names, precisions, models, executions, gpus, gpu_counts, cpu_replicas, batch_sizes, settings,
                nnodes: int = 1):
    """The grid, in the order it is reported: model, precision, execution, strategy, devices, batch;
    `batch_sizes` None: each model's own (`default_batches`)."""
    cases = []
    for model in models:
        sizes = default_batches(model, bool(gpus)) if batch_sizes is None else batch_sizes
        for precision in precisions:
            for execution in executions:
                for name in strategy_names:
                    strategy = strategies.get(name)
                    for placement in placements(strategy, gpus, gpu_counts, cpu_replicas, nnodes, settings.options):
                        for batch in sorted(set(sizes)):
                            cases.append(Case.make(name, precision, model, placement, batch, execution, settings))
    return cases


def placements(strategy, gpus: list[int], gpu_counts: list[int], cpu_replicas: int, nnodes: int = 1,
               options: tuple = ()):
    """The device sets a strategy runs on: one-device strategies on the first GPU, the others on
    each count; across every node where its launcher spans nodes, else on node 0 alone."""
    if nnodes > 1 and not strategy.launcher(strategy_options(strategy.name, dict(options))).spans_nodes:
        nnodes = 1
    if not gpus:
        per_node = 1 if strategy.max_replicas == 1 else cpu_replicas
        return [Placement((), per_node * nnodes, nnodes)]
    if strategy.max_replicas == 1:
        return [Placement((gpus[0],), 1)]
    return [Placement(tuple(gpus[:k]), k * nnodes, nnodes) for k in gpu_counts]
