"""FSDP2: torch.distributed.fsdp.fully_shard on each of the model's blocks and at the root.

The blocks are what the workload declares (bench.workloads: ResNet's four residual stages,
a transformer's layers), or its repeated blocks where it declares none.
Parameters, gradients and optimiser state are sharded across ranks; each block's
parameters are all-gathered before its forward and backward, and gradients are
reduce-scattered. `reshard_after_forward` frees the gathered parameters after the forward
(ZeRO-3 behaviour) or keeps them until backward (ZeRO-2-like). `mixed_precision=off`
(default) keeps fp32 parameters under autocast, as every other strategy does;
`mixed_precision=auto` matches the precision axis with FSDP2's own policy: bf16/fp16
parameters for compute, fp32 gradient reduction. BatchNorm layers are then sharded on
their own with fp32 parameters: their running statistics stay fp32, and cuDNN's
BatchNorm refuses low-precision weights with fp32 statistics.
FSDP2 shards contiguous parameters only (`fully_shard` refuses a channels_last weight: "FSDP
does not support non-contiguous parameters yet", torch 2.11). With --channels-last the
parameters stay contiguous and every convolution reads a channels_last copy of its gathered
weight in each forward (autograd carries the gradient back to the contiguous parameter): on
one H100, bf16 at 2048 per GPU, a hand loop doing this ran FSDP2 2.17x faster than with
contiguous weights under channels_last activations (docs/findings.md). The row says so.
"""
from strategies import register
from strategies.base import Collective
from strategies.ddp import DDP


# DDP's launcher options; none of its bucket or hook options apply to sharding.
LAUNCHER_OPTIONS = ("launcher", "torchrun_args", "backend", "timeout_s")


@register
class FSDP2(DDP):
    name = "fsdp2"
    summary = "FSDP2 fully_shard per block (ResNet stage, transformer layer) and at the root (all state sharded)"
    shards = ("parameters", "gradients", "optimizer_state")
    # Each block's parameters gathered before its forward and again before its backward (with
    # reshard_after_forward, the default), its gradients reduce-scattered after its backward.
    sends = (Collective("all_gather", "parameters", times=2, when="per block, before forward and backward"),
             Collective("reduce_scatter", "gradients", when="per block, after its backward"))
    order, colour, reference = 24, "tab:olive", False
    apex_levels = ()
    apex_unavailable = ("fully_shard turns parameters into DTensor shards; Apex casts and copies plain "
                        "CUDA tensors (FSDP2's MixedPrecisionPolicy is its mixed precision)")
    executions = ("eager", "compile")
    options = {**{k: DDP.options[k] for k in LAUNCHER_OPTIONS}, "reshard_after_forward": True, "mixed_precision": "off"}
    search_options = {"reshard_after_forward": False}
    option_choices = {**{k: v for k, v in DDP.option_choices.items() if k in LAUNCHER_OPTIONS},
                      "mixed_precision": ("auto", "off")}

    def knobs_unavailable_reason(self, knobs):
        if knobs.get("optimizer_impl") == "fused" and knobs.get("optimizer", "sgd") == "sgd":
            # torch 2.11 on an H200: "aten._fused_sgd_.default does not have a sharding strategy registered".
            return "fused SGD cannot update FSDP2's DTensor shards (torch registers no sharding rule for _fused_sgd_)"
        return None

    def notes(self, case) -> str:
        if case.channels_last:
            return ("channels_last: parameters stay contiguous (fully_shard refuses channels_last ones); each "
                    "convolution reads a channels_last copy of its gathered weight in every forward")
        return ""

    def wrap(self, model, device, ctx):
        import torch
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        from bench.engine import training
        from bench.workloads.facts import shard_units

        mesh = init_device_mesh(device.type, (ctx.world_size,))
        dtype = ctx.precision.autocast_dtype
        policy = MixedPrecisionPolicy()
        if dtype and ctx.options["mixed_precision"] == "auto":
            policy = MixedPrecisionPolicy(param_dtype=getattr(torch, dtype), reduce_dtype=torch.float32)
        reshard = training.flag(ctx.options["reshard_after_forward"])
        if policy.param_dtype is not None:
            fp32 = MixedPrecisionPolicy(reduce_dtype=torch.float32)
            for module in model.modules():
                if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                    fully_shard(module, mesh=mesh, reshard_after_forward=reshard, mp_policy=fp32)
        for block in shard_units(model, ctx.spec.model):
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=policy)
        return model

    def build(self, model, ctx):
        # Shard first, then the optimiser over the sharded parameters.
        from strategies.base import TrainStep

        from bench.engine import training

        device = ctx.device()
        if ctx.channels_last:
            training.convolve_channels_last(model)
        model = self.wrap(model.to(device), device, ctx)  # contiguous parameters: see the module's note
        optimizer = training.make_optimizer(model.parameters(), ctx)
        runtime = ctx.precision.runtime(device.type)

        def place(inputs, targets):
            return training.inputs_to(inputs, device, ctx), targets.to(device, non_blocking=True)

        run = training.standard_step(training.compiled_loss(model, ctx), optimizer, runtime)
        return TrainStep(model, [device], place, run, optimizer)
