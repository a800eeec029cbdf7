"""Every strategy and execution computes the same fp32 training step.

Reference: one device, the global batch in the same shards as the strategy's devices
(BatchNorm normalises per shard), gradients averaged, one SGD step. Tolerances are in
bench/checks/parity.py: rtol 1e-4, atol 1e-5 on the CPU; rtol 1e-3, atol 5e-5 on GPUs; a compiled
step within 2% of each tensor's own one-step update in fp32 (Inductor's kernels) and within 1e-6 of
it in float64, where no ReLU sits on fp32's knife edge (bench/checks/parity.py says why: compiled
DDP's shards of 4 samples are such a knife edge in fp32 for eager too).
Compressed communication hooks change the numbers and state their own tolerance below.
"""
import pytest
import torch

import strategies
from bench.checks.parity import (COMPILE_UPDATE_FRACTION, CPU_TOLERANCE, FLOAT64_UPDATE_FRACTION, GPU_TOLERANCE,
                                 all_close, max_abs_difference, parameters_by_worker, parity_case,
                                 reference_parameters, run_parity, strategy_parameters, update_share)
from tests.conftest import cuda_gpus, needs_two_gpus

MODEL, GLOBAL_BATCH = "resnet18-small", 8

# fp16_compress_hook rounds each gradient to fp16 before the all-reduce (relative error
# 2^-11 ~ 5e-4); parameters move by lr x gradient, up to ~0.1 per step, so one step can
# differ by ~5e-5 (measured on the CPU with gloo: 4.0e-5).
FP16_HOOK_TOLERANCE = {"rtol": 1e-3, "atol": 1e-4}
# bf16 keeps 8 bits of mantissa (2^-8 ~ 4e-3): ten times looser. NCCL only.
BF16_HOOK_TOLERANCE = {"rtol": 1e-2, "atol": 1e-3}


@pytest.fixture(scope="module")
def reference():
    return {n: reference_parameters(MODEL, GLOBAL_BATCH, shards=n) for n in (1, 2)}


CPU_STRATEGIES = [
    ("single", 1, {}), ("allreduce-scratch", 2, {}), ("ddp", 2, {}), ("zero1", 2, {}), ("fsdp2", 2, {}),
    ("fsdp2", 2, {"reshard_after_forward": False}),
    ("ddp", 2, {"launcher": "spawn"}), ("allreduce-scratch", 2, {"coalesce": True}),
    # PowerSGD runs two exact all-reduce steps before it compresses (start_powerSGD_iter=2):
    # its first step is the exact one.
    ("ddp", 2, {"comm_hook": "powersgd"}),
]


def shared_workers(setups: list[tuple], gpus_of=lambda replicas: ()) -> list:
    """Each (strategy, replicas, options[, knobs])'s parameters after one step, the setups that
    share a worker run in one (bench/checks/parity.py `parameters_by_worker`)."""
    cases = [parity_case(name, MODEL, GLOBAL_BATCH // replicas, gpus_of(replicas), replicas, options,
                         **(rest[0] if rest else {}))
             for name, replicas, options, *rest in setups]
    return parameters_by_worker(cases)


def answered(found):
    """A setup's parameters, or its failure raised here."""
    if isinstance(found, Exception):
        raise found
    return found


@pytest.fixture(scope="module")
def cpu_parameters():
    return shared_workers(CPU_STRATEGIES)


@pytest.mark.parametrize("index", range(len(CPU_STRATEGIES)),
                         ids=["-".join([n, *(f"{k}={v}" for k, v in o.items())]) for n, _, o in CPU_STRATEGIES])
def test_cpu_strategies_match_the_reference(index, cpu_parameters, reference):
    replicas = CPU_STRATEGIES[index][1]
    params = answered(cpu_parameters[index])
    diff = max_abs_difference(params, reference[replicas])
    assert all_close(params, reference[replicas], **CPU_TOLERANCE), f"max |diff| {diff:.3g}"


