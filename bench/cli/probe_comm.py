"""`probe-comm`: the link between the devices at hand, measured as NCCL's tests measure it: per
collective, device count and message size, the time, algorithm bandwidth and bus bandwidth
(bench/link/)."""
from __future__ import annotations

import datetime
import socket
from pathlib import Path

from bench.cli import flags
from bench.cli.common import UsageError, ints, listed, resolve_gpus


def _guarded(func):
    """`func(args)` with bad input (ValueError, a results file that cannot be used) as one line."""
    def run(args):
        from bench.cases.fileio import ResultsError

        try:
            return func(args)
        except (ValueError, ResultsError) as exc:
            raise UsageError(str(exc).strip().splitlines()[0]) from None
    return run


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
    from bench.link import probe

    gpus = resolve_gpus(args.gpus)
    if args.gpus is None and len(gpus) < 2:
        gpus = []  # fewer than 2 GPUs: the CPU, with gloo
    counts = _probe_counts(args, gpus)
    sizes = [probe.parse_size(s) for s in args.sizes.split(",")] if args.sizes else probe.DEFAULT_SIZES
    if not gpus:
        probe.check_cpu_ranks(max(counts), max(sizes), args.oversubscribe)
    collectives = listed(args.collectives, "--collectives") if args.collectives else probe.declared()
    unknown = [c for c in collectives if c not in probe.COLLECTIVES]
    if unknown:
        raise ValueError(f"unknown collective {unknown[0]!r}: choose from {', '.join(probe.COLLECTIVES)}")
    on_gpu = bool(gpus)
    settings = flags.measured(args, "probe-comm", on_gpu)
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


def add_parser(sub) -> None:
    """`probe-comm`; bad input is one line (UsageError)."""

    pc = sub.add_parser("probe-comm", help="time the collectives the strategies send (all-reduce, reduce-scatter, "
                        "all-gather, broadcast) over message sizes: algorithm and bus bandwidth, as NCCL's tests")
    flags.gpus(pc, "CUDA ordinals (default: all visible; '' or cpu: gloo processes on the CPU)")
    pc.add_argument("--devices", help="device counts to probe, e.g. 2,4,8 (default: 2, 4, 8... up to --gpus; "
                    "on the CPU 2 processes)")
    pc.add_argument("--sizes", help="message sizes, e.g. 4K,64K,1M,16M,45M (default 4 KiB to resnet18's 44.6 MiB "
                    "of fp32 gradients)")
    pc.add_argument("--collectives", help="default: every collective a registered multi-process strategy declares "
                    "it sends (Strategy.sends)")
    flags.measurement(pc, "probe-comm")
    flags.oversubscribe(pc, "on the CPU, allow more ranks than cores (they then slow each other down)")
    flags.output(pc, "probe file (default <results-dir>/<time>-<host>.comm.json)")
    pc.set_defaults(func=_guarded(cmd_probe))
