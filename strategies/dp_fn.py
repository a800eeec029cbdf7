"""torch.nn.parallel.data_parallel: DataParallel as a function call, no wrapper module."""
from torch.nn.parallel import data_parallel

from strategies import common, register
from strategies.base import Strategy, TrainStep


@register
class DataParallelFunctional(Strategy):
    name = "dp-fn"
    summary = "torch.nn.parallel.data_parallel (functional form)"
    needs_cuda = True
    replicas_in_threads = True
    supports_compile = False

    def build(self, model, ctx):
        devices = ctx.all_devices()
        ids = [d.index for d in devices]
        model = common.model_to(model, devices[0], ctx)
        optimizer = common.make_optimizer(model.parameters())
        runtime = ctx.precision.runtime("cuda")
        module = common.AutocastForward(model, runtime)

        def forward(inputs):
            return data_parallel(module, inputs, device_ids=ids, output_device=ids[0])

        def place(inputs, targets):
            return common.inputs_to(inputs, devices[0], ctx), targets.to(devices[0], non_blocking=True)

        run = common.standard_step(forward, devices[0], optimizer, runtime)
        return TrainStep(model, devices, place, run)
