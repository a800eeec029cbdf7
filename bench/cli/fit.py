"""`fit`: the peak memory per device and the largest batch per device that fits, at device
counts beyond this host's, each measured as rank 0 of a fake world of n on one device
(bench/fit/fit.py)."""
from __future__ import annotations

import datetime
import math
import os
import socket
from pathlib import Path

from bench.cases.defaults import TIMEOUT_S
from bench.cli import flags
from bench.cli.common import (UsageError, check_names, ints, listed, refuse_knobs_models_cannot_take, resolve_gpus,
                               resume_command)


def _reserve(args, gpus: list[int]):
    """What the fit holds back at n >= 2 and why (bench/fit/reserve.py); a failed measurement is one line."""
    from bench.fit import reserve
    from bench.measure import envinfo

    nccl = driver = None
    visible: list[int] = []
    if gpus and args.reserve_mib is None:
        on_host = envinfo.gpus_on_host()
        visible = [g["index"] for g in on_host]
        driver = on_host[0]["driver"] if on_host else None
        nccl = envinfo.runtime_libraries().get("nccl")
        # --gpus counts within CUDA_VISIBLE_DEVICES where it is set (as the worker's does, _worker_env), the
        # measurement's CUDA_VISIBLE_DEVICES names the host's GPUs: the fit's own and the next it may see.
        shown = [int(v) for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip().isdigit()]
        if shown:
            visible = [v for v in shown if v in visible]
            gpus = [shown[gpus[0]]] if gpus[0] < len(shown) else gpus
    try:
        return reserve.choose(args.reserve_mib, gpus, visible, nccl, socket.gethostname(), driver,
                              Path(args.results_dir))
    except reserve.ReserveError as exc:
        raise UsageError(str(exc)) from None


def _budget(args, gpus: list[int], models: list[str]) -> float | None:
    """The memory a probe may use, checked against what this host has before anything starts."""
    from bench.measure import envinfo
    from bench.run import limits

    budget = args.memory_budget
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        raise UsageError(f"--memory-budget is in MiB and must be a positive number, got {budget:g}")
    if gpus:
        device = {g["index"]: g for g in envinfo.gpus_on_host()}.get(gpus[0], {})
        total = device.get("memory_mib")
        if budget is not None and total and budget > total:
            raise UsageError(f"--memory-budget {budget:g} MiB is more than GPU {gpus[0]}'s {total:,} MiB: give at "
                             "most that, or leave it out for the whole device")
        return budget
    if budget is None:
        raise UsageError("on the CPU, give --memory-budget MiB: the tensor memory a probe may hold (a fake world's "
                         "rank is measured there by tracking its tensors, against that budget)")
    per_rank, measured = max(limits.rank_memory_mib(m) for m in models)
    available = limits.available_memory() / 2**20
    if budget + per_rank > available:
        raise UsageError(f"--memory-budget {budget:g} MiB needs about {budget + per_rank:,.0f} MiB of host memory "
                         f"(plus {per_rank} MiB, the measured peak of one {measured} process; bench/run/limits.py) "
                         f"and {available:,.0f} MiB is available: use at most {max(0, available - per_rank):,.0f}")
    return budget


def _devices(args) -> list[int]:
    from bench.fit import MAX_DEVICES
    from bench.fit.fit import DEFAULT_DEVICES

    devices = sorted(ints(args.devices, "--devices")) if args.devices is not None else list(DEFAULT_DEVICES)
    if max(devices) > MAX_DEVICES:
        raise UsageError(f"--devices {max(devices)}: a fake world is one process, but past {MAX_DEVICES:,} ranks "
                         "every rank holds one row of each parameter and nothing shrinks further; give at most "
                         f"{MAX_DEVICES:,}")
    return devices


# The default headroom on a GPU, a fraction of a probe's memory (bench/fit/worker.py says why).
HEADROOM = 0.02


def _headroom(args, gpus: list[int]) -> float:
    """--headroom as a fraction: the default on a GPU, none on the CPU (the budget counts tensors)."""
    if args.headroom is None:
        return HEADROOM if gpus else 0.0
    if not (math.isfinite(args.headroom) and 0 <= args.headroom < 50):
        raise UsageError(f"--headroom is a percent of a probe's memory, at least 0 and below 50, got {args.headroom:g}")
    return args.headroom / 100


