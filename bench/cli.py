"""python -m bench: run sweeps, list strategies, report, compare."""
from __future__ import annotations

import argparse
import datetime
import math
import os
import socket
import sys
from pathlib import Path

# In the working directory, also when parabench is installed as a package (never inside it).
RESULTS_DIR = Path("results")


class UsageError(Exception):
    """Bad input: one line that names the fix."""


def _csv(text: str | None) -> list[str]:
    return [x.strip() for x in (text or "").split(",") if x.strip()]


def _ints(text: str, what: str) -> list[int]:
    try:
        values = [int(x) for x in _csv(text)]
    except ValueError:
        raise UsageError(f"{what} must be comma-separated whole numbers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise UsageError(f"{what} must be positive, got {text!r}")
    return values


def resolve_gpus(text: str | None) -> list[int]:
    """GPU ids from --gpus ('' or 'cpu': none; 'all' or unset: every visible GPU)."""
    from bench import envinfo

    if text is not None and text.strip().lower() in ("", "cpu", "none"):
        return []  # without asking torch: a CPU sweep's parent never imports it
    available = envinfo.gpu_count()
    if text is None or text.strip().lower() == "all":
        return list(range(available))
    try:
        ids = [int(x) for x in _csv(text)]
    except ValueError:
        raise UsageError(f"--gpus takes CUDA ordinals such as 0,1, got {text!r}") from None
    if len(set(ids)) != len(ids):
        raise UsageError(f"--gpus lists a GPU twice: {text!r}")
    missing = [i for i in ids if i < 0 or i >= available]
    if missing:
        have = f"{available} GPU{'s' if available != 1 else ''}" + (f" (ids 0-{available - 1})" if available else "")
        raise UsageError(f"GPU id {missing[0]} does not exist: this host has {have}; pass --gpus with ids from that range"
                         + ("" if available else " or leave it empty for the CPU"))
    return ids


def _check_names(given: list[str], valid: list[str], what: str, flag: str) -> list[str]:
    for name in given:
        if name not in valid:
            raise UsageError(f"unknown {what} {name!r}: choose from {', '.join(valid)} ({flag})")
    return given


def _parse_options(pairs: list[str], strategy_names: list[str]) -> dict:
    import strategies

    declared = [strategies.get(n) for n in strategy_names]
    defaults = {k: v for s in declared for k, v in s.options.items()}
    choices = {k: v for s in declared for k, v in s.option_choices.items()}
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise UsageError(f"--option takes NAME=VALUE, got {pair!r}")
        if key not in defaults:
            raise UsageError(f"no selected strategy has option {key!r}; options: {', '.join(sorted(defaults)) or 'none'}")
        typed = _typed_like(defaults[key], value, key)
        if key in choices and typed not in choices[key]:
            raise UsageError(f"option {key} takes one of {', '.join(map(str, choices[key]))}, got {value!r}")
        if isinstance(typed, (int, float)) and not isinstance(typed, bool) and not (math.isfinite(typed) and typed > 0):
            raise UsageError(f"option {key} must be a positive number, got {value!r}")
        options[key] = typed
    return options


def _typed_like(default, value: str, key: str):
    """An option's text as the type of its default (so results record 5, not '5')."""
    try:
        if isinstance(default, bool):
            if value.lower() not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                raise ValueError
            return value.lower() in ("1", "true", "yes", "on")
        if isinstance(default, int):
            return int(value)
        if isinstance(default, float):
            return float(value)
    except ValueError:
        raise UsageError(f"option {key} takes a {type(default).__name__}, got {value!r}") from None
    return value


def _settings(args, on_gpu: bool, strategy_names: list[str]):
    from bench.case import COMPILE_MODES, Settings

    def count(value, default, flag, minimum):
        value = default if value is None else value
        if value < minimum:
            raise UsageError(f"{flag} must be at least {minimum}, got {value}")
        return value

    if args.anatomy_steps is not None and not args.anatomy:
        raise UsageError("--anatomy-steps sets the profiled window of --anatomy: add --anatomy")
    for flag, value in (("--case-timeout", args.case_timeout), ("--startup-timeout", args.startup_timeout)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--case-timeout and --startup-timeout must be positive (seconds); {flag} is {value}")
    if args.compile_mode not in COMPILE_MODES:
        raise UsageError(f"--compile-mode takes one of {', '.join(COMPILE_MODES)}, got {args.compile_mode!r}")
    return Settings(
        warmup=count(args.warmup, 10 if on_gpu else 1, "--warmup", 0),
        steps=count(args.steps, 20 if on_gpu else 3, "--steps", 1),
        trials=count(args.trials, 3 if on_gpu else 2, "--trials", 1),
        seed=count(args.seed, 0, "--seed", 0), data=args.data, channels_last=args.channels_last,
        compile_mode=args.compile_mode, cudnn_benchmark=args.cudnn_benchmark, tf32=args.tf32, sgd_impl=args.sgd_impl,
        options=tuple(sorted(_parse_options(args.option, strategy_names).items())),
        case_timeout_s=args.case_timeout, startup_timeout_s=args.startup_timeout,
        anatomy_steps=count(args.anatomy_steps, 3, "--anatomy-steps", 1) if args.anatomy else 0,
        worker_scope=args.worker_scope,
    )


def build_cases(strategy_names, precisions, models, executions, gpus, gpu_counts, cpu_replicas, batch_sizes, settings,
                nnodes: int = 1):
    """The grid, in the order it is reported: model, precision, execution, strategy, devices, batch."""
    import strategies
    from bench.case import Case

    cases = []
    for model in models:
        for precision in precisions:
            for execution in executions:
                for name in strategy_names:
                    strategy = strategies.get(name)
                    for placement in placements(strategy, gpus, gpu_counts, cpu_replicas, nnodes, settings.options):
                        for batch in sorted(set(batch_sizes)):
                            cases.append(Case.make(name, precision, model, placement, batch, execution, settings))
    return cases


def placements(strategy, gpus: list[int], gpu_counts: list[int], cpu_replicas: int, nnodes: int = 1,
               options: tuple = ()):
    """The device sets a strategy runs on: one-device strategies on the first GPU, the others on
    each count; across every node where its launcher spans nodes, else on node 0 alone."""
    from bench.case import strategy_options
    from strategies.base import Placement

    if nnodes > 1 and not strategy.launcher(strategy_options(strategy.name, dict(options))).spans_nodes:
        nnodes = 1
    if not gpus:
        per_node = 1 if strategy.max_replicas == 1 else cpu_replicas
        return [Placement((), per_node * nnodes, nnodes)]
    if strategy.max_replicas == 1:
        return [Placement((gpus[0],), 1)]
    return [Placement(tuple(gpus[:k]), k * nnodes, nnodes) for k in gpu_counts]


def cmd_run(args) -> int:
    import strategies
    from bench import results
    from bench.case import EXECUTIONS
    from bench.models import WORKLOADS
    from bench.precision import PRECISIONS
    from bench.progress import ConsoleReporter
    from bench import nodes as nodes_mod
    from bench.sweep import NodeGone, Sweep, Terminated, WriteFailed, ignore_further_signals

    names = _check_names(_csv(args.strategies) or strategies.names(), strategies.names(), "strategy", "--strategies")
    precisions = _check_names(_csv(args.precisions), list(PRECISIONS), "precision", "--precisions")
    models = _check_names(_csv(args.models), list(WORKLOADS), "model", "--models")
    executions = _csv(args.execution) or ["eager"]
    if args.compile:
        executions = ["compile"]  # --compile: the alias of --execution compile, kept for one release
    executions = _check_names(executions, list(EXECUTIONS), "execution", "--execution")
    if args.cpu_replicas < 1:
        raise UsageError(f"--cpu-replicas must be at least 1, got {args.cpu_replicas}")
    gpus = resolve_gpus(args.gpus)
    on_gpu = bool(gpus)
    counts = _ints(args.gpu_counts, "--gpu-counts") if args.gpu_counts else [len(gpus)] if gpus else [args.cpu_replicas]
    if gpus and max(counts) > len(gpus):
        raise UsageError(f"--gpu-counts asks for {max(counts)} GPUs but --gpus gives {len(gpus)}")
    replicas = counts if gpus else [args.cpu_replicas]

    if args.global_batch_sizes:
        if args.batch_sizes:
            raise UsageError("give --batch-sizes (per GPU) or --global-batch-sizes, not both")
        global_sizes = _ints(args.global_batch_sizes, "--global-batch-sizes")
        for g in global_sizes:
            for n in replicas:
                if g % n:
                    raise UsageError(f"global batch {g} does not split across {n} devices: use a multiple of {n}, "
                                     f"or give per-GPU sizes with --batch-sizes")
        if len(set(replicas)) > 1:
            raise UsageError("--global-batch-sizes needs one device count; use --batch-sizes for a scaling sweep")
        batch_sizes = [g // replicas[0] for g in global_sizes]
    else:
        batch_sizes = _ints(args.batch_sizes or ("32,64,128,256" if on_gpu else "2,4"), "--batch-sizes")

    settings = _settings(args, on_gpu, names)
    try:
        nodes = nodes_mod.from_args(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    except nodes_mod.NodesError as exc:
        raise UsageError(str(exc)) from None
    cases = build_cases(names, precisions, models, executions, gpus, counts, args.cpu_replicas, batch_sizes, settings,
                        nodes.nnodes)
    if not cases:
        raise UsageError("nothing to run: the grid of strategies, precisions, models and batch sizes is empty")
    leader = None
    if nodes.nnodes > 1:
        try:
            store = nodes_mod.Store(nodes, settings.startup_timeout_s)
            nodes_mod.agree(store, nodes_mod.sweep_hash(cases), settings.startup_timeout_s)
        except nodes_mod.NodesError as exc:
            raise UsageError(str(exc)) from None
        if not nodes.leader:  # node 0 writes every row; this node lends its devices
            from bench import envinfo
            from bench.sweep import worker_env

            return nodes_mod.follow(nodes, store, worker_env(nodes.node_rank), str(envinfo.REPO), gpus)
        leader = nodes_mod.Leader(store)

    out = _output_path(args)
    lock = results.Lock(out)
    try:
        results.check_writable(out)  # before anything is measured
        lock.acquire()
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    try:
        existing = _existing_rows(args, out, cases)
        reporter = ConsoleReporter()
        sweep = Sweep(cases, settings, str(out), reporter, existing, leader)
        if args.resume:
            todo = sum(not sweep.measured(c) for c in cases)
            print(f"resuming {out}: {len(cases) - todo} case(s) measured already, {todo} to run", file=sys.stderr)
        try:
            rows = sweep.run()
        except KeyboardInterrupt:
            ignore_further_signals()
            reporter.close()
            print(f"interrupted: {len(sweep.rows)} finished case(s) are in {out}; "
                  f"continue with: python -m bench run --resume --out {out} (same arguments)", file=sys.stderr)
            return 130
        except Terminated:
            ignore_further_signals()
            reporter.close()
            print(f"terminated: {len(sweep.rows)} finished case(s) are in {out}; resume with --resume --out {out}",
                  file=sys.stderr)
            return 143
        except (WriteFailed, NodeGone, nodes_mod.NodesError) as exc:
            reporter.close()
            print(f"parabench: error: {exc}" + ("" if isinstance(exc, WriteFailed) else f"; finished cases are in {out}"),
                  file=sys.stderr)
            return 1
        finally:
            if leader is not None:
                leader.finish()  # the other nodes leave
        reporter.close()
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    finally:
        lock.release()
    counts_by_status = {}
    for row in rows:
        counts_by_status[row["status"]] = counts_by_status.get(row["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts_by_status.items()))
    print(f"{len(rows)} cases ({summary}) written to {results.json_path(out)} and {results.json_path(out).with_suffix('.csv')}")
    return 0


def _this_host_hardware(cases) -> set[str]:
    from bench import envinfo
    from bench.case import hardware

    return {hardware({"device": c.device, **envinfo.for_gpus(c.gpus), "cpu": envinfo.collect_light()["cpu"]})
            for c in cases}


def _output_path(args) -> Path:
    """The results file: --out, or with --resume the newest file of this host under the
    results folder, or a new file named after the time and host."""
    from bench import envinfo, results

    folder = Path(args.results_dir)
    if args.out:
        return results.json_path(args.out)
    if args.resume:
        host = envinfo.collect_light()["host"]
        mine = []
        for path in sorted(folder.glob("run-*.json"), key=lambda p: p.stat().st_mtime):
            try:
                rows = results.load(path)
            except results.ResultsError:
                continue
            if rows and all(r.get("host") == host for r in rows):
                mine.append(path)
        if not mine:
            raise UsageError(f"--resume found no run-*.json written on this host ({host}) in {folder}; "
                             "pass the file with --out")
        return mine[-1]
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return folder / f"run-{stamp}-{socket.gethostname()}.json"


def _existing_rows(args, out: Path, cases) -> list[dict]:
    """Rows already in `out` (with --resume), after checking that they were measured on
    this hardware with these measurement settings; without --resume, `out` must be new."""
    from bench import envinfo, results
    from bench.case import MEASUREMENT, hardware

    csv_path = out.with_suffix(".csv")
    if not args.resume:
        for path in (out, csv_path):
            if path.exists():
                raise UsageError(f"{path} already exists: pass --resume to continue it, or choose another --out")
        return []
    if not out.exists():
        return []
    try:
        rows = results.load(out)
    except results.ResultsError as exc:
        raise UsageError(f"{exc} (the file was left untouched)") from None
    host = envinfo.collect_light()["host"]
    here = _this_host_hardware(cases)
    for row in rows:
        if row.get("host") and row["host"] != host:
            raise UsageError(f"{out} was measured on host {row['host']}, this is {host}: resume it there, "
                             "or start a new file")
        if hardware(row) not in here:
            raise UsageError(f"{out} was measured on {hardware(row)}, this run uses {', '.join(sorted(here))}: "
                             "resume it on that hardware, or start a new file")
    wanted = cases[0].measurement()
    for row in rows:
        had = {k: row.get(k) for k in MEASUREMENT}
        if had != wanted:
            diff = ", ".join(f"{k} {had[k]} (file) vs {wanted[k]} (now)" for k in MEASUREMENT if had[k] != wanted[k])
            raise UsageError(f"{out} was measured with other settings: {diff}; resume with the same settings, "
                             "or start a new file")
    dups = results.duplicates(rows)
    if dups:
        print(f"note: {out} holds {len(dups)} duplicate case(s) ({'; '.join(dups[:3])}{'...' if len(dups) > 3 else ''}): "
              "the latest ok row of each is kept", file=sys.stderr)
    return rows


def cmd_list(args) -> int:
    import strategies
    from bench.case import EXECUTIONS
    from bench.models import WORKLOADS, training_flops_per_image
    from bench.precision import PRECISIONS

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
    for name, w in WORKLOADS.items():
        print(f"  {name:<15} input {'x'.join(map(str, w.input_shape))}, {w.num_classes} classes, "
              f"{training_flops_per_image(name) / 1e9:.2f} GFLOP per image per training step")
    return 0


def cmd_report(args) -> int:
    from bench import report, results

    paths = []
    for given in map(Path, args.files):
        # A folder stands for the results files in it.
        paths += report.default_inputs(given) if given.is_dir() else [given]
    if args.files and not paths:
        raise UsageError(f"no results files in {', '.join(args.files)}: name .json results files or a folder holding them")
    paths = paths or report.default_inputs(Path(args.results_dir))
    if not paths:
        raise UsageError(f"no results files in {args.results_dir}: run a sweep first (make bench)")
    try:
        out = report.write_report(paths, Path(args.out))
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot write the report in {args.out} ({exc.strerror or exc}): choose a writable --out") from None
    print(f"report written to {out} (tables and figures in {out.parent})")
    return 0


def cmd_compare(args) -> int:
    from bench import compare, results

    try:
        currents = [results.load(path) for path in args.current]
        if args.baseline == "auto":
            args.baseline = str(compare.baseline_for(currents[0], RESULTS_DIR / "baselines"))
        baseline = results.load(args.baseline)
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    for flag, value in (("--max-slowdown", args.max_slowdown), ("--max-memory-growth", args.max_memory_growth),
                        ("--noise-factor", args.noise_factor)):
        if not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag} must be a finite number >= 0, got {value}")
    th = compare.Thresholds(args.max_slowdown, args.max_memory_growth, args.noise_factor)
    runs = [compare.compare(baseline, cur, th, args.across_hardware, args.ratios_only, args.judge == "all")
            for cur in currents]
    verdicts = compare.confirmed(runs)
    print(compare.render(verdicts, args.baseline, " + ".join(args.current)))
    if args.json:
        _write_json(args.json, verdicts)
    status = compare.exit_status(verdicts)
    if status == 2:
        print(f"parabench: error: no case of {args.current[0]} could be compared with {args.baseline} "
              "(different cases or hardware); pick the baseline for this hardware", file=sys.stderr)
    return status


def _write_json(path: str, payload) -> None:
    from bench import compare

    try:
        compare.write_json(path, payload)
    except OSError as exc:
        raise UsageError(f"cannot write {path} ({exc.strerror or exc}): choose a writable path") from None


def cmd_dashboard(args) -> int:
    from bench import compare, results

    try:
        files = [results.load(path) for path in args.files]
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    bigger, smaller = compare.dashboard(files)
    _write_json(args.out, bigger)
    print(f"{args.out}: {len(bigger)} entries (customBiggerIsBetter: images/s, speed-ups)")
    if args.memory_out:
        _write_json(args.memory_out, smaller)
        print(f"{args.memory_out}: {len(smaller)} entries (customSmallerIsBetter: peak memory per GPU)")
    return 0


def cmd_anatomy(args) -> int:
    """The breakdown of traces taken by --anatomy, per rank and device (ms per step)."""
    import re

    from bench import anatomy

    ranks = []
    for folder in map(Path, args.folders):
        found = sorted(int(m.group(1)) for p in folder.glob("rank*.pt.trace.json.gz")
                       if (m := re.fullmatch(r"rank(\d+)\.pt\.trace\.json\.gz", p.name)))
        if not found:
            raise UsageError(f"no traces in {folder}: name a case folder written by run --anatomy")
        ranks += [(folder, r) for r in found]
    print("  ".join(f"{h:>12}" for h in ["rank", "device", *anatomy.VALUES]) + "  basis")
    for folder, rank in ranks:
        try:
            breakdown = anatomy.analyse_rank(str(folder), rank)
        except (OSError, EOFError, ValueError) as exc:  # unreadable, truncated or not a trace
            raise UsageError(f"cannot analyse rank {rank} in {folder}: {exc}") from None
        for d in breakdown:
            print("  ".join([f"{rank:>12}", f"{d['device']:>12}"] + [f"{d[v]:12.4f}" for v in anatomy.VALUES])
                  + f"  {d['basis']}")
    return 0


def cmd_instructions(args) -> int:
    from bench import instructions

    if not (math.isfinite(args.tolerance) and args.tolerance >= 0):
        raise UsageError(f"--tolerance is a fraction of the baseline count, 0 or more (0.01 = 1%); got {args.tolerance}")
    if args.out and not os.access(Path(args.out).resolve().parent, os.W_OK):
        raise UsageError(f"cannot write {args.out}: its folder is missing or read-only; choose another --out")
    try:
        countable = instructions.countable()
        names = _csv(args.strategies) or countable
        unknown = sorted(set(names) - set(countable))
        if unknown:
            raise UsageError(f"cannot count {', '.join(unknown)} under valgrind: choose from "
                             f"{', '.join(countable)} (one process on the CPU)")
        baseline = instructions.load(args.compare) if args.compare else None
        if baseline is not None:
            try:  # before counting: a count takes minutes
                instructions.check_environment(baseline, instructions.environment())
            except instructions.OtherEnvironment as exc:
                if args.other_environment == "fail":
                    raise
                print(f"instruction counts NOT JUDGED: {exc}")
                return 0
        record = instructions.measure(names)
        if args.out:
            try:
                instructions.write(args.out, record)
            except OSError as exc:
                raise UsageError(f"cannot write {args.out} ({exc.strerror or exc}); the counts were: "
                                 + ", ".join(f"{k} {v}" for k, v in record["counts"].items())) from None
            print(f"instruction counts written to {args.out}")
        if baseline is None:
            for name, n in record["counts"].items():
                print(f"{name:<20} {n:>14,} instructions/step")
            return 0
        passed, lines = instructions.compare(baseline, record, args.tolerance)
    except instructions.InstructionsError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(lines))
    print("instruction counts: " + ("pass" if passed else "REGRESSION"))
    return 0 if passed else 1


def build_parser() -> argparse.ArgumentParser:
    from bench.case import WORKER_SCOPES

    parser = argparse.ArgumentParser(prog="parabench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run a sweep and write results")
    run.add_argument("--strategies", help="comma-separated (default: every strategy)")
    run.add_argument("--precisions", default="fp32", help="fp32,amp-fp16,amp-bf16,apex-O1,apex-O2 (default fp32)")
    run.add_argument("--models", default="resnet18-small", help="resnet18-small,resnet18 (default resnet18-small)")
    run.add_argument("--batch-sizes", help="per-GPU batch sizes (default 32,64,128,256 on GPUs, 2,4 on the CPU)")
    run.add_argument("--global-batch-sizes", help="global batch sizes, split evenly across the devices")
    run.add_argument("--gpus", help="CUDA ordinals, e.g. 0,1 (default: all visible; '' or cpu: the CPU)")
    run.add_argument("--gpu-counts", help="run multi-GPU strategies on the first N of --gpus for each N, e.g. 1,2,4")
    run.add_argument("--cpu-replicas", type=int, default=2, help="replicas/processes for multi-device strategies on the CPU")
    run.add_argument("--warmup", type=int, help="warm-up steps per case (default 10 on GPUs, 1 on the CPU)")
    run.add_argument("--steps", type=int, help="timed steps per trial (default 20 on GPUs, 3 on the CPU)")
    run.add_argument("--trials", type=int, help="trials per case (default 3 on GPUs, 2 on the CPU)")
    run.add_argument("--seed", type=int, default=0, help="seed of the weights and the synthetic data (>= 0)")
    run.add_argument("--data", choices=["device", "host"], default="device",
                     help="device: batch resident on the GPUs; host: copied from pinned memory every step")
    run.add_argument("--channels-last", action="store_true", help="channels_last memory format for model and inputs")
    run.add_argument("--execution", default="eager",
                     help="eager,compile,cuda-graph: how the step runs, swept like precisions (default eager)")
    run.add_argument("--compile", action="store_true", help="alias of --execution compile (kept for one release)")
    run.add_argument("--compile-mode", default="default",
                     help="torch.compile mode for --execution compile: default, max-autotune-no-cudagraphs, reduce-overhead")
    run.add_argument("--cudnn-benchmark", choices=["auto", "on", "off"], default="auto",
                     help="auto: on, but off for strategies that run replicas in threads (see README)")
    run.add_argument("--tf32", choices=["default", "on", "off"], default="default")
    run.add_argument("--sgd-impl", choices=["auto", "for-loop", "foreach", "fused"], default="auto",
                     help="SGD update kernels; auto: PyTorch's choice (foreach on GPUs, for-loop on the CPU)")
    run.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                     help="strategy option, e.g. bucket_cap_mb=50, launcher=spawn (see `list`)")
    run.add_argument("--anatomy", action="store_true",
                     help="after each case's timing, profile a few steps on every rank: traces under "
                          "<results folder>/traces/<results name>/ and the step's breakdown in anatomy_* columns")
    run.add_argument("--anatomy-steps", type=int, help="steps in the profiled window of --anatomy (default 3)")
    run.add_argument("--out", help="results file (.json; a .csv is written beside it)")
    run.add_argument("--results-dir", default=str(RESULTS_DIR), help="folder for a new results file (default results/)")
    run.add_argument("--resume", action="store_true", help="continue --out (or the newest run), skipping measured cases")
    run.add_argument("--nnodes", type=int, help="hosts the sweep spans: run the same command on each (default 1; under "
                     "Slurm's srun, the task count)")
    run.add_argument("--node-rank", type=int, help="this host's number, 0 to nnodes-1; node 0 writes the results")
    run.add_argument("--rdzv-endpoint", help="HOST:PORT of node 0, where it hosts the rendezvous store (default port 29400)")
    run.add_argument("--rdzv-id", help="a name for this multi-node run, the same on every node (default parabench)")
    run.add_argument("--case-timeout", type=float, default=600.0, help="seconds a case may take before it is killed")
    run.add_argument("--startup-timeout", type=float, default=300.0, help="seconds a worker may take to start")
    run.add_argument("--worker-scope", choices=WORKER_SCOPES, default="group",
                     help="cases that share a worker: group (default: every case of a launcher and device set, "
                     "the fastest), series (a fresh worker per series), case (a fresh worker per case, the strictest "
                     "isolation)")
    run.set_defaults(func=cmd_run)

    lst = sub.add_parser("list", help="strategies and precisions, and whether each can run here")
    lst.add_argument("--gpus", help="as for run")
    lst.add_argument("--cpu-replicas", type=int, default=2)
    lst.set_defaults(func=cmd_list)

    ana = sub.add_parser("anatomy", help="the step breakdown of traces taken by run --anatomy (ms per step)")
    ana.add_argument("folders", nargs="+", help="case folders of traces (results/traces/<run>/<case>/)")
    ana.set_defaults(func=cmd_anatomy)

    rep = sub.add_parser("report", help="tables, figures and plots/REPORT.md from results files")
    rep.add_argument("files", nargs="*", help="results files (default: every results file under --results-dir)")
    rep.add_argument("--results-dir", default=str(RESULTS_DIR))
    rep.add_argument("--out", default="plots", help="output folder (default plots/)")
    rep.set_defaults(func=cmd_report)

    cmp_ = sub.add_parser("compare", help="compare results with a baseline; exit 0 pass, 1 regression, 2 unusable")
    cmp_.add_argument("baseline", help="baseline results file, or 'auto': results/baselines/<hardware>.json")
    cmp_.add_argument("current", nargs="+", help="results file; with several (repeat runs), a regression must show in all")
    cmp_.add_argument("--max-slowdown", type=float, default=0.10, help="allowed images/s drop (fraction, default 0.10)")
    cmp_.add_argument("--max-memory-growth", type=float, default=0.10, help="allowed peak-memory growth (default 0.10)")
    cmp_.add_argument("--noise-factor", type=float, default=1.0, help="x the measured p10-p90 width that is noise")
    cmp_.add_argument("--across-hardware", action="store_true", help="compare in-run ratios across hardware")
    cmp_.add_argument("--ratios-only", action="store_true",
                      help="judge throughput by in-run ratios alone (shared machines whose speed drifts)")
    cmp_.add_argument("--judge", choices=["all", "counters"], default="all",
                      help="all: timing, work counters and memory (dedicated hosts); counters: work counters, memory "
                           "and status only, timing shown unjudged (shared machines)")
    cmp_.add_argument("--json", help="write the verdicts here")
    cmp_.set_defaults(func=cmd_compare)

    ins = sub.add_parser("instructions", help="instructions per training step under Callgrind (exact on any machine); "
                         "exit 0 pass, 1 regression, 2 unusable")
    ins.add_argument("--strategies", help="comma-separated (default: every strategy that runs in one process on the CPU)")
    ins.add_argument("--out", help="write the counts here (JSON)")
    ins.add_argument("--compare", metavar="BASELINE", help="judge the counts against this file's")
    ins.add_argument("--tolerance", type=float, default=0.01, help="allowed rise per strategy (fraction, default 0.01)")
    ins.add_argument("--other-environment", choices=["fail", "skip"], default="fail",
                     help="a baseline from another Python/torch build: fail (exit 2), or skip (say so, exit 0)")
    ins.set_defaults(func=cmd_instructions)

    dash = sub.add_parser("dashboard", help="export for github-action-benchmark: images/s and in-run speed-ups "
                          "(customBiggerIsBetter), peak memory (customSmallerIsBetter)")
    dash.add_argument("files", nargs="+")
    dash.add_argument("--out", required=True, help="images/s and speed-ups: [{name, unit, value, range, extra}]")
    dash.add_argument("--memory-out", help="peak memory per GPU, smaller is better")
    dash.set_defaults(func=cmd_dashboard)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(f"parabench: error: {exc}", file=sys.stderr)
        return 2
