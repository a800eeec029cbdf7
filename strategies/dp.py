"""torch.nn.DataParallel: one process, the batch scattered from device 0 every step."""
from torch import nn

from strategies import common, register
from strategies.base import Strategy, TrainStep


@register
class DataParallel(Strategy):
    name = "dp"
    summary = "nn.DataParallel (single process, threads per replica)"
    needs_cuda = True
    replicas_in_threads = True
    supports_compile = False

    def build(self, model, ctx):
        devices = ctx.all_devices()
        model = common.model_to(model, devices[0], ctx)
        optimizer = common.make_optimizer(model.parameters())
        runtime = ctx.precision.runtime("cuda")
        wrapped = nn.DataParallel(
            common.AutocastForward(model, runtime), device_ids=[d.index for d in devices], output_device=devices[0]
        )

        def place(inputs, targets):
            # The whole batch goes to device 0; DataParallel scatters it inside forward.
            return common.inputs_to(inputs, devices[0], ctx), targets.to(devices[0], non_blocking=True)

        run = common.standard_step(wrapped, devices[0], optimizer, runtime)
        return TrainStep(model, devices, place, run)
