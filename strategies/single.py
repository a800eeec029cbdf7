"""One device, no parallelism: the baseline every speed-up is measured against."""
from strategies import common, register
from strategies.base import Strategy, TrainStep


@register
class Single(Strategy):
    name = "single"
    summary = "one device, plain training loop (the baseline)"
    max_replicas = 1
    supports_apex = True

    def build(self, model, ctx):
        device = ctx.all_devices()[0]
        model = common.model_to(model, device, ctx)
        optimizer = common.make_optimizer(model.parameters(), ctx.sgd_impl)
        runtime = ctx.precision.runtime(device.type)
        model, optimizer = runtime.prepare(model, optimizer)

        def place(inputs, targets):
            return common.inputs_to(inputs, device, ctx), targets.to(device, non_blocking=True)

        run = common.standard_step(common.maybe_compile(model, ctx), device, optimizer, runtime)
        return TrainStep(model, [device], place, run)
