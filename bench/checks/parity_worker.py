"""The parity check's worker: the sweep's worker (bench/run/worker.py) with each case run for
its parameters instead of its timing. Only the parity check starts it (bench/checks/parity.py
`run_parity`), with its own spec (bench/core/parity_spec.py): the dtype the case is held in and
the file each case's parameters go to, by case key. The production worker's message knows nothing
of it.

Usage (by the parity check, never by hand): python -m bench.checks.parity_worker SPEC.json
"""
from __future__ import annotations

if __name__ in ("__main__", "__mp_main__"):
    from bench.run import procs as _procs

    _procs.die_with_parent()  # as the sweep's worker: before torch

import sys

import torch

from bench.core.parity_spec import ParityLaunchSpec
from bench.core.step import CaseSpec
from bench.engine import training
from bench.run import worker


def parity_step(job: worker.Job, case: CaseSpec) -> dict:
    """`steps` training steps, no timing, deterministic kernels; the reporting rank saves the
    parameters it ends with (the fp32 masters where Apex O2 keeps them). The spec's parity dtype
    float64 holds the same weights and data in float64: a step free of fp32's rounding
    (bench/checks/parity.py says why)."""
    torch.backends.cudnn.deterministic = True
    dtype = job.spec.parity.dtype
    step, run = worker.build_step(job, case, dtype=None if dtype == "float32" else getattr(torch, dtype),
                                  restore=True)
    for _ in range(case.steps):
        run()
    job.launcher.barrier()
    keep = torch.float64 if dtype == "float64" else torch.float32
    params = {name: training.full_tensor(p).detach().to(keep).cpu()
              for name, p in training.trained_parameters(step.model, step.optimizer).items()}
    if job.reporting:
        torch.save(params, job.spec.out(case.key))
    return {}


if __name__ == "__main__":
    worker.main(sys.argv[1:], run_case=parity_step, spec_type=ParityLaunchSpec)
