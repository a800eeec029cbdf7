"""torch.nn.parallel.data_parallel: DataParallel as a function call, no wrapper module."""
from strategies import register
from strategies.dp import FromDeviceZero


@register
class DataParallelFunctional(FromDeviceZero):
    name = "dp-fn"
    summary = "torch.nn.parallel.data_parallel (functional form)"
    order, colour = 41, "tab:cyan"

    def make_forward(self, module, devices):
        from torch.nn.parallel import data_parallel

        ids = [d.index for d in devices]
        return lambda inputs: data_parallel(module, inputs, device_ids=ids, output_device=ids[0])
