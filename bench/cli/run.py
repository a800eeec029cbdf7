"""`run`: measure a sweep and write its results file."""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

from bench.cases.defaults import BUDGET_MIN, SEED, TIMEOUT_S, said, sweep_default
from bench.cli import flags
from bench.cli.common import (UsageError, check_names, ints, listed, refuse_knobs_models_cannot_take, resolve_gpus,
                               resume_command)
from bench.cli.run_files import existing_rows as _existing_rows, output_path as _output_path


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
            raise UsageError(f"no selected strategy has option {key!r}; "
                             f"options: {', '.join(sorted(defaults)) or 'none'}")
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
    from bench.cases.case import Settings
    from bench.core.knobs import KNOBS

    def count(value, default, flag, minimum, maximum=100_000):
        # The maximum: past it a case runs for days (steps) or a seed overflows the data's generator.
        value = default if value is None else value
        if value < minimum:
            raise UsageError(f"{flag} must be at least {minimum}, got {value}")
        if value > maximum:
            raise UsageError(f"{flag} must be at most {maximum:,}, got {value}")
        return value

    if args.anatomy_steps is not None and not args.anatomy:
        raise UsageError("--anatomy-steps sets the profiled window of --anatomy: add --anatomy")
    if args.search is None:
        args.search = sweep_default("search", on_gpu)
    if args.budget is not None and not args.search:
        raise UsageError("--budget bounds a search: drop --no-search" if on_gpu else
                         "--budget bounds a --search: add --search")
    if args.side_compile and not args.search:
        raise UsageError("--side-compile compiles a search's levers beside its survey: drop it, or add --search")
    if args.side_compile and not on_gpu:
        raise UsageError("--side-compile compiles beside GPU measurements; on the CPU it would take the cores being "
                         "measured: drop it")
    if args.search:
        args.budget = BUDGET_MIN if args.budget is None else args.budget
        if not (math.isfinite(args.budget) and 0 < args.budget <= 24 * 60):
            raise UsageError(f"--budget takes minutes, more than 0 and at most 1440, got {args.budget:g}")
    return Settings(
        **flags.measured(args, "run", on_gpu),
        seed=count(args.seed, 0, "--seed", 0, 2**32 - 1), knobs=tuple((k.name, getattr(args, k.name)) for k in KNOBS),
        options=tuple(sorted(_parse_options(args.option, strategy_names).items())),
        case_timeout_s=args.case_timeout, startup_timeout_s=args.startup_timeout,
        anatomy_steps=count(args.anatomy_steps, 3, "--anatomy-steps", 1, 1000) if args.anatomy else 0,
        worker_scope=args.worker_scope,
    )


NOTHING_MEASURED = 3  # the sweep ran, but no case ended ok


def cmd_run(args) -> int:
    """Exit status: 0 when the sweep ran and measured at least one case ok (every case's outcome
    is in its row), 1 when it could not go on (results not writable, a node gone), 2 bad input,
    3 no case measured ok (all failed, timed out, ran out of memory or were skipped), 130/143/129
    stopped by Ctrl-C, SIGTERM or SIGHUP (finished rows kept, resumable)."""
    from bench.run.signals import Terminated, stop_on_signals

    stop_on_signals()  # from the start: stopped before the first case, nothing is left behind either
    try:
        return _sweep(args)
    except (KeyboardInterrupt, Terminated) as exc:
        print(f"parabench: {_stopped(exc)} before any case finished: nothing was written", file=sys.stderr)
        return _stop_status(exc)


def _stopped(exc: BaseException) -> str:
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else f"stopped by {exc}"


def _stop_status(exc: BaseException) -> int:
    return 130 if isinstance(exc, KeyboardInterrupt) else exc.exit_status