def _search(args) -> dict:
    """The search's settings; `first` None where --first-batches is not given: each model's own
    (bench/workloads/data.py `fit_first`: a few sequences of a language model, more images)."""
    first = ints(args.first_batches, "--first-batches") if args.first_batches is not None else None
    if not (0 < args.resolution < 1):
        raise UsageError(f"--resolution is a fraction of the largest batch that fit, 0 < x < 1, "
                         f"got {args.resolution:g}")
    if args.max_batch < 1:
        raise UsageError(f"--max-batch must be at least 1, got {args.max_batch}")
    return {"first": tuple(first) if first else None, "resolution": args.resolution, "max_batch": args.max_batch}


def cmd_fit(args) -> int:
    """Exit status: 0 when every search ran to its end, 1 when a worker could not go on (its
    searches' rows say how far they got), 2 bad input."""
    import strategies
    from bench import workloads
    from bench.cases import results
    from bench.cases.case import settings as make_settings
    from bench.fit import fit
    from bench.workloads.probing import probe
    from bench.workloads.resolve import check_name

    chosen = listed(args.strategies, "--strategies") or fit.strategies_to_fit()
    check_names(chosen, strategies.names(), "strategy", "--strategies")
    try:
        for name in chosen:
            fit.check_strategy(name)
    except fit.FitError as exc:
        raise UsageError(str(exc)) from None
    precisions = flags.precisions(args, resolve_gpus(args.gpus) != [])  # a sweep's default on this device
    models = listed(args.models, "--models")
    try:
        for model in models:
            check_name(model)
        probe(models)
    except workloads.WorkloadError as exc:
        raise UsageError(f"{exc} (--models)") from None
    gpus = resolve_gpus(args.gpus)
    if len(gpus) > 1 and args.gpus is not None:
        raise UsageError(f"--gpus names {len(gpus)} GPUs: a fake world runs on one; name one, e.g. --gpus {gpus[0]}")
    gpus = gpus[:1]  # unset: the first visible GPU
    devices = _devices(args)
    budget = _budget(args, gpus, models)
    search = _search(args)
    measured = flags.measured(args, "fit", bool(gpus))
    args.warmup, args.steps = measured["warmup"], measured["steps"]
    if args.reserve_mib is not None and not (math.isfinite(args.reserve_mib)
                                             and 0 <= args.reserve_mib < (budget or float("inf"))):
        raise UsageError(f"--reserve-mib is the MiB held back at n >= 2, at least 0 and less than the memory a probe "
                         f"may use, got {args.reserve_mib:g}")
    held = _reserve(args, gpus)
    headroom = _headroom(args, gpus)
    for flag, value in (("--probe-timeout", args.probe_timeout), ("--startup-timeout", args.startup_timeout)):
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag} must be a positive number of seconds, got {value:g}")
    out = Path(args.out) if args.out else Path(args.results_dir) / (
        f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}{fit.SUFFIX}")
    if not out.name.endswith(fit.SUFFIX):
        raise UsageError(f"--out {out}: a fit file's name ends in {fit.SUFFIX} (the report finds it by that)")
    if out.is_dir():
        raise UsageError(f"--out {out} is a folder: name a fit file in it, e.g. --out {out / ('fit' + fit.SUFFIX)}")
    # One writer at a time, as `bench run` holds its results file: a second fit to the same --out is refused
    # (before it looks whether the file exists: two started together would both find none).
    requested = _knobs(args)
    refuse_knobs_models_cannot_take(make_settings(**requested), models)
    lock = results.Lock(out)
    try:
        results.check_writable(out)  # first: a folder that cannot be written cannot hold the lock either
        lock.acquire()
    except results.ResultsError as exc:
        raise UsageError(str(exc)) from None
    try:
        if out.exists() and not args.resume:  # its probes were measured: never written over
            raise UsageError(f"--out {out} holds a fit already: --resume goes on with it (the same settings), or "
                             "choose another --out")
        knobs = make_settings(warmup=args.warmup, steps=args.steps, trials=1, **requested)
        settings = {"models": models, "strategies": chosen, "precisions": precisions, "devices": devices, "gpus": gpus,
                    "memory_budget_mib": budget, "reserve_mib": held.mib, "reserve_source": held.source,
                    "headroom": headroom, "largest_block": bool(gpus),  # a GPU probe's largest block held back too
                    **requested, "warmup": args.warmup,
                    "steps": args.steps, **search, "first": list(search["first"]) if search["first"] else None,
                    "probe_timeout_s": args.probe_timeout,
                    "startup_timeout_s": args.startup_timeout}
        environment = fit.environment_of(gpus)
        rows, found = [], []
        if args.resume and out.exists():
            rows, found, earlier = _resumed(out, settings, models)
            settings["models"] = list(dict.fromkeys([o["model"] for o in found] + models))
            # The counts the file measured stay in it: their searches are replayed, not measured again.
            devices = settings["devices"] = sorted(set(devices) | set(earlier))
        from bench.run.signals import Terminated, ignore_further_signals, stop_on_signals

        stop_on_signals()  # SIGTERM and SIGHUP stop the fit as Ctrl-C does: the worker goes, the file stays
        try:
            return _measure_all(args, out, models, chosen, precisions, devices, gpus, knobs, budget, search, held,
                                settings, environment, rows, found)
        except (KeyboardInterrupt, Terminated) as exc:
            ignore_further_signals()
            what = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else str(exc)
            kept = (f"the probes measured so far are in {out}; continue with: {resume_command(out)}"
                    if out.exists() else "no probe had ended")
            print(f"fit stopped by {what}: {kept}", flush=True)
            return 130 if isinstance(exc, KeyboardInterrupt) else exc.exit_status
    finally:
        lock.release()


