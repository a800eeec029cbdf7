"""Prediction rows: a measured one-device case with its traces, a probe's collective costs,
and the simulation, at the device counts asked for.

The step at n devices is the measured one-device median step plus what the simulation
adds going from 1 to n (communication not hidden, less the optimiser's sharded share): the
timing stays the measured one, the profiler only says where the time is. A step is
host-bound where its GPU idles HOST_BOUND_IDLE or more of it (bench.measure.anatomy's idle): the
host then sets the pace, so its measured step is the floor, the optimiser launches as many
kernels on fewer elements (no saving), and the device's wait for the host after backward
hides that much of the communication.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path

import strategies
from bench.cases import case as case_mod
from bench.predict import memory, params, simulate, timeline
from bench.predict.validate import baselines

HOST_BOUND_IDLE = 0.30
TARGETS = ("ddp", "fsdp2", "zero1")
USES = {"ddp": ("all_reduce", "broadcast"), "zero1": ("all_reduce", "broadcast"),
        "fsdp2": ("all_gather", "reduce_scatter")}
# A base is a one-device case whose step the targets share; the target's own first.
BASE_PREFERENCE = ("ddp", "zero1", "fsdp2", "single")


def layout(n: int, gpus_per_host: int | None, hosts: int | None) -> tuple[int, int]:
    """(devices per host, hosts) for n devices: spread over `hosts`, or hosts filled with
    `gpus_per_host` each (one host while n fits)."""
    if hosts:
        if n % hosts:
            raise ValueError(f"{n} devices do not spread evenly over --hosts {hosts}: give device counts that are "
                             f"multiples of {hosts}")
        return n // hosts, hosts
    if not gpus_per_host or n <= gpus_per_host:
        return n, 1
    if n % gpus_per_host:
        raise ValueError(f"{n} devices do not fill hosts of {gpus_per_host} GPUs: give a multiple of {gpus_per_host} "
                         "or set --gpus-per-host")
    return gpus_per_host, n // gpus_per_host


def profiled_base(row: dict) -> bool:
    """A one-device case that could be a base: profiled (--anatomy), eager or compiled."""
    return (row.get("status") == "ok" and int(row.get("n_replicas") or 0) == 1 and int(row.get("nnodes") or 1) == 1
            and bool(row.get("anatomy_traces")) and row.get("strategy") in BASE_PREFERENCE
            and row.get("execution") != "cuda-graph")


def is_base(row: dict) -> bool:
    """A profiled one-device case whose traces are at hand."""
    return profiled_base(row) and Path(traces_of(row)).is_dir()


def missing_traces(rows: list[dict]) -> list[str]:
    """The traces folders that profiled one-device cases point at and that are not there."""
    return sorted({traces_of(r) for r in rows if profiled_base(r) and not Path(traces_of(r)).is_dir()})


def traces_of(row: dict) -> str:
    return str(Path(row["source"]).parent / row["anatomy_traces"])


def choose_bases(rows: list[dict], target: str) -> list[dict]:
    """One base per measured setting (hardware, model, precision, batch, knobs): the
    target's own one-device case where there is one, else the next in BASE_PREFERENCE."""
    chosen: dict = {}
    order = (target,) + tuple(s for s in BASE_PREFERENCE if s != target)
    for row in filter(is_base, rows):
        key = (case_mod.hardware(row), case_mod.Case.from_row(row).baseline_key(), row.get("cudnn_benchmark"))
        kept = chosen.get(key)
        if kept is None or order.index(row["strategy"]) < order.index(kept["strategy"]):
            chosen[key] = row
    return list(chosen.values())


def target_options(target: str, base: dict, rows: list[dict]) -> list[dict]:
    """The target's option sets to predict: its defaults (the base's own options where the
    base ran the target), and every set it was measured with on this setting."""
    base_case = case_mod.Case.from_row(base)
    sets = [dict(base_case.options) if base["strategy"] == target else dict(strategies.get(target).options)]
    for row in rows:
        if row.get("strategy") == target and row.get("status") == "ok" and \
                case_mod.Case.from_row(row).baseline_key() == base_case.baseline_key():
            options = dict(case_mod.Case.from_row(row).options)
            if options not in sets:
                sets.append(options)
    return sets


def target_case(base: dict, target: str, options: dict, per_host: int, hosts: int) -> case_mod.Case:
    base_case = case_mod.Case.from_row(base)
    gpus = tuple(range(per_host)) if base_case.gpus else ()
    return dataclasses.replace(base_case, strategy=target, gpus=gpus, n_replicas=per_host * hosts, nnodes=hosts,
                               options=tuple(sorted(case_mod.strategy_options(target, options).items())))


def _host_bound(step: timeline.StepTimeline, on_gpu: bool) -> bool:
    return on_gpu and step.step > 0 and step.idle / step.step >= HOST_BOUND_IDLE


def host_threads(row: dict) -> int | None:
    """Hardware threads of the host a CPU row ran on (envinfo writes "NAME (N threads)")."""
    found = re.search(r"\((\d+) threads\)", str(row.get("cpu") or ""))
    return int(found.group(1)) if found else None


def cores_full(base: dict, per_host: int) -> str | None:
    """On the CPU, gloo's copies and sums run on the cores: where the ranks (one thread each,
    as torchrun starts them) take every core, nothing is left to hide communication behind."""
    threads = host_threads(base)
    if base.get("device") != "cpu" or per_host < 2 or threads is None or per_host < threads:
        return None
    return (f"CPU: {per_host} ranks of one thread fill the host's {threads} hardware threads: gloo's work takes "
            "them from compute, so no communication hides behind backward (all of it is added)")


