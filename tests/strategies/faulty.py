"""A test-only strategy that fails on command (found through PARABENCH_STRATEGY_PATH).

It trains like `single` (launcher=local) or like `ddp` (launcher=torchrun or spawn) and
injects `fault` on rank `fault_rank` at per-GPU batch `at_batch` (0: every batch):
raise, oom, hostoom (a real host allocation that cannot succeed), memhog (touch ever more
host memory until the kernel's out-of-memory killer ends the process), sigkill, segfault,
exit, hang, orphan (start a detached child, then hang), print (a line without a newline
on stdout, as user code may), or slow (sleep `slow_ms` in every step).
PARABENCH_FAULTY_MARK=PATH creates that file as a fault fires (a test can wait for it).
PARABENCH_FAULTY_SLOW_MS=N adds an N ms sleep to every step with no change of settings:
a real code slowdown, for regression tests. PARABENCH_FAULTY_EXTRA=WORK adds real work to
every step, also with no change of settings (the work counters must catch it): item (one
more host read of a tensor value: a GPU synchronisation), allreduce (one more all-reduce),
copy (every parameter copied once more), forward (the last layer's forward run once more).
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

from strategies import register
from strategies.base import TrainStep
from strategies.ddp import DDP
from strategies.single import Single


def extra_work(kind: str, model, batch) -> None:
    import torch

    if kind == "item":
        batch[0].sum().item()
    elif kind == "allreduce":
        torch.distributed.all_reduce(torch.ones(1, device=batch[0].device))
    elif kind == "copy":
        [p.detach().clone() for p in model.parameters()]
    elif kind == "forward":
        with torch.no_grad():
            model.fc(torch.zeros(1, model.fc.in_features, device=batch[0].device))


def inject(fault: str, slow_ms: float) -> None:
    import torch

    if os.environ.get("PARABENCH_FAULTY_MARK"):
        open(os.environ["PARABENCH_FAULTY_MARK"], "a").close()  # tells a test that the fault is under way
    if fault == "raise":
        raise RuntimeError("injected failure")
    if fault == "oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (injected)")
    if fault == "hostoom":
        torch.empty(2**62, dtype=torch.uint8)  # 4 EiB: the host allocator refuses
    if fault == "memhog":
        held = []
        while True:  # each block written, so that the pages are real
            held.append(bytearray(b"x" * 2**26))
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "segfault":
        ctypes.string_at(0)
    if fault == "exit":
        os._exit(3)
    if fault == "orphan":
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        time.sleep(3600)
    if fault == "hang":
        time.sleep(3600)
    if fault == "print":
        sys.stdout.write('{"event": "result", "status": "ok"} no newline here')
        sys.stdout.flush()
    if fault == "slow":
        time.sleep(slow_ms / 1000)


@register
class Faulty(DDP):
    name = "faulty"
    summary = "test-only: trains like single or ddp and fails on command"
    order, reference = 99, False
    executions = ("eager",)
    options = {**DDP.options, "launcher": "local", "fault": "none", "at_batch": 0, "fault_rank": 0, "slow_ms": 20}
    option_choices = {**DDP.option_choices, "launcher": ("local", "torchrun", "spawn"),
                      "fault": ("none", "raise", "oom", "hostoom", "memhog", "sigkill", "segfault", "exit", "hang",
                                "orphan", "print", "slow")}

    def launcher(self, options):
        from bench.engine import launchers

        return launchers.by_name(options["launcher"])

    def unavailable_reason(self, placement, precision, execution="eager", options=None):
        return None

    def build(self, model, ctx):
        multi = ctx.world_size > 1
        inner = super().build(model, ctx) if multi else Single.build(self, model, ctx)
        fault, at_batch = ctx.options["fault"], int(ctx.options["at_batch"])
        fires_here = int(ctx.options["fault_rank"]) == ctx.rank
        slow_ms = float(ctx.options["slow_ms"])
        extra_sleep_s = float(os.environ.get("PARABENCH_FAULTY_SLOW_MS", "0")) / 1000
        extra = os.environ.get("PARABENCH_FAULTY_EXTRA", "")
        per_replica = ctx.spec.batch_per_gpu

        def run(batch):
            if extra_sleep_s:
                time.sleep(extra_sleep_s)
            if fires_here and fault != "none" and at_batch in (0, per_replica):
                inject(fault, slow_ms)
            inner.run(batch)
            if extra:
                extra_work(extra, inner.model, batch)

        return TrainStep(inner.model, inner.devices, inner.place, run, inner.optimizer)
