"""MXNet Gluon: the same network (parameter count, forward output), the same training
step as PyTorch, a sweep over 2 CPU contexts, and honest availability reasons.

Runs where the MXNet environment is installed (`make setup-mxnet`); CI installs it and
sets PARABENCH_REQUIRE_MXNET=1, so that a missing environment fails instead of skipping.
"""
import json
import os
import subprocess

import numpy as np
import pytest
import torch

import strategies
from bench.workloads import get_workload
from strategies.gluon.names import gluon_name
from bench.checks.parity import all_close, max_abs_difference, reference_parameters, strategy_parameters
from bench.core.precision import get_precision
from strategies.base import Placement
from strategies.gluon import installed_wheel, mxnet_python
from tests.conftest import REPO, rows_of, run_cli

if installed_wheel() is None and os.environ.get("PARABENCH_REQUIRE_MXNET") != "1":
    pytest.skip("MXNet environment not installed (make setup-mxnet)", allow_module_level=True)

# fp32 forward through 20 layers: the two frameworks' kernels differ in summation order only.
FORWARD_ATOL = 1e-5
# One SGD step across frameworks: the two sum each convolution's weight gradient in other
# orders (other kernels on other CPUs). A float32 sum of n terms is off by about sqrt(n) x
# 6e-8 of the sum of the terms' magnitudes, and BatchNorm's backward leaves gradients far
# smaller than those magnitudes (its terms cancel), so the difference scales with the step's
# update, not with the weights: an absolute bound fixed for one CPU's kernels fails on
# another. Measured max |diff|: 3.4e-5 on one CPU, 3.7e-4 on a 2-core AMD EPYC (conv1.weight,
# whose gradient sums 4 x 28 x 28 = 3136 products per element and shard: 0.46% of the step's
# largest update, 0.080). The bound is 2% of the step's largest update (4x that); a wrong step
# (BatchNorm over the whole batch instead of each context's shard) is 0.078 off, 97% of it.
FRAMEWORK_UPDATE_FRACTION = 0.02

GLUON_FORWARD = """
import json, sys, numpy as np, mxnet as mx
from mxnet import autograd
from strategies.gluon import models as mx_models
d = np.load(sys.argv[1])
net = mx_models.build(json.loads(sys.argv[2]))
mx_models.load_torch_weights(net, {k[2:]: d[k] for k in d.files if k.startswith('w:')}, mx.cpu())
x = mx.nd.array(d['x'])
out = {'eval': net(x).asnumpy()}
with autograd.record(train_mode=True):
    out['train'] = net(x).asnumpy()
np.savez(sys.argv[3], n_params=mx_models.n_parameters(net), **out)
"""


