"""`bench probe-comm`: time the collectives the strategies use and fit their costs.

For each device count, n processes on this host (torch.multiprocessing.spawn, one process
group per count: NCCL on GPUs, gloo on the CPU) run all-reduce, reduce-scatter, all-gather
and broadcast (DDP's buffers, ZeroRedundancyOptimizer's parameters) of fp32 tensors over a
ladder of message sizes: warm-up calls first, then timed repetitions, each after a barrier.
On GPUs a repetition is `inner` back-to-back calls between two CUDA events on the current
stream (a synchronous collective makes that stream wait for NCCL's), divided by `inner`:
the skew with which ranks leave the barrier is spread over the calls, as NCCL's tests do.
On the CPU one call on the host clock; CPU ranks run one thread each, as torchrun gives
them. A repetition's time is its slowest rank's. Each (collective, n) keeps the median and
p10/p90 of each size and a fit (bench.predict.collectives.fit) of the medians.

The file (JSON, written atomically) carries the environment it was measured in.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from pathlib import Path

from bench.predict.collectives import COLLECTIVES, CommModel, Fit, Link, bus_factor, fit

SCHEMA = "parabench-probe/1"
SUFFIX = ".comm.json"  # what predict looks for (a report reads only results files, whatever their name)
# resnet18's fp32 gradients (11,689,512 parameters): the largest message a strategy sends.
RESNET18_GRAD_BYTES = 11_689_512 * 4
DEFAULT_SIZES = [4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, RESNET18_GRAD_BYTES]


# Peak resident memory of one CPU rank of `probe-comm` at the default sizes (up to resnet18's
# gradients), sampled every 50 ms with psutil: 461 and 480 MiB for the two ranks of
# `probe-comm --gpus '' --devices 2` (torch 2.13.0+cpu, Python 3.11, a 2-core AMD EPYC). A rank
# holds a message and its shard at a time: larger sizes add twice the largest beyond these.
RANK_MEMORY_MIB = 480


class ProbeError(ValueError):
    """A probe that cannot be taken or read; one line naming the fix."""


def check_cpu_ranks(count: int, largest_bytes: int, oversubscribe: bool, cores: int, available_bytes: int) -> None:
    """Refuse, before anything starts, a count of CPU ranks this host cannot hold: by the rule
    of `bench run --cpu-replicas` (bench/run/limits.py), memory at one rank's measured peak
    always, cores unless `oversubscribe`."""
    per_rank = RANK_MEMORY_MIB + 2 * max(0, largest_bytes - RESNET18_GRAD_BYTES) / 2**20
    fits = int(available_bytes // (per_rank * 2**20))
    if count > fits:
        raise ProbeError(f"--devices {count} needs about {count * per_rank / 1024:,.1f} GiB of memory ({per_rank:,.0f} MiB "
                         f"per rank, the measured peak of one probe-comm rank; bench/predict/probe.py) and "
                         f"{available_bytes / 2**30:.1f} GiB is available: use at most {fits}")
    if count > cores and not oversubscribe:
        raise ProbeError(f"--devices {count} is more than the {cores} CPU cores this process may use: the ranks would "
                         f"share cores and slow each other down; use at most {cores}, or pass --oversubscribe to "
                         "measure that on purpose")


def parse_size(text: str) -> int:
    """'4K', '1M', '45MiB', '1048576' -> bytes (K and M are binary)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        value = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise ProbeError(f"--sizes takes sizes such as 4K,1M,45M, got {text!r}") from None
    if not 4 <= value <= 1 << 36:  # nan and inf too; 64G is more than any GPU holds
        raise ProbeError(f"a message size must be 4 bytes (one fp32) to 64G, got {text!r}")
    return int(value)


