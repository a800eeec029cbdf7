"""`list`: the strategies, precisions and models, and whether each can run here."""
from __future__ import annotations

from bench.cli.common import UsageError, csv, resolve_gpus


def cmd_list(args) -> int:
    if args.models is None:  # `list --models`: the models alone
        list_strategies(args)
        print()
    list_models(csv(args.models))
    return 0


def list_strategies(args) -> None:
    import strategies
    from bench.cases.case import EXECUTIONS
    from bench.cases.grid import placements
    from bench.core.precision import PRECISIONS

    gpus = resolve_gpus(args.gpus)
    where = f"GPUs {','.join(map(str, gpus))}" if gpus else f"the CPU ({args.cpu_replicas} replicas)"
    names = strategies.names()  # a plug-in that does not load says so before anything is printed
    print(f"Strategies and precisions on {where}:")
    for name in names:
        strategy = strategies.get(name)
        print(f"\n  {name:<18} {strategy.summary}")
        if strategy.shards or strategy.sends:  # its declarations (strategies/base.py)
            print(f"  {'':<18} shards {strategy.describe_shards() or 'nothing'}; sends per step: "
                  + (", ".join(c.describe() for c in strategy.sends) or "nothing"))
        if strategy.options:
            print(f"  {'':<18} options: " + ", ".join(
                f"{k}={v}" + (f" ({'|'.join(map(str, strategy.option_choices[k]))})"
                              if k in strategy.option_choices else "")
                for k, v in strategy.options.items()))
        print(f"  {'':<18} executions: {', '.join(e for e in EXECUTIONS if e in strategy.executions)}")
        placement = placements(strategy, gpus, [len(gpus)] if gpus else [args.cpu_replicas], args.cpu_replicas)[-1]
        # Precisions with the same verdict on one line (a reason that names its precision, without the name).
        verdicts: dict[str, list[str]] = {}
        for precision in PRECISIONS.values():
            reason = strategy.unavailable_reason(placement, precision)
            reason = None if reason is None else reason.removeprefix(f"{precision.name}: ")
            verdicts.setdefault("runs here" if reason is None else reason, []).append(precision.name)
        for verdict, names in verdicts.items():
            print(f"    {'runs here: ' if verdict == 'runs here' else 'cannot run '}{', '.join(names)}"
                  + ("" if verdict == "runs here" else f": {verdict}"))


def list_models(given: list[str]) -> None:
    """The built-in workloads (or the ones named) with parameters and FLOPs per image,
    counted on the meta device, and the sources of other models."""
    import strategies
    from bench import workloads
    from bench.workloads.facts import facts

    names = given or workloads.names()
    for name in names:
        try:
            workloads.check_name(name)
        except workloads.WorkloadError as exc:
            raise UsageError(f"{exc} (--models)") from None
    print("Models (FLOPs: one forward+backward pass, torch.utils.flop_counter):")
    for name in names:
        try:
            w, measured = workloads.get_workload(name), facts(name)
        except Exception as exc:  # noqa: BLE001 - the user's model: say why, list the others
            print(f"  {name}: cannot be built: {type(exc).__name__}: {str(exc).strip()[:300]}")
            continue
        print(f"  {name:<15} {measured['parameters'] / 1e6:8.2f} M parameters, "
              f"{measured['flops_per_image'] / 1e9:8.2f} GFLOP per image per training step, "
              f"input {'x'.join(map(str, w.input_shape))}, {w.num_classes} classes ({w.source})")
        if w.summary:
            print(f"  {'':<15} {w.summary}")
        skipped = [f"{s}: {r}" for s in strategies.names()
                   if (r := strategies.get(s).workload_unavailable_reason(name))]
        if skipped:
            print(f"  {'':<15} not in " + "; ".join(skipped))
    if not given:
        print("\nOther sources (--models PREFIX:NAME):")
        for source in workloads.SOURCES.values():
            state = f"{source.package} {source.version()} installed" if source.installed() else \
                f"not installed: {source.install}"
            print(f"  {source.prefix + ':NAME':<22} {source.summary} ({state})")
        print(f"  {'package.module:factory':<22} your own: a callable returning an nn.Module, or a dict with 'model' "
              f"and optionally 'input_shape', 'num_classes', 'loss', 'blocks' (the module on PYTHONPATH)")


def add_parser(sub) -> None:
    lst = sub.add_parser("list", help="strategies and precisions, and whether each can run here; the models")
    lst.add_argument("--gpus", help="as for run")
    lst.add_argument("--cpu-replicas", type=int, default=2)
    lst.add_argument("--models", nargs="?", const="", default=None, metavar="NAMES",
                     help="only the models: the built-in ones with parameters and FLOPs per image, and the sources; "
                          "or the ones named (e.g. timm:resnet50,mypkg.models:build)")
    lst.set_defaults(func=cmd_list)
