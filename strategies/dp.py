"""torch.nn.DataParallel: one process, the batch scattered from device 0 every step."""
from torch import nn

from strategies import register
from strategies.common import FromDeviceZero


@register
class DataParallel(FromDeviceZero):
    name = "dp"
    summary = "nn.DataParallel (single process, threads per replica)"

    def make_forward(self, module, devices):
        return nn.DataParallel(module, device_ids=[d.index for d in devices], output_device=devices[0])
