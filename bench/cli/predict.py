"""`probe-comm` and `predict`: collective costs measured on the devices at hand, and the step of
DDP, FSDP2 and ZeRO-1 predicted at other device counts from them and a one-device case's
traces (bench/predict/)."""
from __future__ import annotations

import datetime
import json
import socket
import sys
from pathlib import Path

from bench.cli.common import UsageError, csv, ints, listed, resolve_gpus


def _guarded(func):
    """`func(args)` with bad input (ValueError, a results file that cannot be used) as one line."""
    def run(args):
        from bench.cases.results import ResultsError

        try:
            return func(args)
        except (ValueError, ResultsError) as exc:
            raise UsageError(str(exc).strip().splitlines()[0]) from None
    return run


# --- probe-comm ----------------------------------------------------------------------------
def _probe_counts(args, gpus: list[int]) -> list[int]:
    if args.devices:
        counts = ints(args.devices, "--devices")
    elif gpus:
        counts = sorted({k for k in (2, 4, 8, 16) if k <= len(gpus)} | {len(gpus)})
    else:
        counts = [2]
    if any(k < 2 for k in counts):
        raise ValueError("--devices: a collective needs 2 or more devices")
    if gpus and max(counts) > len(gpus):
        raise ValueError(f"--devices asks for {max(counts)} GPUs but --gpus gives {len(gpus)}")
    return counts