# --- in each rank ----------------------------------------------------------------------------
def _collective(name: str, nbytes: int, n: int, device):
    """A callable that runs one collective on a message of about `nbytes` (whole fp32
    elements, a multiple of n so that it shards evenly), and the bytes it really moves."""
    import torch
    import torch.distributed as dist

    numel = max(n, nbytes // 4 // n * n)
    full = torch.ones(numel, device=device)
    shard = torch.empty(numel // n, device=device)
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    ops = {"all_reduce": lambda: dist.all_reduce(full),
           "reduce_scatter": lambda: reduce_scatter(shard, full),
           "all_gather": lambda: all_gather(full, shard),
           "broadcast": lambda: dist.broadcast(full, src=0)}
    return ops[name], numel * 4


def _time(op, device, warmup: int, reps: int, inner: int) -> list[float]:
    """Milliseconds per call of each repetition on this rank."""
    import torch
    import torch.distributed as dist

    cuda = device.type == "cuda"
    for _ in range(warmup):
        op()
    times = []
    for _ in range(reps):
        dist.barrier()
        if cuda:
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(inner):
                op()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / inner)
        else:
            t0 = time.perf_counter()
            for _ in range(inner):
                op()
            times.append((time.perf_counter() - t0) * 1e3 / inner)
    return times


def _rank_main(rank: int, n: int, port: int, spec: dict, out: str) -> None:
    from bench.run import procs

    procs.die_with_parent(spec["parent"])  # a probe killed even by SIGKILL takes its ranks along
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpus = spec["gpus"]
    kwargs = {}
    if gpus:
        device = torch.device("cuda", gpus[rank])
        torch.cuda.set_device(device)
        kwargs["device_id"] = device
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)  # torchrun's one thread per process
    dist.init_process_group("nccl" if gpus else "gloo", rank=rank, world_size=n, **kwargs)
    try:
        measured = []
        for name in spec["collectives"]:
            for size in spec["sizes"]:
                op, nbytes = _collective(name, size, n, device)
                times = _time(op, device, spec["warmup"], spec["reps"], spec["inner"])
                measured.append({"collective": name, "n": n, "bytes": nbytes, "times": times})
        every = [None] * n
        dist.all_gather_object(every, measured)
        if rank == 0:
            for i, point in enumerate(measured):
                # A repetition lasts as long as its slowest rank.
                point["times"] = [max(col) for col in zip(*[r[i]["times"] for r in every])]
            Path(out).write_text(json.dumps(measured))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(gpus: list[int], counts: list[int], sizes: list[int], warmup: int, reps: int, inner: int,
            collectives=COLLECTIVES) -> list[dict]:
    """Raw repetitions of every (collective, count, size), one spawned job per count."""
    import torch.multiprocessing as mp

    spec = {"gpus": gpus, "sizes": sizes, "warmup": warmup, "reps": reps, "inner": inner,
            "collectives": list(collectives), "parent": os.getpid()}
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # as the sweep's workers: NVLink multicast off unless asked
    points = []
    with tempfile.TemporaryDirectory(prefix="parabench-probe-") as tmp:
        for n in counts:
            out = os.path.join(tmp, f"n{n}.json")
            mp.spawn(_rank_main, args=(n, _free_port(), spec, out), nprocs=n, join=True)
            points += json.loads(Path(out).read_text())
    return points


# --- the record --------------------------------------------------------------------------------
def summarise(points: list[dict]) -> tuple[list[dict], list[Fit]]:
    """Per point its median and p10/p90 (ms) and bus bandwidth; a fit per (collective, count)."""
    from bench.core.stats import percentile

    rows, groups = [], {}
    for p in points:
        p50 = percentile(p["times"], 50)
        factor = bus_factor(p["collective"], p["n"])
        rows.append({"collective": p["collective"], "n": p["n"], "bytes": p["bytes"], "reps": len(p["times"]),
                     "ms_p10": percentile(p["times"], 10), "ms_p50": p50, "ms_p90": percentile(p["times"], 90),
                     "busbw_gbps": factor * p["bytes"] / (p50 / 1e3) / 1e9})
        groups.setdefault((p["collective"], p["n"]), []).append((p["bytes"], p50))
    return rows, [fit(c, n, pts) for (c, n), pts in sorted(groups.items())]


