"""`list`: the strategies, precisions and models, and whether each can run here."""
from __future__ import annotations

from bench.cli.common import resolve_gpus


def cmd_list(args) -> int:
    import strategies
    from bench.cases.case import EXECUTIONS
    from bench import workloads
    from bench.cases.grid import placements
    from bench.workloads import get_workload, training_flops_per_image
    from bench.core.precision import PRECISIONS

    gpus = resolve_gpus(args.gpus)
    where = f"GPUs {','.join(map(str, gpus))}" if gpus else f"the CPU ({args.cpu_replicas} replicas)"
    print(f"Strategies and precisions on {where}:")
    for name in strategies.names():
        strategy = strategies.get(name)
        print(f"\n  {name:<18} {strategy.summary}")
        if strategy.options:
            print(f"  {'':<18} options: " + ", ".join(
                f"{k}={v}" + (f" ({'|'.join(map(str, strategy.option_choices[k]))})" if k in strategy.option_choices else "")
                for k, v in strategy.options.items()))
        print(f"  {'':<18} executions: {', '.join(e for e in EXECUTIONS if e in strategy.executions)}")
        placement = placements(strategy, gpus, [len(gpus)] if gpus else [args.cpu_replicas], args.cpu_replicas)[-1]
        for precision in PRECISIONS.values():
            reason = strategy.unavailable_reason(placement, precision)
            print(f"    {precision.name:<9} {'runs here' if reason is None else 'cannot run: ' + reason}")
    print("\nModels:")
    for name in workloads.names():
        w = get_workload(name)
        print(f"  {name:<15} input {'x'.join(map(str, w.input_shape))}, {w.num_classes} classes, "
              f"{training_flops_per_image(name) / 1e9:.2f} GFLOP per image per training step")
    return 0


def add_parser(sub) -> None:
    lst = sub.add_parser("list", help="strategies and precisions, and whether each can run here")
    lst.add_argument("--gpus", help="as for run")
    lst.add_argument("--cpu-replicas", type=int, default=2)
    lst.set_defaults(func=cmd_list)