def _measure_all(args, out, models, chosen, precisions, devices, gpus, knobs, budget, search, held, settings,
                 environment, rows, found) -> int:
    """Every model's searches, the file written after each probe; 0 when every search ran to its end."""
    import time

    from bench.fit import fit

    complete, started = True, time.monotonic()
    for model in models:
        items, skipped = fit.cases(model, chosen, precisions, devices, gpus, knobs)
        rows += [{**r, **environment, "hardware": _hardware(environment), "fake_world": True,
                  "devices": r["n_replicas"]}
                 for r in skipped]
        mine = {**search, "first": search["first"] or _first_batches(model)}
        job = fit.Fit(model, items, gpus, budget, mine, reserve_mib=held.mib, headroom=settings["headroom"],
                      probe_timeout_s=args.probe_timeout,
                      startup_timeout_s=args.startup_timeout)
        by_item = {(i["precision"], i["strategy"]): i for i in items}
        for row in rows:  # what a resumed file measured already
            if row.get("model") == model and row.get("status") in fit.PROBED and (row["precision"], row["strategy"]) \
                    in by_item and row.get("devices") in devices:
                job.done.setdefault((row["precision"], row["strategy"]), {}).setdefault(row["devices"], []).append(
                    {k: row.get(k) for k in fit.PROBE_FIELDS} | {"batch": row["batch_per_gpu"]})
                job.limit_mib = row.get("limit_mib") or job.limit_mib
        if not gpus:
            job.limit_mib = budget  # known without a worker

        def on_probe(event, probe, job=job, by_item=by_item):
            case = by_item[(event["precision"], event["strategy"])]["rows"][str(event["devices"])]
            batch = probe["batch"]
            rows.append({**case, **environment, "hardware": _hardware(environment), "fake_world": True,
                         "devices": event["devices"], "batch_per_gpu": batch, "global_batch": batch * event["devices"],
                         "limit_mib": job.limit_mib, **probe})
            print(f"{model} {event['precision']} {event['strategy']} at {event['devices']}: batch {batch} "
                  f"{probe['status']}" + (f", peak {probe['peak_alloc_mib']:.0f} MiB allocated, "
                                          f"{probe['peak_reserved_mib']:.0f} reserved"
                                          if probe.get("peak_alloc_mib") is not None else "")
                  + (f" ({probe['reason']})" if probe["status"] != "ok" and probe.get("reason") else "")
                  + (f" [{probe['probe_s']:.1f} s]" if probe.get("probe_s") is not None else ""), flush=True)
            fit.write(out, fit.document(rows, found + fit.outcomes(job), settings))

        fit.measure(job, _worker_env(gpus), on_probe)
        complete = complete and not job.left()
        found += fit.outcomes(job)
        fit.write(out, fit.document(rows, found, settings))
    doc = fit.load(out)
    print()
    for line in fit.sentences(doc):
        print(line)
    print(f"\nfit written to {out} after {time.monotonic() - started:.0f} s (`bench report` and `bench answer` show it "
          "beside the results in its folder)")
    return 0 if complete else 1


