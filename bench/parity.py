"""Correctness: every strategy must compute the same training step.

`strategy_parameters` runs one step of a strategy through its own launcher (the same
path a sweep takes) and returns the parameters it ends with. `reference_parameters`
computes the same step on one device in plain PyTorch: the global batch split into the
same shards, each shard's loss averaged over the shard, gradients accumulated and
averaged, one SGD step. Shards matter because BatchNorm normalises each device's shard
with that shard's statistics: an n-way data-parallel step equals a one-device step with
n-shard gradient accumulation, not a one-device step on the whole batch.
"""
from __future__ import annotations

import json
import os
import subprocess
import tempfile

import torch

import strategies
from bench import envinfo
from bench.models import get_workload
from strategies.common import default_sgd_impl, loss_fn, make_optimizer

# fp32 on the CPU: differences come from summation order alone.
CPU_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# fp32 on GPUs, TF32 off, deterministic cuDNN, against a reference on GPU 0: other
# algorithms for other batch shapes and cross-device reductions, so a looser bound
# (parameters move by ~1e-2 in a step; CPU vs GPU arithmetic alone differs by ~1e-4).
GPU_TOLERANCE = {"rtol": 1e-3, "atol": 5e-5}


def reference_parameters(model: str, global_batch: int, shards: int, seed: int = 0, steps: int = 1,
                         device: str = "cpu") -> dict:
    """The reference step on `device` (GPU strategies are compared with a GPU reference:
    CPU and GPU convolution arithmetic alone differ by ~1e-4 after one step)."""
    workload = get_workload(model)
    net = workload.build(seed).to(device)
    optimizer = make_optimizer(net.parameters(), default_sgd_impl(device != "cpu"))
    inputs, targets = (t.to(device) for t in workload.synthetic_batch(global_batch, seed))
    if device != "cpu":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for _ in range(steps):
        for x, y in zip(inputs.chunk(shards), targets.chunk(shards)):
            (loss_fn(net(x), y) / shards).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {name: p.detach().float().cpu() for name, p in net.named_parameters()}


def strategy_parameters(strategy: str, model: str, batch_per_replica: int, gpus: tuple[int, ...] = (),
                        n_replicas: int = 1, options: dict | None = None, seed: int = 0, steps: int = 1,
                        timeout_s: float = 300, sgd_impl: str = "auto") -> dict:
    strat = strategies.get(strategy)
    merged = {**strat.options, **(options or {})}
    with tempfile.TemporaryDirectory(prefix="parabench-parity-") as tmp:
        spec = {
            "mode": "parity", "parity_out": os.path.join(tmp, "params.pt"),
            "strategy": strategy, "precision": "fp32", "model": model, "gpus": list(gpus), "n_replicas": n_replicas,
            "batch_sizes": [batch_per_replica], "warmup": 0, "steps": steps, "trials": 1, "seed": seed,
            "data": "device", "channels_last": False, "compile": False, "cudnn_benchmark": False, "tf32": "off",
            "sgd_impl": strat.sgd_impl(sgd_impl, bool(gpus)), "options": merged,
        }
        spec_path = os.path.join(tmp, "spec.json")
        strat.prepare_launch(spec, spec_path)
        with open(spec_path, "w") as fh:
            json.dump(spec, fh)
        from bench.sweep import Placement

        cmd = strat.launch_command(spec_path, Placement(tuple(gpus), n_replicas), merged)
        env = {**os.environ, "PYTHONPATH": str(envinfo.REPO), "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "0")}
        proc = subprocess.run(cmd, cwd=envinfo.REPO, env=env, capture_output=True, text=True, timeout=timeout_s)
        out = spec["parity_out"]
        if not os.path.exists(out) and os.path.exists(out + ".npz"):
            out += ".npz"  # a numpy-side worker (MXNet) saved an .npz
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"{strategy} parity step failed ({proc.returncode}):\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
        if out.endswith(".npz"):
            import numpy as np

            return {k: torch.from_numpy(v) for k, v in np.load(out).items()}
        return torch.load(out)


def max_abs_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), "different parameter names"
    return max((a[k] - b[k]).abs().max().item() for k in a)


def all_close(a: dict, b: dict, rtol: float, atol: float) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=rtol, atol=atol) for k in a)