@pytest.mark.parametrize("model", ["resnet18-small", "resnet18"])
def test_same_parameter_count_and_forward_output(model, tmp_path):
    workload = get_workload(model)
    net = workload.build()
    x, _ = workload.synthetic_batch(2)
    np.savez(tmp_path / "in.npz", x=x.numpy(), **{f"w:{k}": v.numpy() for k, v in net.state_dict().items()})
    proc = subprocess.run([str(mxnet_python()), "-c", GLUON_FORWARD, str(tmp_path / "in.npz"),
                           json.dumps(workload.mxnet), str(tmp_path / "out.npz")],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = np.load(tmp_path / "out.npz")
    assert int(out["n_params"]) == sum(p.numel() for p in net.parameters())
    with torch.no_grad():
        expected_eval = net.eval()(x).numpy()
        expected_train = net.train()(x).numpy()
    assert np.abs(out["eval"] - expected_eval).max() < FORWARD_ATOL
    assert np.abs(out["train"] - expected_train).max() < FORWARD_ATOL


def test_one_training_step_matches_pytorch():
    """split_and_load over 2 CPU contexts + Trainer(kvstore='device') vs the PyTorch reference step."""
    params = strategy_parameters("mxnet-gluon", "resnet18-small", 4, (), 2)
    reference = reference_parameters("resnet18-small", 8, shards=2)
    mapped = {name: params[gluon_name(name)] for name in reference}
    initial = {name: p.detach().float() for name, p in get_workload("resnet18-small").build(seed=0).named_parameters()}
    update = max((reference[k] - initial[k]).abs().max().item() for k in reference)
    atol = FRAMEWORK_UPDATE_FRACTION * update
    diff = max_abs_difference(mapped, reference)
    assert all_close(mapped, reference, rtol=0.0, atol=atol), \
        (f"max |diff| {diff:.3g}, allowed {atol:.3g} "
         f"({FRAMEWORK_UPDATE_FRACTION:.0%} of the largest update, {update:.3g})")
    # The check can fail: a one-shard (whole-batch BatchNorm) step is far outside it.
    wrong = reference_parameters("resnet18-small", 8, shards=1)
    assert not all_close(wrong, reference, rtol=0.0, atol=atol)
    assert max_abs_difference(wrong, reference) > 10 * atol


def test_sweep_over_two_cpu_contexts(tmp_path):
    out = tmp_path / "mx.json"
    proc = run_cli("run", "--gpus", "", "--strategies", "mxnet-gluon", "--batch-sizes", "1,2", "--warmup", "1",
                   "--steps", "2", "--trials", "2", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    for r in rows:
        assert r["n_replicas"] == 2 and r["device"] == "cpu" and r["global_batch"] == 2 * r["batch_per_gpu"]
        assert r["items_per_s"] > 0 and r["mxnet"] == "1.9.1" and json.loads(r["options"]) == {"kvstore": "device"}


def test_kvstore_local_is_a_knob(tmp_path):
    out = tmp_path / "mx.json"
    proc = run_cli("run", "--gpus", "", "--strategies", "mxnet-gluon", "--batch-sizes", "1", "--warmup", "0",
                   "--steps", "1", "--trials", "1", "--option", "kvstore=local", "--out", str(out))
    assert proc.returncode == 0 and rows_of(out)[0]["status"] == "ok"


def test_reasons_when_it_cannot_run(monkeypatch):
    strategy = strategies.get("mxnet-gluon")
    fp32 = get_precision("fp32")
    assert "amp-bf16" in strategy.unavailable_reason(Placement((), 2), get_precision("amp-bf16"))
    assert ("supports --execution eager, not cuda-graph"
            in strategy.unavailable_reason(Placement((), 2), fp32, "cuda-graph"))
    monkeypatch.setenv("PARABENCH_MXNET_PYTHON", "/nonexistent/python")
    reason = strategy.unavailable_reason(Placement((), 2), fp32)
    assert "run `make setup-mxnet`" in reason and "/nonexistent" not in reason  # no machine's local path
    # On Hopper: the hardware reason comes first, whatever the environment (none installed here).
    import strategies.gluon as mod

    monkeypatch.setattr(mod, "compute_capabilities", lambda gpus: {g: ("NVIDIA H200", (9, 0)) for g in gpus})
    reason = strategy.unavailable_reason(Placement((0, 1), 2), fp32)
    assert "NVIDIA H200 (compute capability 9.0) is newer than MXNet runs" in reason and "sm_50-86" in reason
    monkeypatch.setattr(mod, "installed_wheel", lambda: "mxnet-cu117")
    monkeypatch.setattr(mod, "compute_capabilities", lambda gpus: {g: ("NVIDIA A10", (8, 6)) for g in gpus})
    assert strategy.unavailable_reason(Placement((0, 1), 2), fp32) is None
    monkeypatch.setattr(mod, "installed_wheel", lambda: "mxnet")
    assert "CPU wheel" in strategy.unavailable_reason(Placement((0,), 1), fp32)
    monkeypatch.setattr(mod, "compute_capabilities", lambda gpus: {g: ("NVIDIA H100 80GB HBM3", (9, 0)) for g in gpus})
    assert "NVIDIA H100 80GB HBM3 (compute capability 9.0)" in strategy.unavailable_reason(Placement((0,), 1), fp32)