def test_fp16_compression_hook_is_close_but_not_exact(reference):
    params = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (), 2, options={"comm_hook": "fp16"})
    diff = max_abs_difference(params, reference[2])
    assert all_close(params, reference[2], **FP16_HOOK_TOLERANCE), f"max |diff| {diff:.3g}"
    assert diff > CPU_TOLERANCE["atol"] / 10, "the hook did not compress anything"


@pytest.mark.slow
def test_powersgd_compresses_after_its_exact_steps():
    # From the third step on, gradients are a rank-1 approximation: not comparable
    # element-wise with any exact step, so the check is that it moved away from exact DDP
    # by far more than exact DDP's own step-to-step noise, and stayed finite.
    exact = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (), 2, steps=3)
    reference3 = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, steps=3)
    compressed = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (), 2, steps=3, options={"comm_hook": "powersgd"})
    noise = max_abs_difference(exact, reference3)
    assert max_abs_difference(compressed, exact) > 3 * noise
    assert all(v.isfinite().all() for v in compressed.values())


@pytest.mark.parametrize("optimizer_impl", ["foreach", "fused"])
def test_optimizer_implementations_compute_the_same_update(optimizer_impl):
    # Two steps, so that the momentum buffer takes part. One device: after a first step
    # that differs by ~1e-7 (DDP's reduction order), this small-batch step amplifies the
    # difference to ~1e-3, which would hide what is tested here.
    reference2 = reference_parameters(MODEL, GLOBAL_BATCH, shards=1, steps=2)
    params = strategy_parameters("single", MODEL, GLOBAL_BATCH, (), 1, steps=2, optimizer_impl=optimizer_impl)
    assert all_close(params, reference2, **CPU_TOLERANCE), f"max |diff| {max_abs_difference(params, reference2):.3g}"


def test_a_case_does_not_depend_on_what_ran_before_it_in_the_worker():
    # One long-lived worker runs several cases: the same case first and after others must
    # train to exactly the same parameters (seeds, data and state are reset per case).
    first = parity_case("single", MODEL, GLOBAL_BATCH, steps=2)
    other = parity_case("single", "resnet18-small", 4, steps=3, seed=1, optimizer_impl="foreach")
    a, _, b = run_parity([first, other, first])
    assert max_abs_difference(a, b) == 0.0


def _compiled_check(label, params, reference, initial):
    name, share = update_share(params, reference, initial)
    print(f"{label}: worst tensor {name}, {share:.2%} of its one-step update (max |diff| "
          f"{max_abs_difference(params, reference):.3g})")
    assert share <= COMPILE_UPDATE_FRACTION, f"{name} differs by {share:.2%} of its update"


@pytest.mark.slow
def test_cpu_compiled_step_keeps_the_step(reference):
    params = strategy_parameters("single", MODEL, GLOBAL_BATCH, (), 1, execution="compile")
    _compiled_check("single compile", params, reference[1],
                    reference_parameters(MODEL, GLOBAL_BATCH, shards=1, steps=0))


@pytest.mark.slow
def test_cpu_compiled_ddp_computes_the_same_step_in_float64():
    # Two ranks of 4 samples, compiled (Inductor, DDPOptimizer's graphs split at the buckets),
    # model and data in float64: the reference step to float64's rounding (measured on the
    # CPU: compiled DDP 4.2e-13 of layer4.0.bn1.weight's update, compiled single 3.4e-13,
    # eager DDP exact).
    reference64 = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, dtype="float64")
    initial64 = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, steps=0, dtype="float64")
    params = strategy_parameters("ddp", MODEL, GLOBAL_BATCH // 2, (), 2, execution="compile", dtype="float64",
                                 timeout_s=900)
    assert all(v.dtype == torch.float64 for v in params.values())
    _float64_check("ddp compile", params, reference64, initial64)


def _float64_check(label, params, reference, initial):
    name, share = update_share(params, reference, initial)
    print(f"{label} (float64): worst tensor {name}, {share:.3g} of its one-step update")
    assert share <= FLOAT64_UPDATE_FRACTION, f"{name} differs by {share:.3g} of its update"


