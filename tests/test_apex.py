"""NVIDIA Apex amp (apex-O1/O2/O3): every level trains on the strategies that can run it and
says why on the others; its step is the fp16 mixed-precision step that torch.amp takes.

CPU: the gradient-clearing path Apex O2/O3 need (their zero_grad takes no set_to_none),
the master weights the parity step reads, and the strategies' reasons. GPU (one device,
Apex importable, e.g. PYTHONPATH=/tmp/apex; shared/vendor/README.md): one step of each level
through the worker, as a sweep runs it, against amp-fp16.
"""
import types

import pytest
import torch

import strategies
from bench.checks.parity import max_abs_difference, reference_parameters, strategy_parameters, update_share
from bench.core.placement import Placement
from bench.core.precision import PRECISIONS, get_precision
from bench.engine.training import grad_clearer, trained_parameters
from tests.conftest import cuda_gpus


def apex_zero_grad_optimizer(params):
    """An SGD whose zero_grad is replaced the way Apex O2 replaces it
    (apex/amp/_process_optimizer.py: `def new_zero_grad(self)`, bound with types.MethodType)."""
    optimizer = torch.optim.SGD(params, lr=0.1)

    def new_zero_grad(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.detach_()
                    p.grad.zero_()

    optimizer.zero_grad = types.MethodType(new_zero_grad, optimizer)
    return optimizer


def test_gradients_clear_with_a_zero_grad_that_takes_no_set_to_none():
    model = torch.nn.Linear(3, 2)
    optimizer = apex_zero_grad_optimizer(model.parameters())
    with pytest.raises(TypeError, match="set_to_none"):
        optimizer.zero_grad(set_to_none=True)  # what the step used to call: Apex O2's TypeError
    model(torch.ones(1, 3)).sum().backward()
    grad_clearer(optimizer)()
    assert all(p.grad is not None and not p.grad.any() for p in model.parameters())


def test_gradients_are_set_to_none_where_zero_grad_takes_it():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(1, 3)).sum().backward()
    grad_clearer(optimizer)()
    assert all(p.grad is None for p in model.parameters())


def test_the_trained_parameters_are_apex_masters_where_it_keeps_them():
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert trained_parameters(model, optimizer) == dict(model.named_parameters())
    # O2's stash after its lazy initialisation: fp16 model parameters paired with fp32 masters.
    masters = [p.detach().double() for p in model.parameters()]
    optimizer._amp_stash = types.SimpleNamespace(lazy_init_called=True, all_fp16_params=list(model.parameters()),
                                                 all_fp32_from_fp16_params=masters)
    got = trained_parameters(model, optimizer)
    assert got["weight"] is masters[0] and got["bias"] is masters[1]


@pytest.mark.parametrize("strategy, level, runs", [
    ("single", "O1", True), ("single", "O2", True), ("single", "O3", False),
    ("ddp", "O1", True), ("ddp", "O2", True), ("ddp", "O3", False),
    ("dp", "O1", True), ("dp", "O2", False), ("dp-manual", "O3", False),
    ("zero1", "O1", False), ("fsdp2", "O2", False), ("allreduce-scratch", "O1", False),
])
def test_each_strategy_runs_apex_or_says_why_not(strategy, level, runs):
    precision = get_precision(f"apex-{level}")
    reason = strategies.get(strategy).unavailable_reason(Placement((0,), 1), precision)
    if runs:
        # On a GPU host with Apex: nothing in the way; elsewhere only Apex's own absence.
        assert reason is None or reason == precision.unavailable_reason("cuda"), reason
    else:
        assert reason and reason.startswith(f"apex-{level}: "), reason
    graph = strategies.get("single").unavailable_reason(Placement((0,), 1), precision, "cuda-graph")
    assert graph and ("overflow" in graph or graph == precision.unavailable_reason("cuda"))


