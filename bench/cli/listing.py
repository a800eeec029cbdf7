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
    """Each strategy in two or three lines (what runs here, its options), then what cannot run
    here, each reason once with the strategies and precisions it holds for, then the knobs."""
    import strategies
    from bench.cases.case import Case, Settings, execution_unavailable_reason
    from bench.core.step import EXECUTIONS
    from bench.cases.grid import placements
    from bench.core.knobs import KNOBS
    from bench.core.precision import PRECISIONS, get_precision

    gpus = resolve_gpus(args.gpus)
    where = f"GPUs {','.join(map(str, gpus))}" if gpus else f"the CPU ({args.cpu_replicas} replicas)"
    names = strategies.names()  # a plug-in that does not load says so before anything is printed
    print(f"Strategies on {where}:")
    cannot: dict[str, list[str]] = {}  # reason -> "strategy (precisions)" it holds for
    for name in names:
        strategy = strategies.get(name)
        placement = placements(strategy, gpus, [len(gpus)] if gpus else [args.cpu_replicas], args.cpu_replicas)[-1]
        runs, refused = [], {}
        for precision in PRECISIONS.values():
            reason = strategy.unavailable_reason(placement, precision)
            if reason is None:
                runs.append(precision.name)
            else:
                refused.setdefault(reason.removeprefix(f"{precision.name}: "), []).append(precision.name)
        if not runs:
            for reason in refused:
                cannot.setdefault(reason, []).append(name)
            continue
        for reason, which in refused.items():
            cannot.setdefault(reason, []).append(f"{name} ({', '.join(which)})")
        first = get_precision(runs[0])
        # What a case of each execution would be told (a CUDA graph needs a GPU), asked as the sweep asks.
        executions = [e for e in EXECUTIONS if strategy.unavailable_reason(placement, first, e) is None
                      and execution_unavailable_reason(Case.make(name, first.name, "resnet18-small", placement, 1, e,
                                                                 Settings())) is None]
        print(f"  {name:<18} {strategy.summary}")
        print(f"  {'':<18} runs {', '.join(runs)}; executions {', '.join(executions)}"
              + (f"; shards {strategy.describe_shards() or 'nothing'}; sends per step: "
                 + (", ".join(c.describe() for c in strategy.sends) or "nothing")
                 if strategy.shards or strategy.sends else ""))
        if strategy.options:
            print(f"  {'':<18} options: " + ", ".join(
                f"{k}={v}" + (f" ({'|'.join(map(str, strategy.option_choices[k]))})"
                              if k in strategy.option_choices else "")
                for k, v in strategy.options.items()))
    if cannot:
        print("\nNot here:")
        for reason, who in cannot.items():
            print(f"  {', '.join(who)}: {reason}")
    print("\nKnobs (bench run flags; the default first):")
    for knob in KNOBS:
        values = "|".join(map(str, dict.fromkeys((knob.default, *knob.choices)))) if knob.choices else "a switch"
        print(f"  {knob.flag:<18} {values}: {knob.help}")


def list_models(given: list[str]) -> None:
    """The built-in workloads (or the ones named) with parameters and FLOPs per item (an image, a
    token), counted on the meta device, and the sources of other models."""
    import strategies
    from bench import workloads
    from bench.workloads.facts import facts
    from bench.workloads.resolve import check_name
    from bench.workloads.sources import SOURCES

    names = given or workloads.names()
    for name in names:
        try:
            check_name(name)
        except workloads.WorkloadError as exc:
            raise UsageError(f"{exc} (--models)") from None
    print("Models (FLOPs: one forward+backward pass, torch.utils.flop_counter):")
    for name in names:
        try:
            w, measured = workloads.get_workload(name), facts(name)
        except Exception as exc:  # noqa: BLE001 - the user's model: say why, list the others
            print(f"  {name}: cannot be built: {type(exc).__name__}: {str(exc).strip()[:300]}")
            continue
        flops = measured["flops_per_item"]
        amount = f"{flops / 1e9:8.2f} GFLOP" if flops >= 1e8 else f"{flops / 1e6:8.2f} MFLOP"
        print(f"  {name:<15} {measured['parameters'] / 1e6:8.2f} M parameters, "
              f"{amount} per {w.data.unit.one} per training step, {w.data.describe()}; "
              f"throughput in {w.data.unit.rate} ({w.source})")
        if w.summary:
            print(f"  {'':<15} {w.summary}")
        skipped = [f"{s}: {r}" for s in strategies.names()
                   if (r := strategies.get(s).workload_unavailable_reason(name))]
        if skipped:
            print(f"  {'':<15} not in " + "; ".join(skipped))
    if not given:
        print("\nOther sources (--models PREFIX:NAME):")
        for source in SOURCES.values():
            state = f"{source.package} {source.version()} installed" if source.installed() else \
                f"not installed: {source.install}"
            print(f"  {source.prefix + ':NAME':<22} {source.summary} ({state})")
        print(f"  {'package.module:factory':<22} your own: a callable returning an nn.Module, or a dict with 'model' "
              f"and optionally 'input_shape' and 'num_classes' (images) or 'vocab_size' and 'seq_len' (a language "
              f"model), 'loss', 'blocks' (the module on PYTHONPATH)")


def add_parser(sub) -> None:
    lst = sub.add_parser("list", help="strategies and precisions, and whether each can run here; the models")
    lst.add_argument("--gpus", help="as for run")
    lst.add_argument("--cpu-replicas", type=int, default=2)
    lst.add_argument("--models", nargs="?", const="", default=None, metavar="NAMES",
                     help="only the models: the built-in ones with parameters and FLOPs per image or token, and the "
                          "sources; "
                          "or the ones named (e.g. timm:resnet50,mypkg.models:build)")
    lst.set_defaults(func=cmd_list)