def test_the_update_share_detects_a_different_step(reference):
    # What the compiled check would let through must exclude a wrong step: other BatchNorm
    # shards, gradients summed instead of averaged.
    initial = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, steps=0)
    assert update_share(reference[1], reference[2], initial)[1] > 10 * COMPILE_UPDATE_FRACTION
    summed = {k: initial[k] + 2 * (reference[2][k] - initial[k]) for k in initial}
    assert update_share(summed, reference[2], initial)[1] > 10 * COMPILE_UPDATE_FRACTION
    assert update_share(reference[2], reference[2], initial)[1] == 0.0


def test_the_comparison_detects_a_different_step(reference):
    # A step over other shards (BatchNorm statistics) or other weights must fail the check.
    assert not all_close(reference[1], reference[2], **CPU_TOLERANCE)
    other_seed = reference_parameters(MODEL, GLOBAL_BATCH, shards=2, seed=1)
    assert not all_close(other_seed, reference[2], **CPU_TOLERANCE)
    assert max_abs_difference(reference[1], reference[2]) > 100 * CPU_TOLERANCE["atol"]


@pytest.fixture(scope="module")
def gpu_reference():
    return {n: reference_parameters(MODEL, GLOBAL_BATCH, shards=n, device="cuda:0") for n in (1, 2)}


def _gpu_check(label, params, gpu_reference, replicas, tolerance=GPU_TOLERANCE):
    diff = max_abs_difference(params, gpu_reference[replicas])
    print(f"{label}: max |param - GPU reference| = {diff:.3g}")
    assert all_close(params, gpu_reference[replicas], **tolerance), f"max |diff| {diff:.3g}"


GPU_STRATEGIES = [n for n in strategies.names() if n != "mxnet-gluon"]
# DDP's knobs on 2 GPUs: each (SGD kernels, options, tolerance).
DDP_KNOBS = [
    ("fused", {}, GPU_TOLERANCE),
    ("foreach", {"gradient_as_bucket_view": True, "static_graph": True, "bucket_cap_mb": 100}, GPU_TOLERANCE),
    ("foreach", {"comm_hook": "fp16"}, FP16_HOOK_TOLERANCE),
    ("foreach", {"comm_hook": "bf16"}, BF16_HOOK_TOLERANCE),
]


def _two_gpus(replicas: int) -> tuple[int, ...]:
    return (0,) if replicas == 1 else (0, 1)


@pytest.fixture(scope="module")
def gpu_parameters():
    """Every strategy's step on 1 or 2 GPUs, then DDP's knobs on 2: the setups that share a worker
    (every one-process strategy; every torchrun one) run in one, as a sweep runs them."""
    setups = [(n, 1 if strategies.get(n).max_replicas == 1 else 2, {}) for n in GPU_STRATEGIES]
    setups += [("ddp", 2, options, {"optimizer_impl": optimizer_impl}) for optimizer_impl, options, _ in DDP_KNOBS]
    found = shared_workers(setups, _two_gpus)
    return dict(zip(GPU_STRATEGIES, found)), found[len(GPU_STRATEGIES):]


@needs_two_gpus
@pytest.mark.gpu
@pytest.mark.parametrize("strategy", GPU_STRATEGIES)
def test_gpu_strategies_match_the_reference(strategy, gpu_parameters, gpu_reference):
    replicas = 1 if strategies.get(strategy).max_replicas == 1 else 2
    _gpu_check(strategy, answered(gpu_parameters[0][strategy]), gpu_reference, replicas)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
