"""The parity check's entry beside the MXNet worker (bench/checks/parity.py `parity_entry`): each
case trained `steps` steps, no timing, its parameters saved where the spec's parity section
says (bench/core/parity_spec.py). The worker's own message knows nothing of it.

Usage (by the parity check, never by hand): <MXNet's python> -m strategies.gluon.parity SPEC.json
"""
from __future__ import annotations

import sys

import mxnet as mx
import numpy as np

from bench.core.parity_spec import ParityLaunchSpec
from strategies.gluon import worker


def parity_step(case, ctx: list, weights: dict, inputs, targets, spec: ParityLaunchSpec) -> dict:
    net, trainer = worker.build_trainer(case, ctx, weights)
    step = worker.make_step(case, ctx, net, trainer, inputs, targets)
    for _ in range(case.steps):
        step()
    mx.nd.waitall()
    params = {k: v.data(ctx[0]).asnumpy() for k, v in net._collect_params_with_prefix().items()}
    np.savez(spec.out(case.key), **params)
    return {}


if __name__ == "__main__":
    worker.main(sys.argv[1:], run_case=parity_step, spec_type=ParityLaunchSpec)