def test_apex_levels_are_on_the_precision_axis():
    assert [p for p in PRECISIONS if p.startswith("apex-")] == ["apex-O1", "apex-O2", "apex-O3"]


# --- on a GPU ------------------------------------------------------------------------
def apex_missing() -> str | None:
    return get_precision("apex-O1").unavailable_reason("cuda") if cuda_gpus() else "needs a CUDA GPU"


needs_apex_gpu = pytest.mark.skipif(apex_missing() is not None, reason=str(apex_missing()))
MODEL, BATCH = "resnet18-small", 32

# Tolerance. apex-O1/O2/O3 and amp-fp16 are fp16 roundings of the same step in different
# places (O1 casts per function as autocast does; O2 keeps BatchNorm and master weights
# in fp32; O3 runs BatchNorm in fp16 too). So Apex's distance to amp-fp16, per tensor as a
# share of the tensor's own one-step update (update_share), is bounded by the two steps'
# distances to the exact (fp32) step: at most FACTOR x amp-fp16's own distance, plus a
# floor of 2% (the share fp32 rounding alone reaches on knife-edge data: bench/checks/parity.py).
# A wrong step is far outside: unscaled gradients (65536x), a skipped step (100%), summed
# instead of averaged shards (100%).
FACTOR = {"O1": 3.0, "O2": 3.0, "O3": 10.0}
FLOOR, CEILING = 0.02, 0.5


@pytest.fixture(scope="module")
def amp_fp16():
    params = strategy_parameters("single", MODEL, BATCH, (0,), 1, precision="amp-fp16", optimizer_impl="foreach")
    reference = reference_parameters(MODEL, BATCH, shards=1, device="cuda:0")
    initial = reference_parameters(MODEL, BATCH, shards=1, steps=0)
    name, share = update_share(params, reference, initial)
    print(f"amp-fp16 against the fp32 step: {share:.3%} of {name}'s update")
    assert max_abs_difference(params, initial) > 0, "amp-fp16 skipped its first step (GradScaler overflow)"
    return params, initial, share


@needs_apex_gpu
@pytest.mark.gpu
@pytest.mark.parametrize("strategy", ["single", "ddp", "dp"])
@pytest.mark.parametrize("level", ["O1", "O2", "O3"])
def test_gpu_apex_step_matches_amp_fp16(strategy, level, amp_fp16):
    precision = f"apex-{level}"
    if strategies.get(strategy).unavailable_reason(Placement((0,), 1), get_precision(precision)):
        pytest.skip(strategies.get(strategy).unavailable_reason(Placement((0,), 1), get_precision(precision)))
    reference, initial, amp_share = amp_fp16
    params = strategy_parameters(strategy, MODEL, BATCH, (0,), 1, precision=precision, optimizer_impl="foreach")
    assert all(v.dtype == torch.float32 and v.isfinite().all() for v in params.values())
    assert max_abs_difference(params, initial) > 0, f"{precision} did not move the parameters (a skipped step)"
    name, share = update_share(params, reference, initial)
    bound = min(CEILING, FACTOR[level] * amp_share + FLOOR)
    print(f"{strategy} {precision}: {share:.3%} of {name}'s update away from amp-fp16 (bound {bound:.3%})")
    assert share <= bound, f"{name}: {share:.3%} of its update away from amp-fp16"


@needs_apex_gpu
@pytest.mark.gpu
def test_gpu_apex_o1_leaves_the_worker_unpatched():
    # An apex-O1 case patches torch functions process-wide; the fp32 case after it in the
    # same worker must train exactly as it does alone.
    from bench.checks.parity import parity_case, run_parity

    fp32 = parity_case("single", MODEL, BATCH, (0,), 1, optimizer_impl="foreach")
    alone = run_parity([fp32])[0]
    after = run_parity([parity_case("single", MODEL, BATCH, (0,), 1, optimizer_impl="foreach",
                                    precision="apex-O1"), fp32])[1]
    assert max_abs_difference(alone, after) == 0.0
