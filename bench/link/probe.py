"""`bench probe-comm`: the link between the devices at hand, measured as NCCL's tests measure it.

For each device count, n processes on this host (torch.multiprocessing.spawn, one process
group per count: NCCL on GPUs, gloo on the CPU) run all-reduce, reduce-scatter, all-gather
and broadcast (DDP's buffers, ZeroRedundancyOptimizer's parameters) of fp32 tensors over a
ladder of message sizes: warm-up calls first, then timed repetitions, each after a barrier.
On GPUs a repetition is `inner` back-to-back calls between two CUDA events on the current
stream (a synchronous collective makes that stream wait for NCCL's), divided by `inner`:
the skew with which ranks leave the barrier is spread over the calls, as NCCL's tests do.
On the CPU one call on the host clock; CPU ranks run one thread each, as torchrun gives
them. A repetition's time is its slowest rank's. Each (collective, n, size) keeps the median
and p10/p90 time, the algorithm bandwidth (size / time) and the bus bandwidth (the algorithm
bandwidth times NCCL-tests' factor: what each rank's link carries, the same for every n on a
ring: 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather, whose size is the
whole tensor, and 1 for broadcast).

The file (JSON, written atomically) carries the environment it was measured in.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from bench.core.message import Message

SCHEMA = "parabench-probe/1"
SUFFIX = ".comm.json"
COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")  # what a probe can time
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


def check_cpu_ranks(count: int, largest_bytes: int, oversubscribe: bool, cores: int | None = None,
                    available_bytes: int | None = None) -> None:
    """Refuse, before anything starts, a count of CPU ranks this host cannot hold, by the guard
    of `bench run --cpu-replicas` (bench.run.limits.check_ranks) at one probe rank's peak."""
    from bench.run import limits

    per_rank = RANK_MEMORY_MIB + 2 * max(0, largest_bytes - RESNET18_GRAD_BYTES) / 2**20
    limits.check_ranks("--devices", count, per_rank, "one probe-comm rank; bench/link/probe.py", oversubscribe,
                       cores, available_bytes)


def declared() -> list[str]:
    """The collectives that the registered strategies running one process per device declare
    they send (Strategy.sends), in the probe's order: what their steps put on the link."""
    import strategies

    sent = {c.op for name in strategies.names() for c in strategies.get(name).sends
            if strategies.get(name).launcher(dict(strategies.get(name).options)).multi_process}
    return [c for c in COLLECTIVES if c in sent]


def bus_factor(collective: str, n: int) -> float:
    """Bytes through each rank's link per byte of message (NCCL-tests' bus bandwidth factor)."""
    if n <= 1:
        return 0.0
    if collective == "broadcast":
        return 1.0
    return (2 if collective == "all_reduce" else 1) * (n - 1) / n


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


@dataclass(frozen=True)
class ProbeSpec(Message):
    """What each rank of a probe job measures (spawned with it): its collectives at each size."""

    KIND: ClassVar[str] = "probe spec"
    gpus: tuple[int, ...]
    sizes: tuple[int, ...]
    warmup: int
    reps: int
    inner: int
    collectives: tuple[str, ...]
    parent: int  # the probe's process: its ranks end with it


def _rank_main(rank: int, n: int, port: int, spec: ProbeSpec, out: str) -> None:
    from bench.run import procs

    procs.die_with_parent(spec.parent)  # a probe killed even by SIGKILL takes its ranks along
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    gpus = spec.gpus
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
        for name in spec.collectives:
            for size in spec.sizes:
                op, nbytes = _collective(name, size, n, device)
                times = _time(op, device, spec.warmup, spec.reps, spec.inner)
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

    spec = ProbeSpec(gpus=tuple(gpus), sizes=tuple(sizes), warmup=warmup, reps=reps, inner=inner,
                     collectives=tuple(collectives), parent=os.getpid())
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # as the sweep's workers: NVLink multicast off unless asked
    points = []
    from bench.core.lifetime import SCRATCH_PREFIX, lock_folder

    # A folder the next sweep removes should this process be killed before it removes it.
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}comm-") as tmp:
        live = lock_folder(tmp)
        try:
            for n in counts:
                out = os.path.join(tmp, f"n{n}.json")
                mp.spawn(_rank_main, args=(n, _free_port(), spec, out), nprocs=n, join=True)
                points += json.loads(Path(out).read_text())
        finally:
            os.close(live)
    return points


# --- the record --------------------------------------------------------------------------------
def summarise(points: list[dict]) -> list[dict]:
    """Per point its median and p10/p90 (ms), algorithm and bus bandwidth (GB/s, of the median)."""
    from bench.core.stats import percentile

    rows = []
    for p in points:
        p50 = percentile(p["times"], 50)
        algbw = p["bytes"] / (p50 / 1e3) / 1e9
        rows.append({"collective": p["collective"], "n": p["n"], "bytes": p["bytes"], "reps": len(p["times"]),
                     "ms_p10": percentile(p["times"], 10), "ms_p50": p50, "ms_p90": percentile(p["times"], 90),
                     "algbw_gbps": algbw, "busbw_gbps": bus_factor(p["collective"], p["n"]) * algbw})
    return rows


def record(gpus: list[int], points: list[dict], settings: dict) -> dict:
    from bench.measure import envinfo

    env = {**envinfo.collect(), **envinfo.for_gpus(tuple(gpus)), **envinfo.torch_build()}
    if gpus:
        try:
            env.update(envinfo.runtime_libraries())  # NCCL's version, as the ranks loaded it
        except Exception:  # noqa: BLE001 - the record stands without it
            pass
    return {"schema": SCHEMA, "device": "cuda" if gpus else "cpu", "backend": "nccl" if gpus else "gloo",
            "gpus": gpus, "settings": settings, "environment": env, "points": summarise(points)}


def write(path: str | os.PathLike, doc: dict) -> Path:
    from bench.cases.fileio import atomic_write_bytes

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, (json.dumps(doc, indent=1, default=str) + "\n").encode())
    return path


def describe(doc: dict) -> list[str]:
    """NCCL-tests' table per collective and device count: size, time, algbw, busbw."""
    where = ", ".join(map(str, doc["gpus"])) if doc["gpus"] else "cpu"
    lines = [f"{doc['backend']} on {doc['environment'].get('gpu_name') or where}:"]
    group = None
    for p in doc["points"]:
        if (p["collective"], p["n"]) != group:
            group = (p["collective"], p["n"])
            lines += [f"  {p['collective']}, n={p['n']}", f"  {'size (B)':>12} {'time (us)':>11} {'p10-p90 (us)':>17} "
                      f"{'algbw (GB/s)':>13} {'busbw (GB/s)':>13}"]
        lines.append(f"  {p['bytes']:>12,} {1e3 * p['ms_p50']:>11.1f} "
                     f"{1e3 * p['ms_p10']:>8.1f}-{1e3 * p['ms_p90']:<8.1f} "
                     f"{p['algbw_gbps']:>13.2f} {p['busbw_gbps']:>13.2f}")
    return lines
