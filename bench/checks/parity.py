"""Correctness: every strategy must compute the same training step.

`strategy_parameters` runs one step of a strategy through its own launcher (the same
path a sweep takes) and returns the parameters it ends with. `reference_parameters`
computes the same step on one device in plain PyTorch: the global batch split into the
same shards, each shard's loss averaged over the shard, gradients accumulated and
averaged, one step of the workload's optimiser (SGD for images, AdamW for a language model).
Shards matter because BatchNorm normalises each device's shard
with that shard's statistics: an n-way data-parallel step equals a one-device step with
n-shard gradient accumulation, not a one-device step on the whole batch.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import tempfile

import torch

from bench.core.parity_spec import ParityLaunchSpec, ParityRequest
from bench.core import imports
from bench.core import protocol
from bench.cases.case import Case, settings as make_settings
from bench.engine.launchers import worker_environment
from bench.run.workers import launcher_of, worker_env, worker_key, worker_spec, write_spec
from bench.workloads import get_workload
from bench.engine import training
from bench.core.placement import Placement

# fp32 on the CPU: differences come from summation order alone.
CPU_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}
# fp32 on GPUs, TF32 off, deterministic cuDNN, against a reference on GPU 0: other
# algorithms for other batch shapes and cross-device reductions, so a looser bound
# (parameters move by ~1e-2 in a step; CPU vs GPU arithmetic alone differs by ~1e-4).
GPU_TOLERANCE = {"rtol": 1e-3, "atol": 5e-5}


def reference_parameters(model: str, global_batch: int, shards: int, seed: int = 0, steps: int = 1,
                         device: str = "cpu", dtype: str = "float32") -> dict:
    """The reference step on `device` (GPU strategies are compared with a GPU reference:
    CPU and GPU convolution arithmetic alone differ by ~1e-4 after one step), with model
    and data held in `dtype` (the same numbers; float64: see FLOAT64_UPDATE_FRACTION)."""
    workload = get_workload(model)
    net = workload.build(seed).to(device=device, dtype=getattr(torch, dtype))
    inputs, targets = workload.synthetic_batch(global_batch, seed)
    # The same numbers in `dtype` (images; token ids stay integers).
    inputs = inputs.to(device=device, dtype=getattr(torch, dtype) if inputs.is_floating_point() else inputs.dtype)
    targets = targets.to(device)
    name = workload.data.optimizer  # the workload's own, as a case's `auto` resolves it
    optimizer = training.build_optimizer(name, net.parameters(), training.optimizer_settings(
        name, "foreach" if device != "cpu" else "for-loop"))
    loss_fn = workload.criterion()
    if device != "cpu":
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    for _ in range(steps):
        for x, y in zip(inputs.chunk(shards), targets.chunk(shards)):
            (loss_fn(net(x), y) / shards).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    keep = torch.float64 if dtype == "float64" else torch.float32
    return {name: p.detach().to(keep).cpu() for name, p in net.named_parameters()}


def parity_case(strategy: str, model: str, batch_per_replica: int, gpus: tuple[int, ...] = (), n_replicas: int = 1,
                options: dict | None = None, seed: int = 0, steps: int = 1, execution: str = "eager",
                precision: str = "fp32", **knobs) -> Case:
    """The case whose training step the parity tests compare: TF32 off, no autotuning, and the
    reference's plain layout (`auto` turns channels_last on for images on GPUs, whose
    convolutions round otherwise); fp32 unless `precision` says otherwise."""
    knobs = {"cudnn_benchmark": "off", "tf32": "off", "channels_last": "off", **knobs}
    settings = make_settings(warmup=0, steps=steps, trials=1, seed=seed, options=tuple(sorted((options or {}).items())),
                             **knobs)
    return Case.make(strategy, precision, model, Placement(tuple(gpus), n_replicas), batch_per_replica, execution,
                     settings)


def parity_entry(launcher) -> str:
    """The parity worker for a launcher's worker: bench/checks/parity_worker.py for the sweep's,
    and beside a worker module of a strategy's own (MXNet's) its `parity` module."""
    if launcher.module == "bench.run.worker":
        return "bench.checks.parity_worker"
    return launcher.module.rsplit(".", 1)[0] + ".parity"


def run_parity(cases: list[Case], timeout_s: float = 300, dtype: str = "float32") -> list[dict]:
    """Run `cases` in one worker, launched exactly as a sweep launches it, by its parity entry; the
    parameters each case ends with, in order. `dtype` float64 holds the same weights and
    data in float64 in the worker (fp32 precision cases only)."""
    first = cases[0]
    launcher = launcher_of(first)
    with tempfile.TemporaryDirectory(prefix="parabench-parity-") as tmp:
        spec, failed = worker_spec(cases, tmp)
        if failed:
            raise RuntimeError(f"preparing {failed[0][0].label()} failed: {failed[0][1]}")
        # The parity worker's own section: what the sweep's worker never reads.
        outs = {"|".join(c.key): os.path.join(tmp, f"params-{i}.pt") for i, c in enumerate(spec.cases)}
        spec = ParityLaunchSpec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)},
                                parity=ParityRequest(dtype=dtype, outs=outs))
        spec_path = os.path.join(tmp, "spec.json")
        write_spec(spec, spec_path)
        cmd = launcher.command(spec_path, first.placement, first.options_dict, module=parity_entry(launcher))
        env = {**worker_environment(launcher, first.placement, worker_env()),  # as a sweep's worker gets it
               protocol.ENV: os.path.join(tmp, "events.jsonl")}
        proc = subprocess.run(cmd, cwd=imports.ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
        found = []
        for case_spec in spec.cases:
            out = outs["|".join(case_spec.key)]
            if not os.path.exists(out) and os.path.exists(out + ".npz"):
                out += ".npz"  # a numpy-side worker (MXNet) saved an .npz
            if proc.returncode != 0 or not os.path.exists(out):
                # The worker reports a failed case on its events channel, with the rank's traceback.
                reported = [f"{e.get('reason')}\n{e.get('traceback', '')}"
                            for e in protocol.EventReader(env[protocol.ENV]).poll()
                            if e["event"] in ("result", "worker_error") and e.get("status") != "ok"]
                raise RuntimeError(f"{first.strategy} parity step failed ({proc.returncode}):\n"
                                   + "".join(reported) + f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
            if out.endswith(".npz"):
                import numpy as np

                found.append({k: torch.from_numpy(v) for k, v in np.load(out).items()})
            else:
                found.append(torch.load(out))
        return found


def parameters_by_worker(cases: list[Case], timeout_s: float = 300, dtype: str = "float32") -> list:
    """Each case's parameters, or the error that stopped it: the cases that share a worker key
    run in one worker, as a sweep runs them (one start for many strategies: a torchrun start is
    seconds). A worker that fails runs its cases again one to a worker, so that each failure is
    its own case's and the others still answer; where every case then passes alone, the shared
    worker's failure is every case's (cases that break each other in one worker break a sweep)."""
    groups: dict[tuple, list[int]] = {}
    for i, case in enumerate(cases):
        groups.setdefault(worker_key(case), []).append(i)
    out: list = [None] * len(cases)
    for members in groups.values():
        try:
            found = run_parity([cases[i] for i in members], timeout_s * len(members), dtype)
            for i, params in zip(members, found):
                out[i] = params
            continue
        except Exception as exc:  # noqa: BLE001 - each case's own outcome is found below
            shared = exc
        for i in members:
            try:
                out[i] = run_parity([cases[i]], timeout_s, dtype)[0]
            except Exception as exc:  # noqa: BLE001 - the case's outcome, raised by its test
                out[i] = exc
        if len(members) > 1 and not any(isinstance(out[i], Exception) for i in members):
            for i in members:
                out[i] = RuntimeError(f"{len(members)} cases in one worker failed, each alone passed: {shared}")
    return out


def strategy_parameters(strategy: str, model: str, batch_per_replica: int, gpus: tuple[int, ...] = (),
                        n_replicas: int = 1, options: dict | None = None, seed: int = 0, steps: int = 1,
                        timeout_s: float = 300, execution: str = "eager", precision: str = "fp32",
                        dtype: str = "float32", **knobs) -> dict:
    case = parity_case(strategy, model, batch_per_replica, gpus, n_replicas, options, seed, steps, execution, precision,
                       **knobs)
    return run_parity([case], timeout_s, dtype)[0]


def max_abs_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys(), "different parameter names"
    return max((a[k] - b[k]).abs().max().item() for k in a)


def all_close(a: dict, b: dict, rtol: float, atol: float) -> bool:
    return a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=rtol, atol=atol) for k in a)


# torch.compile (Inductor) generates its own kernels: its conv -> BatchNorm -> ReLU backward
# differs from eager by up to ~0.3% of a gradient on some inputs. The difference depends on
# the data: eager fp32 is within 2.4e-6 of a float64 step on rows 0-3 and 0-7, but 2.3e-3 off
# on rows 4-7 alone (an element at a threshold that rounding decides), where compiled DDP's
# second rank fails the bound below (README). An absolute bound would
# either fail it or hide real errors in tensors that move little, so a compiled step is
# judged per tensor against the reference step's own update of that tensor: within 2% of
# it. Measured (`single`, one step, resnet18-small batch 8): 1.14% on the CPU, 1.01% on an
# H200; a step that sums gradients instead of averaging them is 100%, one that shards
# BatchNorm differently 133%.
COMPILE_UPDATE_FRACTION = 0.02

# Why fp32 cannot settle whether compiled DDP computes the step, and float64 can. At 4 samples
# per BatchNorm shard (resnet18-small, global batch 8 over 2 ranks) fp32 eager itself lands
# 3.6% (rows 4-7) and 5.2% (rows 0-3) of a tensor's update away from the same step in
# float64: its activations differ from float64's by up to 1e-6 (first layers) to 3e-5 (last),
# and a few pre-activations lie closer to zero than that (the closest 1.4e-7), so their ReLU
# decides the other way (1 flip on rows 0-3, 4 on rows 4-7; none on rows 0-7 as one shard,
# whose step is 1.2e-4 of an update from float64). A flipped element changes the backward
# through it, by percents of the update of a tensor whose gradient sums few terms at
# 4 samples (worst: layer2.0.conv2 on rows 0-3, layer4.1.conv1 on rows 4-7). Inductor's
# kernels round differently from eager's, so they flip other ReLUs: compiled single passed 2%
# on rows 0-7 by having no flip, compiled DDP failed it on its shards. In float64 the
# rounding is 2^29 times smaller: a flip needs a pre-activation within ~1e-13 of zero (none
# among the ~2 million), and the rest of rounding's effect, amplified as in fp32 (~2e3 eps),
# is ~1e-13 of an update. So in float64 every execution must land within
# FLOAT64_UPDATE_FRACTION of the reference step: a million times tighter than the fp32 bound
# and ~1e7 above float64's rounding, while a wrong step (other shards, summed gradients) is
# 100%+ away.
FLOAT64_UPDATE_FRACTION = 1e-6


def update_share(params: dict, reference: dict, initial: dict) -> tuple[str, float]:
    """The tensor whose distance from the reference is the largest share of the reference
    step's update of that tensor (max |p - ref| / max |ref - initial|), and that share."""
    assert params.keys() == reference.keys() == initial.keys(), "different parameter names"
    shares = {k: (params[k] - reference[k]).abs().max().item()
              / max((reference[k] - initial[k]).abs().max().item(), 1e-12)
              for k in params}
    worst = max(shares, key=shares.get)
    return worst, shares[worst]
