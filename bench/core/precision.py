"""The precision axis: fp32, torch.amp fp16 with GradScaler, bf16, and NVIDIA Apex amp.

A strategy never branches on precision: it asks the case's `PrecisionRuntime` for
an autocast context, for the backward pass (which scales the loss where needed),
and for the optimiser step and the scaler update. The table of precisions imports no
torch, so that reading and reporting results does not need it.
"""
from __future__ import annotations

import contextlib
import importlib.util
from dataclasses import dataclass


@dataclass(frozen=True)
class Precision:
    name: str
    summary: str
    autocast_dtype: str | None = None  # a torch dtype's name: "float16", "bfloat16"
    grad_scaler: bool = False
    apex_opt_level: str | None = None
    # Why the suite declines this precision everywhere (it does not train the suite's step).
    declined: str | None = None

    def unavailable_reason(self, device_type: str) -> str | None:
        if self.declined:
            return self.declined
        if self.apex_opt_level:
            if importlib.util.find_spec("apex") is None:
                return "NVIDIA Apex is not installed (torch.amp is the supported path)"
            if importlib.util.find_spec("apex.amp") is None:
                return "this Apex has no amp module (removed from Apex in May 2025)"
            if device_type != "cuda":
                return "Apex amp needs CUDA"
        return None

    def runtime(self, device_type: str) -> "PrecisionRuntime":
        if self.apex_opt_level:
            return ApexRuntime(self, device_type)
        return PrecisionRuntime(self, device_type)


class PrecisionRuntime:
    """Per-case state of a precision (the GradScaler lives here)."""

    def __init__(self, precision: Precision, device_type: str):
        self.precision = precision
        self.device_type = device_type
        import torch

        self.dtype = getattr(torch, precision.autocast_dtype) if precision.autocast_dtype else None
        self.scaler = torch.amp.GradScaler(device_type) if precision.grad_scaler else None

    def prepare(self, model, optimizer):
        return model, optimizer

    def autocast(self):
        import torch

        if self.dtype is None:
            return contextlib.nullcontext()
        # Autocast's weight cache must be off inside a CUDA-graph capture (PyTorch's CUDA-graph notes).
        capturing = self.device_type == "cuda" and torch.cuda.is_current_stream_capturing()
        return torch.autocast(self.device_type, dtype=self.dtype, cache_enabled=not capturing)

    def backward(self, loss, optimizer=None) -> None:
        (self.scaler.scale(loss) if self.scaler else loss).backward()

    def backward_each(self, losses, optimizers) -> None:
        """Backward through one loss per replica, each replica on a device of its own. Every
        loss is scaled before any backward is queued: the scale lives on one device, and a copy
        between devices waits for the work queued on both (ATen's peer copy), so a replica's loss
        scaled after the first replica's backward was queued would start its own backward only
        when the first one's had ended."""
        scaled = self.scaler.scale(list(losses)) if self.scaler else losses
        for loss in scaled:
            loss.backward()

    def step(self, optimizer) -> None:
        if self.scaler:
            self.scaler.step(optimizer)
        else:
            optimizer.step()

    def step_each(self, optimizers) -> None:
        """Step one optimiser per replica, each on a device of its own. Every optimiser's gradients
        are unscaled before any steps: `scaler.step` of one optimiser reads its inf check on the host
        and the inverse scale comes from the scale's device, so unscaling the next replica after the
        first one's step was queued would wait for that step (a copy between devices waits for the
        work queued on both), one replica's step after another. Optimisers that take the scale into
        their own kernel (fused SGD) are left to `scaler.step`, which still copies the scale and the
        inf check between devices per optimiser: they keep that wait."""
        optimizers = list(optimizers)
        if self.scaler:
            for optimizer in optimizers:
                if not getattr(optimizer, "_step_supports_amp_scaling", False):
                    self.scaler.unscale_(optimizer)
        for optimizer in optimizers:
            self.step(optimizer)

    def update(self) -> None:
        if self.scaler:
            self.scaler.update()


class ApexRuntime(PrecisionRuntime):
    """Apex amp: `prepare` is amp.initialize, called before any DistributedDataParallel or
    DataParallel wrapping (Apex's documented order). O1 patches torch functions to cast
    per op; O2 casts the model to fp16 (BatchNorm kept fp32) and keeps fp32 master weights
    in the optimiser; O3 is pure fp16. O2 and O3 also replace the optimiser's zero_grad by
    one without arguments (training.grad_clearer copes)."""

    def __init__(self, precision: Precision, device_type: str):
        super().__init__(precision, device_type)
        from apex import amp  # only reached where unavailable_reason() said it imports

        self.amp = amp

    def prepare(self, model, optimizer):
        return self.amp.initialize(model, optimizer, opt_level=self.precision.apex_opt_level, verbosity=0)

    def autocast(self):
        return contextlib.nullcontext()  # Apex patches the model itself

    def backward(self, loss, optimizer=None) -> None:
        with self.amp.scale_loss(loss, optimizer) as scaled:
            scaled.backward()

    def backward_each(self, losses, optimizers) -> None:
        for loss, optimizer in zip(losses, optimizers, strict=True):
            self.backward(loss, optimizer)

    def step(self, optimizer) -> None:
        optimizer.step()


PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32 everywhere (TF32 convolutions follow --tf32)"),
        Precision("amp-fp16", "torch.amp autocast to float16 with GradScaler", "float16", grad_scaler=True),
        Precision("amp-bf16", "torch.amp autocast to bfloat16", "bfloat16"),
        Precision("apex-O1", "NVIDIA Apex amp, opt level O1", apex_opt_level="O1"),
        Precision("apex-O2", "NVIDIA Apex amp, opt level O2 (fp16 model, fp32 master weights)", apex_opt_level="O2"),
        Precision("apex-O3", "NVIDIA Apex amp, opt level O3 (pure fp16, BatchNorm included)", apex_opt_level="O3",
                  declined="apex-O3: pure fp16 with BatchNorm in fp16 and no fp32 master weights is not the suite's "
                           "training step (its first step moves BatchNorm weights far from amp-fp16's step: "
                           "tests/test_apex.py measures how far): use apex-O1 or apex-O2"),
    )
}


def release_apex() -> None:
    """Undo what Apex O1 patched process-wide (torch functions cast to fp16), so that the next
    case in the same worker runs unpatched torch; a no-op where Apex was never initialised."""
    import sys

    state = sys.modules.get("apex.amp._amp_state")
    handle = getattr(getattr(state, "_amp_state", None), "handle", None)
    if handle is not None:
        handle._deactivate()  # restores every function amp.init() replaced
        del state._amp_state.handle


def get_precision(name: str) -> Precision:
    if name not in PRECISIONS:
        raise KeyError(f"unknown precision {name!r}: choose from {', '.join(PRECISIONS)}")
    return PRECISIONS[name]
