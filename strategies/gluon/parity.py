"""The parity check's entry beside the MXNet worker (bench/checks/parity.py `parity_entry`): each
case trained `steps` steps, no timing, its parameters saved where the spec's `parity` section
says. The worker's own message knows nothing of it.

Usage (by the parity check, never by hand): <MXNet's python> -m strategies.gluon.parity SPEC.json
"""
from __future__ import annotations

import functools
import json
import sys

import mxnet as mx
import numpy as np

from strategies.gluon import worker


def parity_step(case, ctx: list, weights: dict, inputs, targets, parity: dict) -> dict:
    net, trainer = worker.build_trainer(case, ctx, weights)
    step = worker.make_step(case, ctx, net, trainer, inputs, targets)
    for _ in range(case.steps):
        step()
    mx.nd.waitall()
    params = {k: v.data(ctx[0]).asnumpy() for k, v in net._collect_params_with_prefix().items()}
    np.savez(parity["outs"]["|".join(case.key)], **params)
    return {}


def main(argv: list[str]) -> None:
    with open(argv[0]) as fh:
        parity = json.load(fh)["parity"]  # before the worker reads the spec and removes it
    worker.main(argv, run_case=functools.partial(parity_step, parity=parity))


if __name__ == "__main__":
    main(sys.argv[1:])
