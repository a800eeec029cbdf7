"""Knobs in effect, not only recorded: with --channels-last every convolution of the step (forward
and backward) must receive channels_last input and weight, in every strategy that runs on this
machine, FSDP2 included (it keeps contiguous parameters and convolves with a channels_last copy).
A strategy that cannot apply a knob declines it with a reason (a skipped row), or says in the
row's notes what it did instead."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

import strategies
from bench.cases.case import Case, settings
from bench.core.placement import Placement
from bench.core.launch_spec import LaunchSpec
from bench.run.worker import Job, build_step, configure_backends

CONVOLUTIONS = {torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default}
CPU_STRATEGIES = [n for n in strategies.names() if not strategies.get(n).needs_cuda and n != "mxnet-gluon"]


def layout(t) -> str:
    """channels_last, contiguous, or either (one channel, or a 1x1 kernel: both layouts are the same)."""
    cl, plain = t.is_contiguous(memory_format=torch.channels_last), t.is_contiguous()
    return "either" if cl and plain else "channels_last" if cl else "contiguous" if plain else "strided"


class ConvolutionLayouts(TorchDispatchMode):
    """The layouts of (input, weight) of every convolution this thread runs."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in CONVOLUTIONS:
            # forward: (input, weight, ...); backward: (grad_output, input, weight, ...)
            inputs, weight = (args[0], args[1]) if func is torch.ops.aten.convolution.default else (args[1], args[2])
            self.seen.append((func.__name__, layout(inputs), layout(weight)))
        return func(*args, **(kwargs or {}))


@pytest.fixture(scope="module")
def world_of_one():
    """A gloo process group of one, as a sweep's DDP-style worker has (here, in this process)."""
    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def layouts(strategy: str, channels_last: bool) -> list:
    case = Case.make(strategy, "fp32", "resnet18-small", Placement((), 1), 2, "eager",
                     settings(warmup=0, steps=1, trials=1, channels_last=channels_last)).spec()
    configure_backends(case)
    step, run = build_step(Job(LaunchSpec.local("local"), 0, 1, 0), case)
    with ConvolutionLayouts() as mode:
        run()
    return mode.seen


@pytest.mark.parametrize("strategy", CPU_STRATEGIES)
def test_channels_last_reaches_every_convolution(strategy, world_of_one):
    seen = layouts(strategy, channels_last=True)
    assert len(seen) >= 2 * 20  # resnet18-small: 20 convolutions, forward and backward
    wrong = [s for s in seen if not set(s[1:]) <= {"channels_last", "either"}]
    assert not wrong, f"{strategy}: {len(wrong)} of {len(seen)} convolutions not channels_last, e.g. {wrong[:3]}"


def test_without_channels_last_the_convolutions_stay_contiguous(world_of_one):
    """The check above can fail: the same step without the knob is seen as contiguous."""
    seen = layouts("fsdp2", channels_last=False)
    assert seen and all(set(s[1:]) <= {"contiguous", "either"} for s in seen)
    assert sum("contiguous" in s for s in seen) >= 30


def test_fsdp2_says_what_it_did_with_channels_last():
    case = Case.make("fsdp2", "fp32", "resnet18-small", Placement((), 2), 2, "eager", settings(channels_last=True))
    assert "channels_last copy" in strategies.get("fsdp2").notes(case)
    assert strategies.get("ddp").notes(case) == ""
    plain = Case.make("fsdp2", "fp32", "resnet18-small", Placement((), 2), 2, "eager", settings())
    assert strategies.get("fsdp2").notes(plain) == ""


class ReplicaLayouts:
    """The layouts of (input, weight) each convolution hands cuDNN, from every thread:
    DataParallel's replicas run in threads of their own, which a dispatch mode (per thread)
    does not see, so torch.nn.functional.conv2d (what Conv2d calls) is wrapped instead."""

    def __enter__(self):
        import threading

        import torch.nn.functional as F

        self.seen, lock, self.original = [], threading.Lock(), F.conv2d

        def conv2d(inputs, weight, *args, **kwargs):
            with lock:
                self.seen.append((layout(inputs), layout(weight), str(weight.device)))
            return self.original(inputs, weight, *args, **kwargs)

        F.conv2d = conv2d
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F

        F.conv2d = self.original


THREADED = [n for n in strategies.names() if strategies.get(n).replicas_in_threads]


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [1, 2])
@pytest.mark.parametrize("strategy", THREADED)
def test_gpu_replicas_in_threads_keep_channels_last(strategy, gpus):
    """DataParallel and its forms copy the weights to every GPU each step (broadcast_coalesced):
    every replica's convolutions must still get channels_last weights and inputs."""
    from tests.conftest import cuda_gpus

    if cuda_gpus() < gpus:
        pytest.skip(f"needs {gpus} CUDA GPU(s)")
    case = Case.make(strategy, "amp-bf16", "resnet18-small", Placement(tuple(range(gpus)), gpus), 8, "eager",
                     settings(warmup=0, steps=1, trials=1, channels_last=True)).spec()
    configure_backends(case)
    step, run = build_step(Job(LaunchSpec.local("local"), 0, 1, 0), case)
    with ReplicaLayouts() as replicas:
        run()
    assert {device for *_, device in replicas.seen} == {f"cuda:{g}" for g in range(gpus)}
    wrong = [s for s in replicas.seen if not set(s[:2]) <= {"channels_last", "either"}]
    assert not wrong, f"{strategy} x{gpus}: {len(wrong)} of {len(replicas.seen)} replica convolutions, e.g. {wrong[:3]}"


@pytest.mark.parametrize("convolve", [True, False])
def test_a_replica_of_a_convolution_hands_cudnn_channels_last_operands(convolve):
    """What DataParallel's replicate() does to a Conv2d, on the CPU: a shallow copy of the module
    (its class kept) whose weight is set to a contiguous tensor (broadcast_coalesced's). With
    convolve_channels_last the copy still convolves channels_last weight and input; without, it
    convolves what it was given (the check can fail)."""
    from bench.engine import training

    conv = torch.nn.Conv2d(8, 16, 3)
    if convolve:
        training.convolve_channels_last(conv)
    replica = conv._replicate_for_data_parallel()
    # Plain tensors, contiguous, as replicate() sets broadcast_coalesced's copies.
    replica.weight, replica.bias = conv.weight.detach().clone(), conv.bias.detach().clone()
    with ReplicaLayouts() as replicas:
        replica(torch.randn(2, 8, 6, 6))
    expected = "channels_last" if convolve else "contiguous"
    assert replicas.seen == [(expected, expected, "cpu")]