def step_at(base: dict, step, sim1: simulate.Sim, sim: simulate.Sim, host_bound: bool,
            serial: bool = False) -> tuple[float, float, str]:
    """The predicted step (ms), the communication it exposes (ms) and how it was reached."""
    timed = float(base["step_ms_p50"])
    saved = sim1.optimizer - sim.optimizer  # the optimiser's sharded share
    added = sim.step - sim1.step + saved  # communication not hidden behind compute
    if serial:
        added = sim.comm
    if not host_bound:
        return timed + added - saved, added, (
            f"step = measured 1-device median {timed:.3f} ms + {added:.3f} ms exposed communication - {saved:.3f} ms "
            "sharded optimiser")
    hidden = min(max(added, 0.0), max(0.0, step.tail - step.optimizer))
    exposed = max(added - hidden, 0.0)
    return timed + exposed, exposed, (
        f"host-bound (GPU idle {100 * step.idle / step.step:.0f}% of the 1-device step): measured 1-device median "
        f"{timed:.3f} ms is the floor; of the {added:.3f} ms communication adds past compute, {hidden:.3f} ms "
        "hides in the device's wait for the host after backward; no optimiser saving (as many launches)")


def predict_one(base: dict, step, facts, comm, target: str, options: dict, per_host: int, hosts: int) -> dict:
    on_gpu = base.get("device") == "cuda"
    # FSDP2 with mixed_precision=auto gathers bf16/fp16 parameters.
    gathered = 2 if (target == "fsdp2" and options.get("mixed_precision") == "auto"
                     and base.get("precision") in ("amp-bf16", "amp-fp16")) else 4
    sim = simulate.simulate(step, facts, comm, simulate.Target(target, per_host, hosts, options, gathered))
    sim1 = simulate.simulate(step, facts, comm, simulate.Target(target, 1, 1, options, gathered))
    host_bound = _host_bound(step, on_gpu)
    serial = cores_full(base, per_host)
    step_ms, exposed, how = step_at(base, step, sim1, sim, host_bound, serial is not None)
    case = target_case(base, target, options, per_host, hosts)
    n = per_host * hosts
    mem = memory.per_gpu_mib(target, facts, n, options, base["strategy"], dict(case_mod.Case.from_row(base).options),
                             base.get("peak_alloc_mib") if on_gpu else None)
    assumptions = [how, f"weak scaling: {base['batch_per_gpu']} images per device, compute per device as measured "
                        f"on one ({step.basis}, {step.steps} profiled steps)"]
    assumptions += ([serial] if serial else []) + sim.notes
    assumptions += [comm.describe(c, per_host, hosts) for c in USES[target] if n > 1]
    skips = strategies.get(target).world_of_one_skips
    if base["strategy"] != target:
        assumptions.append(f"the base ran {base['strategy']}: {target}'s own host work (hooks, copies) is not in it")
    elif skips and host_bound and n > 1:
        assumptions.append(f"{skips}: host-bound, their host work at n devices is not in the base, and the step "
                           "predicted is too fast by as much")
    if serial:
        assumptions.append("compute per rank as one process alone measured it: ranks that share the host's cores "
                           "slow each other by an amount that depends on the processor")
    assumptions.append("memory: fp32 parameters, gradients, momentum (sharded terms / n) + activations = measured "
                       "1-device peak - its state (`bench fit` measures it)" if mem["memory_mib"] is not None else
                       "memory: the state only (the base measured no device peak)")
    assumptions = list(dict.fromkeys(assumptions))  # the same link may serve several collectives
    return {
        **case.row(), "variant": case.variant(), "hardware": case_mod.hardware(base), "devices": n,
        "per_host": per_host, "hosts": hosts, "step_ms": round(step_ms, 4),
        "img_per_s": round(case.global_batch / (step_ms / 1e3), 2),
        "scaling_efficiency": round(float(base["step_ms_p50"]) / step_ms, 4),
        "comm_ms": round(sim.comm, 4), "exposed_comm_ms": round(exposed, 4),
        "collective_elements_per_step": sim.elements,
        "host_bound": host_bound, **mem,
        "baselines": baselines(base, comm, facts.numel, n, per_host, hosts, case.global_batch),
        "base": {"label": case_mod.Case.from_row(base).label(), "source": base["source"], "traces": traces_of(base),
                 "img_per_s": base["img_per_s"], "step_ms": base["step_ms_p50"]},
        "probe": comm.source, "assumptions": assumptions,
    }


@functools.lru_cache(maxsize=None)
def _timeline(folder: str) -> timeline.StepTimeline:
    try:
        return timeline.read(folder, 0)
    except (OSError, EOFError) as exc:
        raise ValueError(f"cannot read the traces in {folder}: {exc}") from None


def predict(rows: list[dict], comm, targets, devices: list[int], gpus_per_host: int | None = None,
            hosts: int | None = None) -> list[dict]:
    """Prediction rows for every base found in `rows`, target and device count."""
    from bench.cases import results

    rows = results.latest(rows)
    out = []
    for target in targets:
        for base in choose_bases(rows, target):
            step = _timeline(traces_of(base))
            facts = params.facts(base["model"])
            for options in target_options(target, base, rows):
                for n in devices:
                    per_host, n_hosts = layout(n, gpus_per_host if base.get("device") == "cuda" else None, hosts)
                    out.append(predict_one(base, step, facts, comm, target, options, per_host, n_hosts))
    return out