@pytest.mark.parametrize("strategy, replicas, execution, optimizer_impl", [
    ("single", 1, "cuda-graph", "foreach"), ("single", 1, "cuda-graph", "fused"), ("ddp", 1, "cuda-graph", "fused"),
    ("ddp", 2, "cuda-graph", "fused"), ("single", 1, "compile", "foreach"),
])
def test_gpu_executions_keep_the_step(strategy, replicas, execution, optimizer_impl, gpu_reference):
    if replicas > cuda_gpus():
        pytest.skip(f"needs {replicas} CUDA GPUs")
    gpus = tuple(range(replicas))
    params = strategy_parameters(strategy, MODEL, GLOBAL_BATCH // replicas, gpus, replicas,
                                 optimizer_impl=optimizer_impl,
                                 execution=execution)
    label = f"{strategy} x{replicas} {execution} sgd={optimizer_impl}"
    if execution == "compile":
        initial = reference_parameters(MODEL, GLOBAL_BATCH, shards=replicas, steps=0)
        _compiled_check(label, params, gpu_reference[replicas], initial)
    else:
        _gpu_check(label, params, gpu_reference, replicas)


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
@pytest.mark.parametrize("strategy, replicas", [("single", 1), ("ddp", 1), ("ddp", 2)])
def test_gpu_compiled_steps_are_the_step_in_float64(strategy, replicas):
    # fp32 cannot tell a compiled DDP step from eager at 4 samples per shard (ReLUs on
    # rounding's knife edge: bench/checks/parity.py); float64 can, to 1e-6 of an update.
    if replicas > cuda_gpus():
        pytest.skip(f"needs {replicas} CUDA GPUs")
    reference64 = reference_parameters(MODEL, GLOBAL_BATCH, shards=replicas, device="cuda:0", dtype="float64")
    initial64 = reference_parameters(MODEL, GLOBAL_BATCH, shards=replicas, steps=0, dtype="float64")
    params = strategy_parameters(strategy, MODEL, GLOBAL_BATCH // replicas, tuple(range(replicas)), replicas,
                                 optimizer_impl="foreach", execution="compile", dtype="float64")
    _float64_check(f"{strategy} x{replicas} compile", params, reference64, initial64)


# channels_last convolves with other kernels than the plain layout: each replica's step rounds
# otherwise (every 2-GPU strategy in channels_last read 3.39e-4 from the plain reference on 2 H200s,
# tests/gpu-logs/h200x2-73d2120.log); the layout must still compute the same step within this.
CHANNELS_LAST_TOLERANCE = {"rtol": 1e-2, "atol": 1e-3}


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
@pytest.mark.parametrize("strategy, replicas", [("single", 1), ("ddp", 2), ("fsdp2", 2)])
def test_gpu_channels_last_keeps_the_step(strategy, replicas, gpu_reference):
    """The layout GPUs run by default (`--channels-last auto`), against the plain-layout reference."""
    if replicas > cuda_gpus():
        pytest.skip(f"needs {replicas} CUDA GPUs")
    params = strategy_parameters(strategy, MODEL, GLOBAL_BATCH // replicas, tuple(range(replicas)), replicas,
                                 channels_last="on")
    _gpu_check(f"{strategy} x{replicas} channels_last", params, gpu_reference, replicas, CHANNELS_LAST_TOLERANCE)


@needs_two_gpus
@pytest.mark.gpu
@pytest.mark.parametrize("index", range(len(DDP_KNOBS)),
                         ids=["-".join([s, *(f"{k}={v}" for k, v in o.items())]) for s, o, _ in DDP_KNOBS])
def test_gpu_ddp_knobs_keep_the_step(index, gpu_parameters, gpu_reference):
    optimizer_impl, options, tolerance = DDP_KNOBS[index]
    _gpu_check(f"ddp sgd={optimizer_impl} {options}", answered(gpu_parameters[1][index]), gpu_reference, 2, tolerance)


