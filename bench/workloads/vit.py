"""The workload where sharding matters: a ViT-Large-sized Vision Transformer on the
synthetic 3x224x224 images (patch 16, width 1024, 24 blocks, 16 heads, MLP 4096, 1000
classes: 304,326,632 parameters; the network is in _vit.py).

Its model state in fp32 (weights, gradients, SGD momentum: 3 x 1.13 GiB) is what DDP
replicates on every GPU and FSDP2 (all of it) and ZeRO-1 (the momentum) split across
them, so the memory section of the report and the largest batch each strategy fits show
what sharding buys and costs. FSDP2 shards each TransformerBlock on its own (`blocks`).

`tiny` is the same builder scaled down (3x32x32, width 64, 2 blocks): the CPU tests run
it as `bench.workloads.vit:tiny`, exactly as a user's own factory is named.
"""
from __future__ import annotations

from bench.workloads import Workload, register
from bench.workloads.data import Images


def vision_transformer(**kwargs):
    """A factory of the ViT family (bench.workloads._vit.VisionTransformer's arguments)."""
    def build():
        from bench.workloads._vit import VisionTransformer

        return VisionTransformer(**kwargs)

    return build


register(Workload("vit-large", Images((3, 224, 224), 1000), vision_transformer(),
                  summary="ViT-Large/16 (304 M parameters): 24 pre-norm blocks, width 1024, 16 heads, 3x224x224",
                  blocks=("TransformerBlock",), order=20))


def tiny() -> dict:
    """ViT-Large's builder at test size: 3x32x32, patch 8, width 64, 2 blocks, 10 classes."""
    return {"model": vision_transformer(image_size=32, patch=8, num_classes=10, width=64, depth=2, heads=4)(),
            "input_shape": (3, 32, 32), "num_classes": 10, "blocks": ("TransformerBlock",)}
