"""The precision runtime over several replicas (bench/core/precision.py): every loss is scaled
before any backward is queued, every optimiser's gradients are unscaled before any optimiser
steps, and the gradients and steps are those of each replica on its own."""
import pytest
import torch

from bench.checks.parity import max_abs_difference, reference_parameters, strategy_parameters, update_share
from bench.core.precision import get_precision
from tests.conftest import needs_two_gpus


def replicas_and_losses(seed=0):
    torch.manual_seed(seed)
    models = [torch.nn.Linear(4, 3) for _ in range(2)]
    for m in models[1:]:
        m.load_state_dict(models[0].state_dict())
    inputs = torch.randn(2, 5, 4)
    losses = [m(x).square().mean() for m, x in zip(models, inputs)]
    return models, losses


def test_every_loss_is_scaled_before_any_backward_runs():
    runtime = get_precision("amp-fp16").runtime("cpu")
    events = []
    scale = runtime.scaler.scale

    def recording_scale(outputs):
        events.append("scale")
        scaled = scale(outputs)
        for s in scaled if isinstance(scaled, list) else [scaled]:
            s.register_hook(lambda grad: events.append("backward"))
        return scaled

    runtime.scaler.scale = recording_scale
    models, losses = replicas_and_losses()
    runtime.backward_each(losses, [None, None])
    assert "backward" in events and "scale" in events
    assert events.index("backward") > max(i for i, e in enumerate(events) if e == "scale"), events


def test_backward_each_gives_each_loss_its_own_scaled_gradients():
    separate_runtime = get_precision("amp-fp16").runtime("cpu")
    separate, losses = replicas_and_losses()
    for loss in losses:
        separate_runtime.backward(loss)
    together, losses = replicas_and_losses()
    get_precision("amp-fp16").runtime("cpu").backward_each(losses, [None, None])
    for a, b in zip(separate, together):
        for pa, pb in zip(a.parameters(), b.parameters()):
            assert torch.equal(pa.grad, pb.grad)
    # Scaled: GradScaler's initial scale (65536) times the loss's own gradient.
    plain, losses = replicas_and_losses()
    losses[0].backward()
    assert torch.allclose(together[0].weight.grad, plain[0].weight.grad * 65536.0)


def test_backward_each_without_a_scaler_backpropagates_each_loss():
    together, losses = replicas_and_losses()
    get_precision("fp32").runtime("cpu").backward_each(losses, [None, None])
    plain, losses = replicas_and_losses()
    for loss in losses:
        loss.backward()
    for a, b in zip(plain, together):
        assert all(torch.equal(pa.grad, pb.grad) for pa, pb in zip(a.parameters(), b.parameters()))


def scaled_replicas(precision="amp-fp16", fused=False):
    runtime = get_precision(precision).runtime("cpu")
    models, losses = replicas_and_losses()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1, fused=fused or None) for m in models]
    runtime.backward_each(losses, optimizers)
    return runtime, models, optimizers


def test_every_optimizer_is_unscaled_before_any_steps():
    runtime, _, optimizers = scaled_replicas()
    unscaled_at_first_step = []

    def recording_step(step):
        def wrapped(*args, **kwargs):
            if not unscaled_at_first_step:
                states = runtime.scaler._per_optimizer_states
                unscaled_at_first_step.extend(states[id(o)]["stage"].name for o in optimizers)
            return step(*args, **kwargs)
        return wrapped

    for optimizer in optimizers:
        optimizer.step = recording_step(optimizer.step)
    runtime.step_each(optimizers)
    assert unscaled_at_first_step == ["UNSCALED", "UNSCALED"]


@pytest.mark.parametrize("fused", [False, True], ids=["foreach", "fused"])
def test_step_each_steps_as_each_optimizer_alone(fused):
    runtime, together, optimizers = scaled_replicas(fused=fused)
    runtime.step_each(optimizers)
    runtime.update()
    alone_runtime, alone, alone_optimizers = scaled_replicas(fused=fused)
    for optimizer in alone_optimizers:
        alone_runtime.step(optimizer)
    alone_runtime.update()
    for a, b in zip(alone, together):
        assert all(torch.equal(pa, pb) for pa, pb in zip(a.parameters(), b.parameters()))
    # The step is the unscaled one: the scale (65536) is off the gradients before lr 0.1 applies.
    _, plain, plain_optimizers = scaled_replicas("fp32", fused=fused)
    for optimizer in plain_optimizers:
        optimizer.step()
    assert torch.allclose(together[0].weight, plain[0].weight)
    assert runtime.scaler.get_scale() == alone_runtime.scaler.get_scale() == 65536.0


# --- the hand-written all-reduce's fp16 step is the fp16 step ----------------------
# allreduce-scratch is the one strategy that scales several devices' losses with one GradScaler
# (its replicas share one process). Its amp-fp16 step on 2 replicas against the fp32 step of the
# same two shards, as a share of each tensor's own update (bench/checks/parity.py update_share), is
# bounded as tests/test_apex.py bounds Apex: 3x `single`'s own amp-fp16 distance from fp32, plus a
# 2% floor (on the CPU: 20% against a bound of 75%). A replica whose gradients were left scaled
# or unscaled twice moves by 65536x.
FP16_FACTOR, FP16_FLOOR = 3.0, 0.02


@pytest.mark.parametrize("gpus", [
    pytest.param((), marks=pytest.mark.slow, id="cpu"),  # fp16 arithmetic emulated: 30 s on 2 cores
    pytest.param((0, 1), marks=[pytest.mark.gpu, needs_two_gpus], id="2-gpus"),
])
def test_hand_written_all_reduce_fp16_step_is_the_fp16_step(gpus):
    model, batch = "resnet18-small", 16
    device = "cuda:0" if gpus else "cpu"
    initial = reference_parameters(model, 2 * batch, shards=2, steps=0)
    single = strategy_parameters("single", model, 2 * batch, gpus[:1], 1, precision="amp-fp16",
                                 optimizer_impl="foreach")
    _, single_share = update_share(single, reference_parameters(model, 2 * batch, shards=1, device=device), initial)
    params = strategy_parameters("allreduce-scratch", model, batch, gpus, 2, precision="amp-fp16",
                                 optimizer_impl="foreach")
    assert max_abs_difference(params, initial) > 0, "amp-fp16 skipped its first step (GradScaler overflow)"
    name, share = update_share(params, reference_parameters(model, 2 * batch, shards=2, device=device), initial)
    bound = FP16_FACTOR * single_share + FP16_FLOOR
    print(f"allreduce-scratch amp-fp16: {share:.3%} of {name}'s update (bound {bound:.3%})")
    assert share <= bound, f"{name}: {share:.3%} of its update away from the fp32 step"
