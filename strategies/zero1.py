"""ZeRO stage 1: DDP with torch.distributed.optim.ZeroRedundancyOptimizer.

Gradients are all-reduced by DDP as usual; the optimiser state (SGD's momentum, AdamW's two
moments) is sharded, each rank updates the parameters it owns and broadcasts them. For resnet18
the momentum is 45 MB in fp32, so the saving per GPU is small: the report shows it; for
gpt2-1.5b AdamW's moments are 12.5 GB.
"""
from strategies import register
from strategies.base import Collective
from strategies.ddp import DDP


@register
class Zero1(DDP):
    name = "zero1"
    summary = "DDP + ZeroRedundancyOptimizer (optimiser state sharded across ranks)"
    shards = ("optimizer_state",)
    sends = (Collective("all_reduce", "gradients", when="in buckets, during backward"),
             Collective("broadcast", "parameters", when="after the step, each rank its own partition"))
    order, colour, reference = 22, "tab:brown", False
    apex_levels = ()
    apex_unavailable = ("ZeroRedundancyOptimizer partitions the parameters when it is built; Apex swaps "
                        "optimiser parameters (O2 masters) and patches step and zero_grad on a plain optimiser")
    executions = ("eager", "compile")  # the step broadcasts parameters between ranks from Python

    def make_optimizer(self, model, ctx):
        from torch.distributed.optim import ZeroRedundancyOptimizer

        from bench.engine import training

        name = ctx.optimizer or "sgd"
        return ZeroRedundancyOptimizer(training.parameter_groups(name, model.parameters()),
                                       optimizer_class=training.optimizer_class(name),
                                       **training.optimizer_arguments(ctx))
