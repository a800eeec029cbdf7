"""Compiles off the clock: the two questions to answer on a GPU before the sweep compiles the next
cases' graphs in a process of their own while the current case is measured.

1. Does a side process that compiles a training step's graphs without running them leave the
   caches that a later ordinary torch.compile of the same step hits, and how much of the compile
   does that save? The side process compiles behind a backend that hands the graph to inductor
   (compile_fx) and stops before anything runs; both processes have AOTAutograd lower the
   backward with the forward (torch._functorch.config.force_non_lazy_backward_lowering), since a
   lazily lowered backward is saved only once a backward has run, and the flag is part of the
   cache's key. Its inputs and weights are allocated, never computed (no kernel runs).
2. Does such a compile beside a host-bound measurement disturb it? An eager step at a small batch
   is timed alone and with a side compile beside it (nice 19, TORCHINDUCTOR_COMPILE_THREADS
   limited), in turns.

  python scripts/precompile_probe.py --out FILE.json [--model resnet18-small] [--batch 256]
      [--small-batch 32] [--seconds 20] [--threads 4] [--device cuda|cpu]

Each part runs in fresh processes with a cache folder of its own; FILE.json holds every figure.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(model_name: str, batch: int, device: str, allocate_only: bool):
    """The suite's model, its loss and a batch of that size on `device`; where `allocate_only`,
    weights and batch are allocated there and never computed or copied (no kernel runs)."""
    import torch

    from bench.workloads import get_workload

    workload = get_workload(model_name)
    model = workload.build(seed=0)
    inputs, targets = workload.synthetic_batch(batch)
    if allocate_only:
        return (model.to_empty(device=device), workload.criterion(), torch.empty_like(inputs, device=device),
                torch.empty_like(targets, device=device))
    return model.to(device), workload.criterion(), inputs.to(device), targets.to(device)


def counts() -> dict:
    from torch._dynamo.utils import counters

    return {k: dict(v) for k, v in counters.items() if k in ("inductor", "aot_autograd")}


def side(args) -> dict:
    """Compile the step's graphs and stop before they run."""
    import torch
    import torch._functorch.config as functorch_config
    from torch._inductor.compile_fx import compile_fx

    functorch_config.force_non_lazy_backward_lowering = True
    os.nice(19)

    class Compiled(Exception):
        pass

    def compile_only(gm, example_inputs):
        compile_fx(gm, example_inputs)
        raise Compiled

    model, loss, x, y = build(args.model, args.batch, args.device, allocate_only=True)
    step = torch.compile(lambda a, b: loss(model(a), b), backend=compile_only)
    started = time.perf_counter()
    with torch.autocast(args.device, dtype=torch.bfloat16):
        try:
            step(x, y)
        except Exception as exc:  # noqa: BLE001 - dynamo wraps the backend's exception
            if "Compiled" not in f"{type(exc).__name__} {exc}":
                raise
    return {"compile_s": time.perf_counter() - started, "counters": counts()}


def measure(args) -> dict:
    """The ordinary compiled step: its first call (the compile) and the calls after it."""
    import torch
    import torch._functorch.config as functorch_config

    functorch_config.force_non_lazy_backward_lowering = True
    model, loss, x, y = build(args.model, args.batch, args.device, allocate_only=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    step = torch.compile(lambda a, b: loss(model(a), b))

    def run():
        with torch.autocast(args.device, dtype=torch.bfloat16):
            step(x, y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    started = time.perf_counter()
    run()
    sync(args.device)
    first = time.perf_counter() - started
    return {"first_step_s": first, "counters": counts(), "step_ms": timed(run, args.device, 30)}


def host_bound(args) -> dict:
    """An eager step at a small batch, timed step by step for --seconds."""
    import torch

    model, loss, x, y = build(args.model, args.small_batch, args.device, allocate_only=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def run():
        with torch.autocast(args.device, dtype=torch.bfloat16):
            loss(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(10):
        run()
    sync(args.device)
    times, until = [], time.perf_counter() + args.seconds
    while time.perf_counter() < until:
        times += timed(run, args.device, 20)
    return {"step_ms": times}


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed(run, device: str, n: int) -> list[float]:
    """n steps, each between CUDA events (on the CPU, the host's clock)."""
    import torch

    out = []
    for _ in range(n):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run()
            end.record()
            end.synchronize()
            out.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            run()
            out.append(1e3 * (time.perf_counter() - t))
    return out


def child(part: str, args, cache: Path, threads: int | None = None, wait: bool = True):
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    if threads:
        env["TORCHINDUCTOR_COMPILE_THREADS"] = str(threads)
    cmd = [sys.executable, __file__, "--part", part, "--model", args.model, "--batch", str(args.batch),
           "--small-batch", str(args.small_batch), "--seconds", str(args.seconds), "--device", args.device]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if not wait:
        return proc
    out, _ = proc.communicate()
    if proc.returncode:
        raise SystemExit(f"{part} exited {proc.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def quantiles(ms: list[float]) -> dict:
    import statistics

    q = statistics.quantiles(ms, n=10)
    return {"n": len(ms), "p10": q[0], "p50": statistics.median(ms), "p90": q[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out")
    parser.add_argument("--part", choices=("side", "measure", "host-bound"))
    parser.add_argument("--model", default="resnet18-small")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--small-batch", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    if args.part:
        print(json.dumps({"side": side, "measure": measure, "host-bound": host_bound}[args.part](args)))
        return
    found: dict = {"settings": vars(args), "command": " ".join(sys.argv)}
    with tempfile.TemporaryDirectory(prefix="precompile-") as folder:
        folder = Path(folder)
        # 1. A cold compile, then one after a side process compiled the same step ahead.
        found["cold"] = child("measure", args, folder / "cold")
        found["side"] = child("side", args, folder / "ahead", threads=args.threads)
        found["after_side"] = child("measure", args, folder / "ahead")
        # 2. A host-bound step alone and with a side compile beside it (a cold cache each time), in turns.
        found["host_bound"] = []
        for turn in range(2):
            for beside in (False, True):
                started = time.time()
                compiling = (child("side", args, folder / f"beside-{turn}", threads=args.threads, wait=False)
                             if beside else None)
                timing = child("host-bound", args, folder / f"alone-{turn}")
                timed_until = time.time()
                entry = {"turn": turn, "beside_a_compile": beside, "timed_s": timed_until - started}
                if compiling is not None:  # the compile must have run, and beside the timing
                    out, _ = compiling.communicate()
                    if compiling.returncode:
                        raise SystemExit(f"the side compile beside turn {turn} exited {compiling.returncode}")
                    entry.update(side_compile_s=json.loads(out.strip().splitlines()[-1])["compile_s"],
                                 side_ended_after_timing_s=time.time() - timed_until)
                found["host_bound"].append({**entry, **quantiles(timing["step_ms"])})
    for part in ("cold", "after_side"):
        found[part]["step"] = quantiles(found[part].pop("step_ms"))
    text = json.dumps(found, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
