"""The ResNet-18 workloads in MXNet Gluon, layer for layer the PyTorch models of
bench/workloads/__init__.py, with parameter paths that map onto PyTorch's names.

Imported only inside the MXNet environment (never by the harness).
"""
from __future__ import annotations

import numpy as np
from mxnet.gluon import nn

from strategies.gluon.names import gluon_name

# PyTorch momentum 0.1 (weight of the new batch) is Gluon momentum 0.9 (weight of the old).
_BN_ARGS = {"epsilon": 1e-5, "momentum": 0.9}


class BasicBlock(nn.HybridBlock):
    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        with self.name_scope():
            self.conv1 = nn.Conv2D(planes, 3, stride, 1, use_bias=False, in_channels=in_planes)
            self.bn1 = nn.BatchNorm(in_channels=planes, **_BN_ARGS)
            self.conv2 = nn.Conv2D(planes, 3, 1, 1, use_bias=False, in_channels=planes)
            self.bn2 = nn.BatchNorm(in_channels=planes, **_BN_ARGS)
            self.downsample = None
            if stride != 1 or in_planes != planes:
                self.downsample = nn.HybridSequential()
                self.downsample.add(nn.Conv2D(planes, 1, stride, use_bias=False, in_channels=in_planes),
                                    nn.BatchNorm(in_channels=planes, **_BN_ARGS))

    def hybrid_forward(self, F, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.HybridBlock):
    def __init__(self, in_channels: int, num_classes: int, small_input: bool):
        super().__init__()
        with self.name_scope():
            if small_input:
                self.conv1 = nn.Conv2D(64, 3, 1, 1, use_bias=False, in_channels=in_channels)
                self.maxpool = None
            else:
                self.conv1 = nn.Conv2D(64, 7, 2, 3, use_bias=False, in_channels=in_channels)
                self.maxpool = nn.MaxPool2D(3, 2, 1)
            self.bn1 = nn.BatchNorm(in_channels=64, **_BN_ARGS)
            stages, in_planes = [], 64
            for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                stage = nn.HybridSequential()
                stage.add(BasicBlock(in_planes, planes, stride), BasicBlock(planes, planes))
                stages.append(stage)
                in_planes = planes
            self.layer1, self.layer2, self.layer3, self.layer4 = stages
            self.fc = nn.Dense(num_classes, in_units=512)

    def hybrid_forward(self, F, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.maxpool is not None:
            x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(F.flatten(F.mean(x, axis=(2, 3), keepdims=True)))


def build(network: dict) -> ResNet18:
    """The network of a workload's `mxnet` arguments (bench/workloads: the one place they are)."""
    return ResNet18(network["in_channels"], network["num_classes"], network["small_input"])


def load_torch_weights(net: ResNet18, weights: dict[str, np.ndarray], ctx) -> None:
    """Initialise `net` on `ctx` with the PyTorch model's exported tensors."""
    params = net._collect_params_with_prefix()
    wanted = {gluon_name(k): v for k, v in weights.items() if not k.endswith("num_batches_tracked")}
    missing = set(params) - set(wanted)
    if missing:
        raise KeyError(f"no PyTorch tensor for Gluon parameters {sorted(missing)[:5]}")
    net.initialize(ctx=ctx)
    for name, param in params.items():
        param.set_data(wanted[name].astype(np.float32))


def n_parameters(net: ResNet18) -> int:
    """Trainable parameters (BatchNorm running statistics excluded, as in PyTorch)."""
    return sum(int(np.prod(p.shape)) for p in net.collect_params().values() if p.grad_req != "null")