def _sweep(args) -> int:
    started = time.monotonic()
    from bench.run import node_launches, nodes as nodes_mod

    try:
        nodes = nodes_mod.from_args(args.nnodes, args.node_rank, args.rdzv_endpoint, args.rdzv_id)
    except nodes_mod.NodesError as exc:
        raise UsageError(str(exc)) from None
    if args.search is None and nodes.nnodes > 1:
        args.search = False  # a search across hosts is untried: a multi-node run is a plain sweep unless asked
    cases, settings, gpus = _cases(args, nodes.nnodes)
    leader = None
    if nodes.nnodes > 1:
        try:
            store = nodes_mod.Store(nodes, settings.startup_timeout_s)
            nodes_mod.agree(store, nodes_mod.sweep_hash(cases), settings.startup_timeout_s)
        except nodes_mod.NodesError as exc:
            raise UsageError(str(exc)) from None
        if not nodes.leader:  # node 0 writes every row; this node lends its devices
            from bench.core import imports
            from bench.run.workers import worker_env

            return node_launches.follow(nodes, store, worker_env(nodes.node_rank), str(imports.ROOT), gpus)
        leader = node_launches.Leader(store)
    return _measure(args, cases, settings, leader, started)


def _axes(args, on_gpu: bool) -> tuple[list, list, list, list]:
    """The strategies, precisions, models and executions asked for, each checked; the table's
    defaults (bench/cases/defaults.py) on this device where not given."""
    import strategies
    from bench import workloads
    from bench.core.step import EXECUTIONS
    from bench.workloads.probing import probe
    from bench.workloads.resolve import check_name

    names = check_names(listed(args.strategies, "--strategies") or strategies.names(), strategies.names(), "strategy",
                        "--strategies")
    precisions = flags.precisions(args, on_gpu)
    models = listed(args.models, "--models")
    for flag, value in (("--case-timeout", args.case_timeout), ("--startup-timeout", args.startup_timeout)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"--case-timeout and --startup-timeout must be positive (seconds); {flag} is {value}")
    try:
        for model in models:  # the syntax, and that its package or module exists: nothing imported here
            check_name(model)
        # Names not built in: resolved in a process of their own, within the start-up limit.
        probe(models, timeout_s=args.startup_timeout)
    except workloads.WorkloadError as exc:
        raise UsageError(f"{exc} (--models)") from None
    executions = listed("eager" if args.execution is None else args.execution, "--execution")
    if args.compile:  # the alias of --execution compile, kept for one release
        if args.execution not in (None, "compile"):
            raise UsageError(f"--compile is --execution compile, and --execution says {args.execution}: give one")
        executions = ["compile"]
    return names, precisions, models, check_names(executions, list(EXECUTIONS), "execution", "--execution")