def cmd_probe(args) -> int:
    from bench.predict import probe

    gpus = resolve_gpus(args.gpus)
    if args.gpus is None and len(gpus) < 2:
        gpus = []  # fewer than 2 GPUs: the CPU, with gloo
    counts = _probe_counts(args, gpus)
    sizes = [probe.parse_size(s) for s in args.sizes.split(",")] if args.sizes else probe.DEFAULT_SIZES
    if not gpus:
        from bench.run import limits

        probe.check_cpu_ranks(max(counts), max(sizes), args.oversubscribe, limits.usable_cores(),
                              limits.available_memory())
    collectives = listed(args.collectives, "--collectives")
    unknown = [c for c in collectives if c not in probe.COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective {unknown[0]!r}: choose from {', '.join(probe.COLLECTIVES)}")
    on_gpu = bool(gpus)
    settings = {"warmup": args.warmup if args.warmup is not None else (5 if on_gpu else 1),
                "reps": args.reps if args.reps is not None else (20 if on_gpu else 5),
                "inner": args.inner if args.inner is not None else (5 if on_gpu else 1)}
    if settings["reps"] < 1 or settings["inner"] < 1 or settings["warmup"] < 0:
        raise ValueError("--reps and --inner must be at least 1, --warmup at least 0")
    out = Path(args.out) if args.out else Path(args.results_dir) / (
        f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}{probe.SUFFIX}")
    from bench.cases.results import check_writable

    check_writable(out)
    points = probe.measure(gpus, counts, sizes, collectives=collectives, **settings)
    doc = probe.record(gpus, points, {**settings, "devices": counts, "sizes": sizes, "collectives": collectives})
    probe.write(out, doc)
    print("\n".join(probe.describe(doc)))
    print(f"probe written to {out}")
    return 0


# --- predict ----------------------------------------------------------------------------------
def _inputs(args) -> list[Path]:
    from bench.cases import results

    if args.files:
        return [Path(f) for f in args.files]
    folder = Path(args.results_dir)
    found = sorted(p for p in folder.rglob("*.json") if "baselines" not in p.parts
                   and not p.name.endswith(".probe.json") and results.may_be_results(p))
    if not found:
        raise ValueError(f"no results files in {folder}: measure a 1-device case with `bench run --anatomy` first")
    return found


def _probe_file(args) -> str:
    """--probe, or the newest probe-comm file under the results folder."""
    from bench.predict import probe

    if args.probe:
        return args.probe
    found = sorted(Path(args.results_dir).rglob(f"*{probe.SUFFIX}"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise ValueError(f"no probe (*{probe.SUFFIX}) in {args.results_dir}: run `bench probe-comm` or pass --probe")
    return str(found[-1])


def cmd_predict(args) -> int:
    from bench.cases import results
    from bench.predict import predict, probe, validate

    from bench.predict import MAX_DEVICES

    if args.from_file:
        return _validate_file(args)
    devices = ints(args.devices, "--devices")
    if max(devices) > MAX_DEVICES:
        raise ValueError(f"--devices {max(devices)}: predictions go up to {MAX_DEVICES:,} devices (bench/predict/"
                         "__init__.py says why); give at most that")
    _check_links(args)
    targets = listed(args.strategies, "--strategies")
    unknown = [s for s in targets if s not in predict.TARGETS]
    if unknown:
        raise ValueError(f"cannot predict {unknown[0]!r}: choose from {', '.join(predict.TARGETS)}")
    if args.hosts is not None and args.hosts < 1 or args.gpus_per_host < 1:
        raise ValueError("--hosts and --gpus-per-host must be at least 1")
    from bench.predict import store

    out = None if args.json == "-" else Path(args.json) if args.json else Path(args.results_dir) / (
        f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}{store.SUFFIX}")
    if out is not None:
        results.check_writable(out)
    if args.intra_host_busbw is not None:
        if args.probe:
            raise ValueError("give --probe or --intra-host-busbw, not both")
        comm = probe.stated_model(args.intra_host_busbw, args.intra_host_latency_us, args.inter_host_gbps,
                                  args.inter_host_latency_us)
        device, doc = "cuda", None
    else:
        doc = probe.load(_probe_file(args))
        comm = probe.comm_model(doc, args.inter_host_gbps, args.inter_host_latency_us)
        device = doc["device"]
    rows = results.load_many(_inputs(args))
    models, precisions = set(csv(args.models)), set(csv(args.precisions))
    usable = [r for r in rows if r.get("device") == device and (not models or r.get("model") in models)
              and (not precisions or r.get("precision") in precisions)]
    missing = predict.missing_traces(usable)
    if missing:  # such a case cannot be a base; the others still are
        print(f"{len(missing)} profiled case(s) left out as bases, their traces are not there (first: {missing[0]}; "
              "unpack a traces.tar.xz beside its results file?)", file=sys.stderr)
    rows_out = predict.predict(usable, comm, targets, devices, args.gpus_per_host, args.hosts)
    if not rows_out:
        raise ValueError(f"no 1-device {device} case with traces in the results: measure one with "
                         "`bench run --anatomy` (single or ddp on one device)")
    if doc is not None:
        _note_probe_hardware(rows_out, doc)
    pairs = validate.pair(rows_out, rows, comm) if args.validate else None
    if out is not None:  # with --json alone, standard output holds the JSON only
        print(render(rows_out))
        if pairs is not None:
            print()
            print(validate.render(pairs))
    doc_out = store.document(rows_out, pairs, {
        "devices": devices, "strategies": targets, "gpus_per_host": args.gpus_per_host, "hosts": args.hosts,
        "inter_host_gbps": args.inter_host_gbps, "link": comm.source})
    if out is None:
        print(json.dumps(doc_out, indent=1, default=str))
        return 0
    store.write(out, doc_out)
    print(f"predictions written to {out} (`bench report` draws them beside the measured cases)")
    return 0


def _validate_file(args) -> int:
    """--from: a predictions file set against the measured cases again, with both baselines:
    nothing is predicted, so the bases' traces are not needed."""
    from bench.predict import validate

    pairs = validate.recheck(Path(args.from_file), [Path(f) for f in args.files] or None,
                             Path(args.probe) if args.probe else None)
    print(validate.render(pairs))
    return 0


def _check_links(args) -> None:
    """A link figure that is not a positive finite number would make every prediction NaN or
    negative: refused in one line."""
    import math

    for flag, value, zero_ok in (("--intra-host-busbw", args.intra_host_busbw, False),
                                 ("--inter-host-gbps", args.inter_host_gbps, False),
                                 ("--intra-host-latency-us", args.intra_host_latency_us, True),
                                 ("--inter-host-latency-us", args.inter_host_latency_us, True)):
        if value is not None and not (math.isfinite(value) and (value >= 0 if zero_ok else value > 0)):
            raise ValueError(f"{flag} must be a finite number {'of 0 or more' if zero_ok else 'above 0'}, got {value:g}")


def _note_probe_hardware(rows: list[dict], doc: dict) -> None:
    probed = doc["environment"].get("gpu_name") if doc["device"] == "cuda" else f"CPU {doc['environment'].get('cpu')}"
    for row in rows:
        if row["hardware"] != probed:
            row["assumptions"].append(f"the probe was measured on {probed}, the base on {row['hardware']}")


def _assumptions(row: dict) -> list[str]:
    return ["  assumes (largest count shown; the others alike):"] + [f"    - {a}" for a in row["assumptions"]]


def render(rows: list[dict]) -> str:
    lines, group = [], None
    for r in rows:
        key = (r["strategy"], r["variant"], r["base"]["label"])
        if key != group:
            if group is not None:
                lines += _assumptions(last)
            group = key
            variant = f" ({r['variant']})" if r["variant"] else ""
            lines += ["", f"{r['strategy']}{variant} from {r['base']['label']} [{r['base']['source']}], "
                          f"probe {r['probe']}",
                      f"  {'devices':>12} {'img/s':>10} {'efficiency':>10} {'step ms':>10} {'exposed ms':>10} "
                      f"{'memory MiB':>10}  pace"]
        where = f"{r['hosts']}x{r['per_host']}" if r["hosts"] > 1 else str(r["devices"])
        memory = f"{r['memory_mib']:.1f}" if r["memory_mib"] is not None else f"{r['state_mib']:.1f}*"
        lines.append(f"  {where:>12} {r['img_per_s']:>10.5g} {100 * r['scaling_efficiency']:>9.1f}% "
                     f"{r['step_ms']:>10.4g} {r['exposed_comm_ms']:>10.4g} {memory:>10}  "
                     f"{'host-bound: host time is the floor' if r['host_bound'] else 'device'}")
        last = r
    lines += _assumptions(last)
    if any(r["memory_mib"] is None for r in rows):
        lines.append("* memory: the training state only (no measured 1-device peak to take activations from)")
    return "\n".join(lines).lstrip("\n")


def add_parser(sub) -> None:
    """`probe-comm` and `predict`; bad input is one line (UsageError)."""

    pc = sub.add_parser("probe-comm", help="time all-reduce, reduce-scatter, all-gather and broadcast over message "
                        "sizes and fit latency + bandwidth per collective and device count")
    pc.add_argument("--gpus", help="CUDA ordinals (default: all visible; '' or cpu: gloo processes on the CPU)")
    pc.add_argument("--devices", help="device counts to probe, e.g. 2,4,8 (default: 2, 4, 8... up to --gpus; "
                    "on the CPU 2 processes)")
    pc.add_argument("--sizes", help="message sizes, e.g. 4K,64K,1M,16M,45M (default 4 KiB to resnet18's 44.6 MiB "
                    "of fp32 gradients)")
    pc.add_argument("--collectives", default="all_reduce,reduce_scatter,all_gather,broadcast")
    pc.add_argument("--warmup", type=int, help="untimed calls per size (default 5 on GPUs, 1 on the CPU)")
    pc.add_argument("--reps", type=int, help="timed repetitions per size (default 20 on GPUs, 5 on the CPU)")
    pc.add_argument("--inner", type=int, help="back-to-back calls per repetition (default 5 on GPUs, 1 on the CPU)")
    pc.add_argument("--oversubscribe", action="store_true", help="on the CPU, allow more ranks than cores (they then "
                    "slow each other down)")
    pc.add_argument("--out", help="probe file (default <results-dir>/<time>-<host>.comm.json)")
    pc.add_argument("--results-dir", default="results")
    pc.set_defaults(func=_guarded(cmd_probe))

    pr = sub.add_parser("predict", help="predict DDP, FSDP2 and ZeRO-1 at other device counts from a measured "
                        "1-device case with --anatomy traces and a probe-comm file")
    pr.add_argument("files", nargs="*", help="results files (default: every results file under --results-dir)")
    pr.add_argument("--results-dir", default="results")
    pr.add_argument("--probe", help="probe-comm file (default: the newest *.comm.json under --results-dir)")
    pr.add_argument("--intra-host-busbw", type=float, metavar="GB/S",
                    help="instead of a probe: the GPUs' link inside a host as NCCL-tests' bus bandwidth, GB/s "
                         "(every prediction then says it was stated, not probed)")
    pr.add_argument("--intra-host-latency-us", type=float, default=10.0,
                    help="with --intra-host-busbw: latency per collective, us (default 10)")
    pr.add_argument("--devices", default="1,2,4,8", help="device counts to predict (default 1,2,4,8)")
    pr.add_argument("--strategies", default=",".join(("ddp", "fsdp2", "zero1")))
    pr.add_argument("--models", help="only bases of these models, e.g. resnet18 (default: every model)")
    pr.add_argument("--precisions", help="only bases of these precisions, e.g. amp-bf16 (default: every one)")
    pr.add_argument("--gpus-per-host", type=int, default=8,
                    help="GPUs a host holds: larger counts span hosts (default 8)")
    pr.add_argument("--hosts", type=int, help="spread every device count over this many hosts instead")
    pr.add_argument("--inter-host-gbps", type=float,
                    help="each host's network bandwidth, Gbit/s (needed across hosts)")
    pr.add_argument("--inter-host-latency-us", type=float, default=5.0,
                    help="latency per inter-host ring step, us (default 5)")
    pr.add_argument("--validate", action="store_true", help="set predictions against measured cases at the same "
                    "count, beside linear scaling and communication not hidden")
    pr.add_argument("--from", dest="from_file", metavar="PREDICTIONS",
                    help="validate this predictions file again instead of predicting (results: FILES or the results "
                         "files in its folder; probe: --probe or the one in its folder); no traces needed")
    pr.add_argument("--json", nargs="?", const="-", metavar="FILE",
                    help="the predictions file (default <results-dir>/<time>-<host>.predictions.json, which "
                         "`bench report` draws); --json alone prints it instead")
    pr.set_defaults(func=_guarded(cmd_predict))
