"""Data parallelism from zero: the classic hand-written all-reduce.

Split the batch, run one replica per device, sum the gradients onto the first device,
broadcast the sum back, and let every replica take the same optimiser step. The
replicas are driven from one thread, every forward before any backward; CUDA's asynchronous
launches let the devices work at the same time.
"""
from strategies import register
from strategies.base import Collective, Strategy, TrainStep


def grads_of(replicas) -> list[list]:
    return [[p.grad for p in r.parameters()] for r in replicas]


def allreduce_mean(per_replica: list[list]) -> None:
    """Average tensors in place across replicas: reduce onto replica 0, then broadcast."""
    n = len(per_replica)
    for tensors in zip(*per_replica):
        total = tensors[0]
        for other in tensors[1:]:
            total.add_(other.to(total.device, non_blocking=True))
        total.div_(n)
        for other in tensors[1:]:
            other.copy_(total, non_blocking=True)


@register
class AllreduceScratch(Strategy):
    name = "allreduce-scratch"
    summary = "hand-written all-reduce: per-device replicas, sum grads, broadcast"
    order, colour = 30, "tab:purple"
    executions = ("eager", "compile")  # each replica's forward and loss compiled (training.compiled_loss)
    sends = (Collective("reduce", "gradients", when="onto the first device"),
             Collective("broadcast", "gradients", when="the sum, back to every replica"))
    apex_unavailable = ("one optimiser per replica, each with its own amp.scale_loss: Apex O2 unscales "
                        "into fp32 masters that the hand-written all-reduce does not see, and its overflow "
                        "skip is per optimiser, so replicas could part")
    options = {"coalesce": False}  # True: one flat gradient buffer per replica instead of one copy per tensor
    search_options = {"coalesce": True}

    def build(self, model, ctx):
        import copy

        import torch
        from torch.profiler import record_function

        from bench.engine import training as common

        devices = ctx.all_devices()
        n = len(devices)
        replicas = [common.model_to(copy.deepcopy(model), d, ctx) for d in devices]
        optimizers = [common.make_optimizer(r.parameters(), ctx) for r in replicas]
        runtime = ctx.precision.runtime(devices[0].type)
        forwards = [common.compiled_loss(r, ctx) for r in replicas]  # each replica's model and loss
        coalesce = common.flag(ctx.options["coalesce"])

        def place(inputs, targets):
            return [
                (common.inputs_to(common.shard(inputs, n, i), d, ctx),
                 common.shard(targets, n, i).to(d, non_blocking=True))
                for i, d in enumerate(devices)
            ]

        def run(shards):
            # Phases labelled as in training.standard_step (the step anatomy reads them). Every
            # replica's forward is queued before any backward, so that a loss scale (fp16) reaches
            # each device without waiting for another device's backward (runtime.backward_each).
            losses = []
            for forward, (inputs, targets) in zip(forwards, shards):
                with record_function("parabench.forward"), runtime.autocast():
                    losses.append(forward(inputs, targets))  # mean over this shard
            with record_function("parabench.backward"):
                runtime.backward_each(losses, optimizers)
            with record_function("parabench.allreduce"):
                all_reduce(grads_of(replicas))
            with record_function("parabench.optimizer"):
                runtime.step_each(optimizers)
                runtime.update()
                for optimizer in optimizers:
                    optimizer.zero_grad(set_to_none=True)

        def all_reduce(grads):
            if coalesce:
                flats = [[torch.cat([g.reshape(-1) for g in gs])] for gs in grads]
                allreduce_mean(flats)
                for gs, (flat,) in zip(grads, flats):
                    offset = 0
                    for g in gs:
                        g.copy_(flat[offset : offset + g.numel()].view_as(g))
                        offset += g.numel()
            else:
                allreduce_mean(grads)

        return TrainStep(replicas[0], devices, place, run, optimizers[0])
