"""One device, no parallelism: the baseline every speed-up is measured against."""
from strategies import register
from strategies.base import Strategy, TrainStep


@register
class Single(Strategy):
    name = "single"
    summary = "one device, plain training loop (the baseline)"
    order, colour, baseline = 0, "black", True
    max_replicas = 1
    apex_levels = ("O1", "O2", "O3")
    executions = ("eager", "compile", "cuda-graph")

    def build(self, model, ctx):
        from bench.engine import training

        device = ctx.device()
        model = training.model_to(model, device, ctx)
        optimizer = training.make_optimizer(model.parameters(), ctx)
        runtime = ctx.precision.runtime(device.type)
        model, optimizer = runtime.prepare(model, optimizer)

        def place(inputs, targets):
            return training.inputs_to(inputs, device, ctx), targets.to(device, non_blocking=True)

        run = training.standard_step(training.compiled_loss(model, ctx), optimizer, runtime)
        return TrainStep(model, [device], place, run, optimizer)