def _first_batches(model: str) -> tuple[int, ...]:
    """The batches a model's search starts from where --first-batches is not given: its data's."""
    from bench.workloads import data_or_images

    return tuple(data_or_images(model).fit_first)


def _resumed(out: Path, settings: dict, models: list[str]) -> tuple[list[dict], list[dict], list[int]]:
    """--resume: the rows of a fit file made with the same search, the outcomes of its models
    that this run does not measure again, and the device counts it measured."""
    from bench.fit import fit

    try:
        doc = fit.load(out)
    except fit.FitError as exc:
        raise UsageError(f"--resume: {exc}") from None
    from bench.core.knobs import BY_NAME as KNOB

    for key in ("gpus", "memory_budget_mib", "reserve_mib", "headroom", "largest_block",
                *(k for k in KNOB if KNOB[k].fit), "warmup", "steps", "first", "resolution", "max_batch"):
        # older files: none held back, no headroom, no block, a knob they predate as what they measured (its legacy)
        was = (0.0 if key in ("reserve_mib", "headroom") else False if key == "largest_block"
               else KNOB[key].legacy if key in KNOB else None)
        if key == "largest_block" and doc["settings"].get(key, was) != settings[key]:
            raise UsageError(f"--resume: {out} was made before its probes held back their largest block "
                             "(bench/fit/worker.py `judged`): its verdicts would mix two rules; make the fit afresh "
                             "with another --out")
        if doc["settings"].get(key, was) != settings[key]:
            raise UsageError(f"--resume: {out} was made with {key} {doc['settings'].get(key)!r}, "
                             f"not {settings[key]!r}: give the same settings, or another --out")
    return doc["rows"], [o for o in doc["outcomes"] if o["model"] not in models], list(doc["settings"].get("devices")
                                                                                      or [])


def _knobs(args) -> dict:
    """The request of every knob that changes what a probe holds, as `bench run` takes it
    (bench/core/knobs.py; a probe runs eager on CPUs the kernel places)."""
    from bench.core.knobs import KNOBS

    return {knob.name: getattr(args, knob.name) for knob in KNOBS if knob.fit}


def _worker_env(gpus: list[int]) -> dict:
    """The worker sees its one GPU as device 0 (FSDP2's device mesh picks a device by rank, and a
    fake world's only rank is 0), or no GPU at all for the CPU."""
    import os

    from bench.run.workers import worker_env

    env = worker_env()
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = visible[gpus[0]] if visible else str(gpus[0])
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _hardware(environment: dict) -> str:
    from bench.cases.case import hardware

    return hardware({**environment, "device": "cpu" if environment.get("gpu_name") in (None, "cpu") else "cuda"})


def cmd_fit_check(args) -> int:
    """Exit status: 0 when every decided verdict and every peak compared holds, 1 when one does
    not, 2 bad input (or nothing to compare)."""
    import pandas as pd

    from bench.cases import results
    from bench.fit import fit

    try:
        doc = fit.load(args.fit)
        rows = results.load_many(args.runs)
    except (fit.FitError, results.ResultsError) as exc:
        raise UsageError(str(exc)) from None
    checked = fit.against(doc, rows)
    if not checked:
        raise UsageError(f"no row of {', '.join(args.runs)} measures what {args.fit} covers (a real run of the same "
                         "model, precision, strategy and options, eager, on the same GPU, at one of its device "
                         "counts): run `bench run --gpus ... --batches ...` at the fit's batches first")
    table = pd.DataFrame([{"model": c["model"], "precision": c["precision"], "strategy": c["strategy"],
                           "devices": c["devices"], "batch/GPU": c["batch_per_gpu"], "fit says": c["fit_says"],
                           "real run": c["run"], "agrees": {None: "-", True: "yes", False: "NO"}[c["agrees"]],
                           "fake-world peak MiB": "" if c["fake_peak_mib"] is None else f"{c['fake_peak_mib']:,.0f}",
                           "real peak MiB": "" if c["run_peak_mib"] is None else f"{c['run_peak_mib']:,.0f}",
                           "difference": "" if c["peak_error"] is None else f"{100 * c['peak_error']:+.2f}%"}
                          for c in checked])
    from bench.report import mdtable

    print(mdtable.markdown(table))
    print(f"\n{fit.against_in_words(checked)}")
    return 0 if fit.against_holds(checked) else 1


