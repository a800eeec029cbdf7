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
