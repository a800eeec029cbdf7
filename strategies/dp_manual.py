"""DataParallel written out: replicate, scatter, parallel_apply, gather, every step."""
from strategies import register
from strategies.dp import FromDeviceZero


@register
class DataParallelManual(FromDeviceZero):
    name = "dp-manual"
    summary = "replicate / scatter / parallel_apply / gather, written out"
    order, colour = 42, "tab:green"

    def make_forward(self, module, devices):
        from torch.nn.parallel import gather, parallel_apply, replicate, scatter

        def forward(inputs):
            replicas = replicate(module, devices)  # parameters broadcast from device 0
            shards = scatter(inputs, devices)  # equal slices of the batch, one per device
            outputs = parallel_apply(replicas[: len(shards)], [(s,) for s in shards])  # one thread each
            return gather(outputs, devices[0])  # logits back on device 0 for the loss

        return forward