def record(gpus: list[int], points: list[dict], settings: dict) -> dict:
    from bench.measure import envinfo

    rows, fits = summarise(points)
    env = {**envinfo.collect(), **envinfo.for_gpus(tuple(gpus)), **envinfo.torch_build()}
    if gpus:
        try:
            env.update(envinfo.runtime_libraries())  # NCCL's version, as the ranks loaded it
        except Exception:  # noqa: BLE001 - the record stands without it
            pass
    return {"schema": SCHEMA, "device": "cuda" if gpus else "cpu", "backend": "nccl" if gpus else "gloo",
            "gpus": gpus, "settings": settings, "environment": env, "points": rows,
            "fits": [{"collective": f.collective, "n": f.n, "alpha_us": f.alpha_us, "busbw_gbps": f.busbw_gbps,
                      "rel_rms": f.rel_rms, "points": f.points} for f in fits]}


def write(path: str | os.PathLike, doc: dict) -> Path:
    from bench.cases.results import atomic_write_bytes

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(doc, indent=1, default=str) + "\n").encode())
    return path


def load(path: str | os.PathLike) -> dict:
    """A probe file, checked: ProbeError names what is wrong."""
    from bench.cases import results

    try:
        doc = results.read_json(path, "probe file", f"run `bench probe-comm --out {path}`")
    except results.ResultsError as exc:
        raise ProbeError(f"cannot read probe: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ProbeError(f"{path}: not a {SCHEMA} file (written by `bench probe-comm`)")
    for f in doc.get("fits", []):
        if not (f.get("busbw_gbps", 0) > 0 and f.get("alpha_us", -1) >= 0 and f.get("n", 0) >= 2):
            raise ProbeError(f"{path}: fit {f} is not usable; run `bench probe-comm` again")
    doc["path"] = str(path)
    return doc


def comm_model(doc: dict, inter_host_gbps: float | None = None, inter_host_latency_us: float = 5.0) -> CommModel:
    fits = {(f["collective"], f["n"]): Fit(f["collective"], f["n"], f["alpha_us"], f["busbw_gbps"], f["rel_rms"],
                                           f["points"]) for f in doc["fits"]}
    inter = None
    if inter_host_gbps:
        inter = Link(inter_host_latency_us, inter_host_gbps / 8, f"network {inter_host_gbps:g} Gb/s per host (given)")
    return CommModel(fits, inter, source=doc.get("path", ""))


def stated_model(busbw_gbps: float, latency_us: float, inter_host_gbps: float | None = None,
                 inter_host_latency_us: float = 5.0) -> CommModel:
    """Collective costs from a link the user states (no probe): every collective at every
    count on a ring of this bus bandwidth and fixed latency per call."""
    if busbw_gbps <= 0 or latency_us < 0:
        raise ValueError("--intra-host-busbw must be positive and --intra-host-latency-us at least 0")
    note = (f"intra-host link stated, not probed: bus bandwidth {busbw_gbps:g} GB/s, latency {latency_us:g} us "
            "per collective")
    model = comm_model({"fits": []}, inter_host_gbps, inter_host_latency_us)
    model.stated = Link(0.0, busbw_gbps, note, base_us=latency_us)
    model.source = f"stated link ({busbw_gbps:g} GB/s, {latency_us:g} us)"
    return model


def describe(doc: dict) -> list[str]:
    """One line per fit, for the terminal."""
    where = ", ".join(map(str, doc["gpus"])) if doc["gpus"] else "cpu"
    lines = [f"{doc['backend']} on {doc['environment'].get('gpu_name') or where}:"]
    for f in doc["fits"]:
        lines.append(f"  {f['collective']:<15} n={f['n']:<3} latency {f['alpha_us']:9.1f} us  bus bandwidth "
                     f"{f['busbw_gbps']:8.2f} GB/s  fit residual {100 * f['rel_rms']:.1f}% over {f['points']} sizes")
    return lines
