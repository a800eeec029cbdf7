"""DataParallel written out: replicate, scatter, parallel_apply, gather, every step."""
from torch.nn.parallel import gather, parallel_apply, replicate, scatter

from strategies import common, register
from strategies.base import Strategy, TrainStep


@register
class DataParallelManual(Strategy):
    name = "dp-manual"
    summary = "replicate / scatter / parallel_apply / gather, written out"
    needs_cuda = True
    replicas_in_threads = True
    supports_compile = False

    def build(self, model, ctx):
        devices = ctx.all_devices()
        model = common.model_to(model, devices[0], ctx)
        optimizer = common.make_optimizer(model.parameters())
        runtime = ctx.precision.runtime("cuda")
        module = common.AutocastForward(model, runtime)

        def forward(inputs):
            replicas = replicate(module, devices)  # parameters broadcast from device 0
            shards = scatter(inputs, devices)  # equal slices of the batch, one per device
            outputs = parallel_apply(replicas[: len(shards)], [(s,) for s in shards])  # one thread each
            return gather(outputs, devices[0])  # logits back on device 0 for the loss

        def place(inputs, targets):
            return common.inputs_to(inputs, devices[0], ctx), targets.to(devices[0], non_blocking=True)

        run = common.standard_step(forward, devices[0], optimizer, runtime)
        return TrainStep(model, devices, place, run)
