"""torch.nn.DataParallel: one process, the batch scattered from device 0 every step.

`FromDeviceZero` is the base of the whole DataParallel family (dp, dp-fn, dp-manual):
parameters and the whole batch on the first GPU, replicas made from them every step and
run in threads. A subclass only says how its forward spreads the batch (`make_forward`).
"""
from strategies import register
from strategies.base import Collective, Strategy, TrainStep


class FromDeviceZero(Strategy):
    needs_cuda = True
    replicas_in_threads = True
    # Every step: replicas made from device 0's parameters, their gradients summed back onto it.
    sends = (Collective("broadcast", "parameters", when="replicate(), before forward"),
             Collective("reduce", "gradients", when="onto device 0, in backward"))
    executions = ("eager",)  # replicas are rebuilt in new threads every step: nothing to compile or capture
    # Apex O1 patches torch functions process-wide, which the replicas' threads use too.
    # O2/O3 patch forward on the model object: replicate() copies that bound method into
    # every replica, which would then run device 0's model on every device's shard.
    apex_levels = ("O1",)
    apex_unavailable = ("Apex O2/O3 patch forward on the model object; DataParallel's replicas copy "
                        "that bound method and would all run device 0's model")

    def make_forward(self, module, devices):
        raise NotImplementedError

    def notes(self, case) -> str:
        if case.channels_last:
            return ("channels_last: replicas get their weights from broadcast_coalesced, contiguous on every GPU but "
                    "the first; each convolution reads channels_last copies of its weight and input in every forward")
        return ""

    def build(self, model, ctx):
        from bench.engine import training

        devices = ctx.all_devices()
        if ctx.channels_last:
            training.convolve_channels_last(model)  # replicas' weights arrive contiguous: see notes()
        model = training.model_to(model, devices[0], ctx)
        optimizer = training.make_optimizer(model.parameters(), ctx)
        runtime = ctx.precision.runtime("cuda")
        model, optimizer = runtime.prepare(model, optimizer)  # Apex: before the replicas are made
        forward = self.make_forward(training.AutocastForward(model, runtime), devices)

        def place(inputs, targets):
            # The whole batch goes to device 0; the forward scatters it.
            return training.inputs_to(inputs, devices[0], ctx), targets.to(devices[0], non_blocking=True)

        return TrainStep(model, devices, place, training.standard_step(forward, optimizer, runtime, ctx.criterion),
                         optimizer)


@register
class DataParallel(FromDeviceZero):
    name = "dp"
    summary = "nn.DataParallel (single process, threads per replica)"
    order, colour = 40, "tab:blue"

    def make_forward(self, module, devices):
        from torch import nn

        return nn.DataParallel(module, device_ids=[d.index for d in devices], output_device=devices[0])
