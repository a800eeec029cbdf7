"""Every strategy computes the same fp32 training step.

Reference: one device, the global batch in the same shards as the strategy's devices
(BatchNorm normalises per shard), gradients averaged, one SGD step. Tolerances are in
bench/parity.py: rtol 1e-4, atol 1e-5 on the CPU; rtol 1e-3, atol 1e-4 on GPUs.
"""
import pytest

import strategies
from bench.parity import (CPU_TOLERANCE, GPU_TOLERANCE, all_close, max_abs_difference, reference_parameters,
                          strategy_parameters)
from tests.conftest import needs_two_gpus

MODEL, GLOBAL_BATCH = "resnet18-small", 8


@pytest.fixture(scope="module")
def reference():
    return {n: reference_parameters(MODEL, GLOBAL_BATCH, shards=n) for n in (1, 2)}


@pytest.mark.parametrize("strategy, replicas", [("single", 1), ("allreduce-scratch", 2), ("ddp", 2)])
def test_cpu_strategies_match_the_reference(strategy, replicas, reference):
    params = strategy_parameters(strategy, MODEL, GLOBAL_BATCH // replicas, (), replicas)
    diff = max_abs_difference(params, reference[replicas])
    assert all_close(params, reference[replicas], **CPU_TOLERANCE), f"max |diff| {diff:.3g}"


def test_ddp_spawn_launcher_matches_torchrun(reference):
    params = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (), 2, options={"launcher": "spawn"})
    assert all_close(params, reference[2], **CPU_TOLERANCE)


def test_allreduce_scratch_coalesced_matches(reference):
    params = strategy_parameters("allreduce-scratch", MODEL, GLOBAL_BATCH // 2, (), 2, options={"coalesce": True})
    assert all_close(params, reference[2], **CPU_TOLERANCE)


@pytest.mark.parametrize("sgd_impl", ["foreach", "fused"])
def test_sgd_implementations_compute_the_same_update(sgd_impl):
    # Two steps, so that the momentum buffer takes part. One device: after a first step
    # that differs by ~1e-7 (DDP's reduction order), this small-batch step amplifies the
    # difference to ~1e-3, which would hide what is tested here.
    reference2 = reference_parameters(MODEL, GLOBAL_BATCH, shards=1, steps=2)
    params = strategy_parameters("single", MODEL, GLOBAL_BATCH, (), 1, steps=2, sgd_impl=sgd_impl)
    assert all_close(params, reference2, **CPU_TOLERANCE), f"max |diff| {max_abs_difference(params, reference2):.3g}"


def test_the_comparison_detects_a_different_step(reference):
    # A step over other shards (BatchNorm statistics) or other weights must fail the check.
    assert not all_close(reference[1], reference[2], **CPU_TOLERANCE)
    other_seed = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, seed=1)
    assert not all_close(other_seed, reference[2], **CPU_TOLERANCE)
    assert max_abs_difference(reference[1], reference[2]) > 100 * CPU_TOLERANCE["atol"]


@pytest.fixture(scope="module")
def gpu_reference():
    return {n: reference_parameters(MODEL, GLOBAL_BATCH, shards=n, device="cuda:0") for n in (1, 2)}


@needs_two_gpus
@pytest.mark.gpu
@pytest.mark.parametrize("strategy", [n for n in strategies.names() if n != "mxnet-gluon"])
def test_gpu_strategies_match_the_reference(strategy, gpu_reference, reference):
    replicas = 1 if strategies.get(strategy).max_replicas == 1 else 2
    gpus = (0,) if replicas == 1 else (0, 1)
    params = strategy_parameters(strategy, MODEL, GLOBAL_BATCH // replicas, gpus, replicas)
    diff = max_abs_difference(params, gpu_reference[replicas])
    print(f"{strategy}: max |param - GPU reference| = {diff:.3g}, "
          f"vs CPU reference {max_abs_difference(params, reference[replicas]):.3g}")
    assert all_close(params, gpu_reference[replicas], **GPU_TOLERANCE), f"max |diff| {diff:.3g}"


@needs_two_gpus
@pytest.mark.gpu
@pytest.mark.parametrize("sgd_impl, options", [
    ("fused", {}),
    ("foreach", {"gradient_as_bucket_view": True, "static_graph": True, "bucket_cap_mb": 100}),
])
def test_gpu_ddp_knobs_keep_the_step(sgd_impl, options, gpu_reference):
    params = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (0, 1), 2, options=options, sgd_impl=sgd_impl)
    diff = max_abs_difference(params, gpu_reference[2])
    print(f"ddp sgd={sgd_impl} {options}: max |param - GPU reference| = {diff:.3g}")
    assert all_close(params, gpu_reference[2], **GPU_TOLERANCE), f"max |diff| {diff:.3g}"