def _devices(args) -> tuple[list[int], list[int], list[int]]:
    """The GPUs, the device counts a multi-device strategy runs on, and the per-GPU batches."""
    if args.cpu_replicas < 1:
        raise UsageError(f"--cpu-replicas must be at least 1, got {args.cpu_replicas}")
    gpus = resolve_gpus(args.gpus)
    counts = ints(args.gpu_counts, "--gpu-counts") if args.gpu_counts is not None else [len(gpus) or args.cpu_replicas]
    if args.gpu_counts is not None and not gpus:
        raise UsageError("--gpu-counts picks GPUs of --gpus, and this run has none (on the CPU --cpu-replicas N sets "
                         "how many processes a multi-device strategy runs)")
    if gpus and max(counts) > len(gpus):
        raise UsageError(f"--gpu-counts asks for {max(counts)} GPUs but --gpus gives {len(gpus)}")
    replicas = counts if gpus else [args.cpu_replicas]
    if args.global_batch_sizes is None:
        # None: each model's own ladder (bench/workloads/data.py `batches`), as the grid builds it.
        return gpus, counts, None if args.batch_sizes is None else ints(args.batch_sizes, "--batch-sizes")
    if args.batch_sizes is not None:
        raise UsageError("give --batch-sizes (per GPU) or --global-batch-sizes, not both")
    global_sizes = ints(args.global_batch_sizes, "--global-batch-sizes")
    for g in global_sizes:
        for n in replicas:
            if g % n:
                raise UsageError(f"global batch {g} does not split across {n} devices: use a multiple of {n}, "
                                 f"or give per-GPU sizes with --batch-sizes")
    if len(set(replicas)) > 1:
        raise UsageError("--global-batch-sizes needs one device count; use --batch-sizes for a scaling sweep")
    return gpus, counts, [g // replicas[0] for g in global_sizes]


def _cases(args, nnodes: int = 1):
    """The sweep's cases and settings, checked against the machine's limits before anything starts."""
    from bench.cases.grid import build_cases
    from bench.run import limits

    gpus, counts, batch_sizes = _devices(args)
    names, precisions, models, executions = _axes(args, on_gpu=bool(gpus))
    settings = _settings(args, bool(gpus), names)
    one_time = {"compile": "compiling the step", "cuda-graph": "uploading the captured graph"}
    if settings.warmup == 0 and (first := [e for e in executions if e in one_time]):
        # An eager first step is timed too, and its rows say so (bench/cases/caveats.py).
        raise UsageError(f"--warmup 0 with --execution {first[0]} would time {one_time[first[0]]} as a training "
                         "step: give --warmup 1 or more")
    refuse_knobs_models_cannot_take(settings, models)
    cases = build_cases(names, precisions, models, executions, gpus, counts, args.cpu_replicas, batch_sizes, settings,
                        nnodes)
    if not cases:
        raise UsageError("nothing to run: the grid of strategies, precisions, models and batch sizes is empty")
    try:
        limits.check_thread_variables(os.environ)
        cpu_replicas = 1 if gpus else max(c.placement.per_node for c in cases)
        limits.check_cpu_replicas(cpu_replicas, models, args.oversubscribe)
    except limits.LimitError as exc:
        raise UsageError(str(exc)) from None
    return cases, settings, gpus


def _measure(args, cases, settings, leader, started: float) -> int:
    """Run the sweep into its results file under the file's lock; the exit status."""
    from bench.cases import results
    from bench.run import nodes as nodes_mod
    from bench.run.progress import ConsoleReporter
    from bench.run.attempt import NodeGone
    from bench.run.signals import Terminated, ignore_further_signals
    from bench.run.sweep import Sweep, WriteFailed

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
            rows = _search(args, sweep, cases, settings, reporter, started) if args.search else sweep.run()
            ignore_further_signals()  # measured and written: a late signal must not say otherwise
        except (KeyboardInterrupt, Terminated) as exc:
            ignore_further_signals()
            reporter.close()
            if not out.exists():
                print(f"parabench: {_stopped(exc)} before any case finished: nothing was written", file=sys.stderr)
            else:
                print(f"parabench: {_stopped(exc)}: {len(sweep.rows)} finished case(s) are in {out}; continue with: "
                      f"{resume_command(out)}", file=sys.stderr)
            return _stop_status(exc)
        except (WriteFailed, NodeGone, nodes_mod.NodesError) as exc:
            reporter.close()
            print(f"parabench: error: {exc}"
                  + ("" if isinstance(exc, WriteFailed) else f"; finished cases are in {out}"),
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
    return _summary(rows, out, started, sweep.recorded)


def _search(args, sweep, cases, settings, reporter, started: float) -> list[dict]:
    """The sweep as a search's survey, then its levers and finals, all within the budget."""
    from bench.cases.ranking import asked_of
    from bench.run.search import Search

    executions = sorted({c.execution for c in cases}, key=lambda e: e != "eager")
    search = Search(sweep, settings, 60 * args.budget, asked_of(settings, executions[0]), reporter, started=started,
                    side_compiles=args.side_compile)
    return search.run(cases)


def _summary(rows: list[dict], out, started: float, recorded: list[dict]) -> int:
    """The counts of the file's rows; where this command's time went, from every row it recorded
    (a case measured twice spent its time twice; a resumed file's older rows spent none now)."""
    from bench.cases import results
    from bench.report.phases import summary as time_spent

    counts_by_status = {}
    for row in rows:
        counts_by_status[row["status"]] = counts_by_status.get(row["status"], 0) + 1
    summary = ", ".join(f"{n} {s}" for s, n in sorted(counts_by_status.items()))
    print(f"{len(rows)} cases ({summary}) written to {results.json_path(out)} and "
          f"{results.json_path(out).with_suffix('.csv')}")
    print(f"time: {time_spent(recorded, time.monotonic() - started)}")
    from bench.report.hostload import busy_line

    busy = busy_line(rows)
    if busy:
        print(busy)
    if not counts_by_status.get("ok"):
        print(f"parabench: error: no case was measured ok ({summary}): the rows say why", file=sys.stderr)
        return NOTHING_MEASURED
    return 0


def add_parser(sub) -> None:
    from bench.cases.case import WORKER_SCOPES
    from bench.workloads.data import ladders
    from bench.core.knobs import KNOBS

    run = sub.add_parser("run", help="run a sweep and write results; exit 0 measured, 1 could not go on, 2 bad input, "
                         "3 no case measured ok, 130/143/129 stopped by Ctrl-C/SIGTERM/SIGHUP (resumable)")
    flags.what(run, models="resnet18-small", strategies="comma-separated (default: every strategy)")
    run.add_argument("--batch-sizes", help="per-GPU batch sizes, sequences for a language model (default: the "
                     f"workload's: {ladders()})")
    run.add_argument("--global-batch-sizes", help="global batch sizes, split evenly across the devices")
    flags.gpus(run)
    run.add_argument("--gpu-counts", help="run multi-GPU strategies on the first N of --gpus for each N, e.g. 1,2,4")
    run.add_argument("--cpu-replicas", type=int, default=2,
                     help="replicas/processes for multi-device strategies on the CPU (default %(default)s)")
    flags.oversubscribe(run, "allow more --cpu-replicas than CPU cores (never more than the memory holds)")
    flags.measurement(run, "run")
    run.add_argument("--seed", type=int, default=SEED,
                     help="seed of the weights and the synthetic data, >= 0 (default %(default)s)")
    run.add_argument("--execution", default=None,
                     help="eager,compile,cuda-graph: how the step runs, swept like precisions (default eager)")
    run.add_argument("--compile", action="store_true", help="alias of --execution compile (kept for one release)")
    for knob in KNOBS:  # bench/core/knobs.py declares each knob's flag
        knob.add_flag(run)
    run.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                     help="strategy option, e.g. bucket_cap_mb=50, launcher=spawn (see `list`)")
    run.add_argument("--search", action=argparse.BooleanOptionalAction,
                     help="after the sweep, try each lever (execution, the optimiser's kernels, memory format, the "
                     "strategy's options) on the leaders of every batch and measure the finalists again, interleaved, "
                     "within --budget; the plan and every decision are recorded in the results file "
                     f"(bench/run/search.py; default {said('search')}: --no-search, --search say otherwise)")
    run.add_argument("--budget", type=float, help="minutes the whole --search may take (default "
                     f"{BUDGET_MIN:g}: every strategy at every batch, then each regime's executions at every "
                     "batch, on 2 H200s); what it cannot hold is recorded as not tried")
    run.add_argument("--side-compile", action=argparse.BooleanOptionalAction, default=False,
                     help="compile the graphs a --search's levers will most likely measure in processes of their own "
                     "(nice 19) while the survey measures, so that their workers load them from inductor's cache "
                     "(bench/run/precompile.py; default off: not yet shown to leave host-bound rows undisturbed, "
                     "docs/search.md)")
    run.add_argument("--anatomy", action="store_true",
                     help="after each case's timing, profile a few steps on every rank: traces under "
                          "<results folder>/traces/<results name>/ and the step's breakdown in anatomy_* columns")
    run.add_argument("--anatomy-steps", type=int, help="steps in the profiled window of --anatomy (default 3)")
    flags.output(run, "results file (.json; a .csv is written beside it)",
                 resume="continue --out (or the newest run), skipping measured cases")
    run.add_argument("--nnodes", type=int, help="hosts the sweep spans: run the same command on each (default 1; under "
                     "Slurm's srun, the task count)")
    run.add_argument("--node-rank", type=int, help="this host's number, 0 to nnodes-1; node 0 writes the results")
    run.add_argument("--rdzv-endpoint",
                     help="HOST:PORT of node 0, where it hosts the rendezvous store (default port 29400)")
    run.add_argument("--rdzv-id", help="a name for this multi-node run, the same on every node (default parabench)")
    run.add_argument("--case-timeout", type=float, default=TIMEOUT_S["case"],
                     help="seconds a case may take before it is killed (default %(default)g)")
    run.add_argument("--startup-timeout", type=float, default=TIMEOUT_S["startup"],
                     help="seconds a worker may take to start (default %(default)g)")
    run.add_argument("--worker-scope", choices=WORKER_SCOPES, default="group",
                     help="cases that share a worker: group (default: every case of a launcher and device set, "
                     "the fastest), series (a fresh worker per series), case (a fresh worker per case, the strictest "
                     "isolation)")
    run.set_defaults(func=cmd_run)