def add_parser(sub) -> None:
    from bench.core.knobs import KNOBS
    from bench.fit.fit import DEFAULT_DEVICES, PEAK_TOLERANCE
    from bench.fit.search import Search

    check = sub.add_parser("fit-check", help="a fit file's figures held against real runs of n devices: the fit's "
                           "verdict at each measured batch beside the run's outcome, and the two peaks per device")
    check.add_argument("fit", help="the fit file (bench fit --out)")
    check.add_argument("runs", nargs="+", help="results files of real multi-device runs (bench run --out)")
    check.set_defaults(func=cmd_fit_check)
    check.epilog = f"Peaks agree within {100 * PEAK_TOLERANCE:g}% of the real run's."

    cmd = sub.add_parser("fit", help="peak memory per device and the largest batch per device that fits, at device "
                         "counts beyond this host's: each measured as rank 0 of a fake world of n on one device")
    flags.what(cmd, models="resnet18",
               strategies="default: ddp and every strategy that declares it shards (Strategy.shards)")
    cmd.add_argument("--devices",
                     help=f"device counts, each a fake world (default {','.join(map(str, DEFAULT_DEVICES))})")
    flags.gpus(cmd, "the one GPU to measure on (default: GPU 0 where there is one; '' or cpu: the CPU, with "
               "--memory-budget)")
    cmd.add_argument("--memory-budget", type=float, metavar="MIB",
                     help="the memory a probe may use, MiB (on a GPU default: the whole device; on the CPU required)")
    cmd.add_argument("--reserve-mib", type=float, metavar="MIB",
                     help="memory held back from every probe at n >= 2 for what a real world holds outside "
                     "PyTorch's allocator, the communicator's buffers (default: measured on a host of 2 or more "
                     "GPUs and kept per host, driver and NCCL version; on one GPU the shipped measurement for "
                     "its NCCL version; bench/fit/reserve.py)")
    cmd.add_argument("--headroom", type=float, metavar="PCT",
                     help="percent of a probe's memory a batch must leave free beyond its peak, and beyond its "
                     "largest block, to count as fitting: a real run's allocator fragments differently from a "
                     "probe's (default on a GPU "
                     f"{100 * HEADROOM:g}; on the CPU 0, where the budget counts tensors; bench/fit/worker.py)")
    for knob in KNOBS:  # each knob's own flag, as `bench run` has it (bench/core/knobs.py)
        if knob.fit:
            knob.add_flag(cmd)
    how = Search(limit_mib=0)  # the search's defaults, declared once there
    cmd.add_argument("--first-batches", help="the batches the search starts from, the line through them predicting "
                     "the limit (default: the model's, 8,64 images or 1,8 sequences of a language model)")
    cmd.add_argument("--resolution", type=float, default=how.resolution, help="stop when the smallest batch that "
                     f"failed is within this fraction of the largest that fit (default {how.resolution:g})")
    cmd.add_argument("--max-batch", type=int, default=how.max_batch,
                     help=f"the search's ceiling (default {how.max_batch})")
    flags.measurement(cmd, "fit")
    cmd.add_argument("--probe-timeout", type=float, default=TIMEOUT_S["probe"],
                     help="seconds a probe may take before its worker is killed and a fresh one goes on "
                     "(default %(default)g)")
    cmd.add_argument("--startup-timeout", type=float, default=TIMEOUT_S["startup"],
                     help="seconds a worker may take to start and build the model (default %(default)g)")
    flags.output(cmd, "the fit file (default <results-dir>/<time>-<host>.fit.json)",
                 resume="go on from the probes --out holds (made with the same search settings): a search already "
                 "over is not measured again")
    cmd.set_defaults(func=cmd_fit)
