"""Which worker a case runs in and how that worker starts: its launcher, its key (cases with equal
keys share one worker), the environment every worker starts with, and its launch spec
(bench/core/launch_spec.py) as the case's strategy prepares it. Read by the sweep
(bench/run/sweep.py, bench/run/attempt.py), the search and the parity check."""
from __future__ import annotations

import dataclasses
import json
import os
import tempfile

import strategies
from bench.cases.case import Case, execution_unavailable_reason
from bench.core import imports, protocol
from bench.core.launch_spec import LaunchSpec
from bench.core.precision import get_precision
from bench.engine.launchers import Launcher


def inductor_cache_dir() -> str:
    """torch.compile's default cache folder, as inductor names it from the temp folder and the user."""
    import getpass
    import re

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def worker_env(node_rank: int = 0) -> dict:
    """The environment every worker starts with."""
    env = dict(os.environ)
    env["PYTHONPATH"] = imports.pythonpath(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off unless asked for
    env[protocol.NODE_RANK_ENV] = str(node_rank)
    return env


def unavailable_reason(case: Case) -> str | None:
    strategy = strategies.get(case.strategy)
    return (strategy.unavailable_reason(case.placement, get_precision(case.precision), case.execution,
                                        case.options_dict)
            or strategy.workload_unavailable_reason(case.model) or strategy.knobs_unavailable_reason(dict(case.knobs))
            or execution_unavailable_reason(case))


def worker_key(case: Case) -> tuple:
    return launcher_of(case).key(case.placement, case.options_dict, case.execution)


def launcher_of(case) -> Launcher:
    """The launcher that the case's strategy names."""
    return strategies.get(case.strategy).launcher(case.options_dict)


def worker_spec(cases: list, workdir: str) -> tuple[LaunchSpec, list]:
    """The spec of one worker: its launcher and device set (the first case's), and each
    case's own spec as its strategy prepared it (files under `workdir`). Returns the spec and
    the (case, exception) pairs whose preparation failed, which the spec leaves out."""
    first = cases[0]
    launcher = launcher_of(first)
    prepared, failed = [], []
    for case in cases:
        case_spec = case.spec()
        try:
            extra = strategies.get(case.strategy).prepare_launch(case_spec, workdir) or {}
        except Exception as exc:  # noqa: BLE001 - the caller records it as the case's outcome
            failed.append((case, exc))
            continue
        prepared.append(dataclasses.replace(case_spec, extra=extra))
    spec = LaunchSpec(launcher=launcher.name, gpus=tuple(first.gpus), n_replicas=first.n_replicas, nnodes=first.nnodes,
                      launcher_options={k: first.options_dict.get(k) for k in launcher.options}, cases=tuple(prepared))
    return spec, failed


def write_spec(spec: LaunchSpec, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(spec.to_json(), fh)
