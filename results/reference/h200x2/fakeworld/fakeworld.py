"""One process, one device, a fake process group of N ranks (collectives do nothing): the step's
host work at world size N, timed as the suite times a case. Usage: fakeworld.py STRATEGY N MODEL
PRECISION BATCH [cpu]"""
import sys

import torch
import torch.distributed as dist
from torch.testing._internal.distributed.fake_pg import FakeStore

from bench.cases.case import Case, settings as make_settings
from bench.core.placement import Placement
from bench.engine import launchers
from bench.run.worker import Job, configure_backends, measure_case


class FakeWorld(launchers.ProcessGroupLauncher):
    def gather(self, obj):
        return [obj]

    def barrier(self):
        if torch.cuda.is_available():
            torch.cuda.synchronize()


strategy, n, model, precision, batch = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5])
on_cpu = len(sys.argv) > 6
if not on_cpu:
    torch.cuda.set_device(0)
dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=n)
settings = make_settings(warmup=5, steps=10, trials=3, channels_last=not on_cpu, cudnn_benchmark="on")
placement = Placement((), n) if on_cpu else Placement(tuple(range(n)), n)
case = Case.make(strategy, precision, model, placement, batch, "eager", settings).spec()
configure_backends(case)
job = Job({"launcher": "torchrun", "gpus": list(placement.gpus)}, 0, n, 0)
job.launcher = FakeWorld()
figures = measure_case(job, case)
print(f"fake world {n}: {strategy} {precision} {model} {batch}/device: step {figures['step_ms_p50']:.2f} ms "
      f"(p10-p90 {figures['step_ms_p10']:.2f}-{figures['step_ms_p90']:.2f})", flush=True)
