"""The reference workload: ResNet-18 in two sizes (the network is in _resnet.py).

`resnet18` is the standard ImageNet network (3x224x224 input, 7x7 stride-2 stem,
max-pool, 1000 classes, 11,689,512 parameters). `resnet18-small` keeps the same four
stages of basic blocks but takes 1x28x28 input through a 3x3 stride-1 stem with no
max-pool and ends in 10 classes (11,172,810 parameters).
"""
from __future__ import annotations

from bench.workloads import Workload, register
from bench.workloads.data import Images


def resnet18(in_channels: int, num_classes: int, small_input: bool, width: int = 64):
    """A factory of the ResNet-18 family (width 64 is ResNet-18; smaller widths for quick checks)."""
    def build():
        from bench.workloads._resnet import ResNet18

        return ResNet18(in_channels, num_classes, small_input, width)

    return build


register(Workload("resnet18-small", Images((1, 28, 28), 10), resnet18(1, 10, True),
                  summary="ResNet-18 for 1x28x28 input: 3x3 stride-1 stem, no max-pool, 10 classes",
                  mxnet={"in_channels": 1, "num_classes": 10, "small_input": True}, order=10))
register(Workload("resnet18", Images((3, 224, 224), 1000), resnet18(3, 1000, False),
                  summary="the standard ImageNet ResNet-18, 3x224x224 input, 1000 classes",
                  mxnet={"in_channels": 3, "num_classes": 1000, "small_input": False}, order=10))
