"""A test-only strategy that fails on command (never listed; PARABENCH_TEST_STRATEGIES=1).

It trains like `single` (launcher=local) or like `ddp` (launcher=torchrun or spawn) and
injects `fault` on rank `fault_rank` at per-GPU batch `at_batch` (0: every batch):
raise, oom, sigkill, segfault, exit, hang, orphan (start a detached child, then hang),
or slow (sleep `slow_ms` in every step). PARABENCH_FAULTY_SLOW_MS=N adds an N ms sleep to
every step with no change of settings: a real code slowdown, for regression tests.
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

from strategies import register
from strategies.base import Strategy, TrainStep
from strategies.ddp import DDP
from strategies.single import Single

import torch


def inject(fault: str, slow_ms: float) -> None:
    if fault == "raise":
        raise RuntimeError("injected failure")
    if fault == "oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB (injected)")
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
    if fault == "slow":
        time.sleep(slow_ms / 1000)


@register
class Faulty(DDP):
    name = "faulty"
    summary = "test-only: trains like single or ddp and fails on command"
    hidden = True
    options = {**DDP.options, "launcher": "local", "fault": "none", "at_batch": 0, "fault_rank": 0, "slow_ms": 20}

    def _multi_process(self, options) -> bool:
        return options["launcher"] != "local"

    def launch_command(self, spec_path, placement, options):
        if self._multi_process(options):
            return super().launch_command(spec_path, placement, options)
        return Strategy.launch_command(self, spec_path, placement, options)

    def run_worker(self, spec, options, body):
        if self._multi_process(options):
            return super().run_worker(spec, options, body)
        return Strategy.run_worker(self, spec, options, body)

    def unavailable_reason(self, placement, precision, cuda_available):
        return None

    def init_worker(self, ctx):
        if self._multi_process(ctx.options):
            super().init_worker(ctx)

    def close_worker(self, ctx):
        if self._multi_process(ctx.options):
            super().close_worker(ctx)

    def gather(self, ctx, obj):
        return super().gather(ctx, obj) if self._multi_process(ctx.options) else [obj]

    def barrier(self, ctx):
        if self._multi_process(ctx.options):
            super().barrier(ctx)

    def build(self, model, ctx):
        multi = self._multi_process(ctx.options)
        inner = super().build(model, ctx) if multi else Single.build(self, model, ctx)
        replicas_in_batch = 1 if multi else ctx.world_size_replicas
        fault, at_batch = ctx.options["fault"], int(ctx.options["at_batch"])
        fires_here = int(ctx.options["fault_rank"]) == ctx.rank
        slow_ms = float(ctx.options["slow_ms"])

        extra_sleep_s = float(os.environ.get("PARABENCH_FAULTY_SLOW_MS", "0")) / 1000

        def run(batch):
            if extra_sleep_s:
                time.sleep(extra_sleep_s)
            local_batch = batch[0].shape[0] // replicas_in_batch
            if fires_here and fault != "none" and at_batch in (0, local_batch):
                inject(fault, slow_ms)
            inner.run(batch)

        return TrainStep(inner.model, inner.devices, inner.place, run)
