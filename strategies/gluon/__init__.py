"""MXNet Gluon: split_and_load over contexts, autograd.record per context, and a
gluon.Trainer whose kvstore sums the gradients and updates the weights.

MXNet 1.9.1 (its last release) needs numpy < 1.24, so it lives in an environment of its
own (`make setup-mxnet`, .venv-mxnet/); the worker runs in that interpreter and the
parent never imports mxnet. Initial weights and the synthetic batch are exported from
the PyTorch model, so both frameworks train the same network on the same data.
"""
from __future__ import annotations

import os
from pathlib import Path

from bench.core.imports import ROOT
from strategies import register
from strategies.base import Collective, Strategy

# The 1.9.1 CUDA wheels (newest: mxnet-cu117) carry GPU code up to sm_86 and no PTX.
MAX_COMPUTE_CAPABILITY = (8, 6)


def mxnet_python() -> Path:
    return Path(os.environ.get("PARABENCH_MXNET_PYTHON", ROOT / ".venv-mxnet" / "bin" / "python"))


def installed_wheel() -> str | None:
    """'mxnet' or 'mxnet-cu117', as `make setup-mxnet` recorded it; None if not installed."""
    marker = mxnet_python().parent.parent / "parabench-wheel.txt"
    if not mxnet_python().exists():
        return None
    return marker.read_text().strip() if marker.exists() else "mxnet"


def compute_capabilities(gpus) -> dict[int, tuple[str, tuple[int, int]]]:
    """{ordinal: (name, (major, minor))} from NVML, without a CUDA context."""
    import pynvml

    pynvml.nvmlInit()
    found = {}
    for i in gpus:
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        name = pynvml.nvmlDeviceGetName(handle)
        found[i] = (name.decode() if isinstance(name, bytes) else name,
                    pynvml.nvmlDeviceGetCudaComputeCapability(handle))
    return found


@register
class MXNetGluon(Strategy):
    name = "mxnet-gluon"
    summary = "MXNet Gluon split_and_load + Trainer kvstore (own environment; CPU contexts without GPUs)"
    order, colour = 60, "tab:orange"
    # kvstore=device: the contexts' gradients summed on a device, the weights pulled back to each.
    sends = (Collective("reduce", "gradients", when="the kvstore's push"),
             Collective("broadcast", "parameters", when="the kvstore's pull"))
    executions = ("eager",)
    options = {"kvstore": "device"}
    option_choices = {"kvstore": ("device", "local")}

    def launcher(self, options):
        from bench.engine.launchers import Interpreter

        return Interpreter("mxnet", mxnet_python, "strategies.gluon.worker")

    def unavailable_reason(self, placement, precision, execution="eager", options=None):
        if execution not in self.executions:
            return f"{self.name} supports --execution {', '.join(self.executions)}, not {execution}"
        if placement.gpus:
            # The GPU first: on Hopper no MXNet wheel can run, whichever is installed.
            try:
                caps = compute_capabilities(placement.gpus)
            except Exception as exc:  # noqa: BLE001 - no NVML: cannot tell, so do not launch
                return f"cannot read the GPUs' compute capability ({exc})"
            for name, cap in caps.values():
                if tuple(cap) > MAX_COMPUTE_CAPABILITY:
                    return (f"{name} (compute capability {cap[0]}.{cap[1]}) is newer than MXNet runs: "
                            "mxnet-cu117 1.9.1, the newest MXNet CUDA wheel, has GPU code for sm_50-86 only (no PTX)")
        if precision.name not in ("fp32", "amp-fp16"):
            return f"MXNet runs fp32 and amp-fp16 (mxnet.contrib.amp), not {precision.name}"
        wheel = installed_wheel()
        if wheel is None:
            return "the MXNet environment is not installed (.venv-mxnet): run `make setup-mxnet`"
        if placement.gpus and wheel == "mxnet":
            return "the MXNet environment has the CPU wheel: remove .venv-mxnet and run `make setup-mxnet` on this host"
        if not placement.gpus and precision.name == "amp-fp16":
            return "mxnet.contrib.amp float16 needs GPU contexts"
        return None

    def workload_unavailable_reason(self, model):
        from bench import workloads

        declared = workloads.builtin(model)
        if declared is None or declared.mxnet is None:
            reference = ", ".join(n for n in workloads.names() if workloads.builtin(n).mxnet is not None)
            return f"MXNet has only the reference workload ({reference})"
        return None

    def prepare_launch(self, spec, workdir: str) -> dict:
        """Export the PyTorch model's initial weights and the case's synthetic batch for the
        worker (into the worker's folder, removed with it)."""
        import numpy as np

        from bench.workloads import get_workload
        from bench.workloads.facts import training_flops_per_item

        workload = get_workload(spec.model)  # one with an MXNet network (workload_unavailable_reason)
        stem = os.path.join(workdir, f"mx-{abs(hash(spec.key))}")
        weights = {k: v.numpy() for k, v in workload.build(seed=spec.seed).state_dict().items()}
        inputs, targets = workload.synthetic_batch(spec.global_batch, seed=spec.seed)
        extra = {"network": workload.mxnet, "weights_file": f"{stem}.weights.npz", "data_file": f"{stem}.data.npz",
                 "flops_per_item": training_flops_per_item(spec.model)}
        np.savez(extra["weights_file"], **weights)
        np.savez(extra["data_file"], inputs=inputs.numpy(), targets=targets.numpy())
        return extra

    def resolve_knob(self, knob, requested, on_gpu, execution, data=None):
        if knob.name == "optimizer_impl":
            return "gluon-sgd"  # mxnet's own optimiser, whatever --optimizer-impl asks for
        return super().resolve_knob(knob, requested, on_gpu, execution, data)

    def knobs_unavailable_reason(self, knobs):
        if knobs.get("optimizer", "sgd") != "sgd":
            return f"the MXNet worker trains with SGD and momentum only, not {knobs['optimizer']}"
        return None