def test_a_failing_case_in_a_shared_worker_is_its_own_failure(monkeypatch):
    # Cases that share a worker run in one; a worker that fails runs its cases again one to a
    # worker, so that the failure is the failing case's and the others still answer.
    from bench.checks import parity

    calls = []

    def fake_run_parity(cases, timeout_s, dtype):
        calls.append([c.strategy for c in cases])
        if any(c.options_dict.get("comm_hook") == "powersgd" for c in cases):
            raise RuntimeError("ddp parity step failed")
        return [{"strategy": c.strategy} for c in cases]

    monkeypatch.setattr(parity, "run_parity", fake_run_parity)
    cases = [parity_case(n, MODEL, GLOBAL_BATCH // r, (), r, o) for n, r, o in CPU_STRATEGIES]
    found = parameters_by_worker(cases)
    failed = [i for i, f in enumerate(found) if isinstance(f, Exception)]
    assert [CPU_STRATEGIES[i][2] for i in failed] == [{"comm_hook": "powersgd"}]
    assert all(found[i] == {"strategy": CPU_STRATEGIES[i][0]} for i in range(len(found)) if i not in failed)
    # One worker per key (the one-process three: single and allreduce-scratch twice; the torchrun
    # five; spawn's ddp), the failed torchrun worker's five again one at a time right after it.
    assert [len(c) for c in calls] == [3, 5, 1, 1, 1, 1, 1, 1] and calls[2:7] == [[n] for n in calls[1]]


def test_cases_that_fail_only_together_fail_every_test_of_their_worker(monkeypatch):
    # A sweep runs them together: that they pass alone does not make the shared worker's failure go away.
    from bench.checks import parity

    def fake_run_parity(cases, timeout_s, dtype):
        if len(cases) > 1:
            raise RuntimeError("ddp parity step failed")
        return [{"strategy": c.strategy} for c in cases]

    monkeypatch.setattr(parity, "run_parity", fake_run_parity)
    found = parameters_by_worker([parity_case(n, MODEL, GLOBAL_BATCH // r, (), r, o) for n, r, o in CPU_STRATEGIES])
    spawn = [i for i, (_, _, o) in enumerate(CPU_STRATEGIES) if o.get("launcher") == "spawn"]
    assert [found[i] for i in spawn] == [{"strategy": "ddp"}]  # a worker of its own, which passed
    shared = [f for i, f in enumerate(found) if i not in spawn]
    assert all(isinstance(f, RuntimeError) and "each alone passed" in str(f) for f in shared), shared


def test_a_gpu_parity_case_runs_the_references_layout():
    """The reference steps in the plain layout; a GPU case left to `auto` ran channels_last (on for
    images on GPUs), and every 2-GPU strategy then read 3.39e-4 from the reference on 2 H200s
    (tests/gpu-logs/h200x2.log at 73d2120), beyond GPU_TOLERANCE."""
    from bench.checks.parity import parity_case

    for gpus in ((0,), (0, 1)):
        assert parity_case("ddp", MODEL, GLOBAL_BATCH // len(gpus), gpus, len(gpus)).channels_last is False
    assert parity_case("single", MODEL, GLOBAL_BATCH, (0,), 1, channels_last="on").channels_last is True


def test_the_sweeps_message_and_worker_carry_no_parity():
    """Test machinery left the product: no parity field rides in a case's spec, no parity mode in
    the sweep's worker spec or its worker; the parity check runs its own entry
    (bench/checks/parity_worker.py, strategies/gluon/parity.py) and its own section of the spec."""
    import dataclasses
    import inspect

    from bench.core.step import CaseSpec
    from bench.engine.launchers import LOCAL, TORCHRUN
    from bench.core.launch_spec import LaunchSpec
    from bench.run import worker, workers
    from bench.checks.parity import parity_entry

    assert not [f.name for f in dataclasses.fields(CaseSpec) if "parity" in f.name]
    assert "mode" not in inspect.signature(workers.worker_spec).parameters and not hasattr(worker, "parity_step")
    assert not [f.name for f in dataclasses.fields(LaunchSpec) if "parity" in f.name]
    assert "parity" not in inspect.signature(worker.configure_backends).parameters
    assert parity_entry(LOCAL) == parity_entry(TORCHRUN) == "bench.checks.parity_worker"
    assert TORCHRUN.command("s.json", parity_case("ddp", MODEL, 4, (), 2).placement, {},
                            module=parity_entry(TORCHRUN))[-2:] == ["bench.checks.parity_worker", "s.json"]
