"""A base's own work at n devices, measured without the communication: the one-device case run
by n processes at once, one per device of this host as the ranks of a real run sit, each in a
world that communicates with no one, timed with the clock `bench run` uses. The step predicted
from it lasts as long as the slowest of them.

Why: the one-device step leaves out two things that the n-device step pays for on the host.
- Ranks beside each other share the host: its cores, caches and memory bandwidth, the CPU
  that launches each GPU's kernels. On a CPU host whose ranks take every core, each rank's
  compute slows by an amount that depends on the processor and on what shares its cores
  (2 ranks of resnet18-small on a 2-vCPU machine: 0-44%, from one run to the next; pinned to
  one shared core: 2.07x and 2.25x).
- A strategy may do less at one device than at n: FSDP2 with a world of one skips its
  all-gathers and reduce-scatters and the copies around them. A strategy that declares this
  (`Strategy.world_of_one_skips`) runs as rank 0 of a fake world of n (PyTorch's fake process
  group: its collectives do nothing, its host and device work runs); the others run in a real
  world of their own (DDP's reducer needs the tensors a real all-reduce returns).

The peers meet after every timed step (a TCP store that this process holds, the Uncoupled
launchers of bench/engine/launchers.py), as the ranks of a real run meet at their collectives:
each step lasts as long as the slowest peer's. In every trial the first peer is also timed
alone while the others wait, so that what co-location costs is a ratio measured within the
same processes, free of what moves between launches (one host's step can move by 1.2-1.4x
from one launch to the next: results/reference/h200/repeat/); a strategy that does the same
work at one device as at n is predicted from its base's step times that ratio. Where the host
has fewer GPUs than n, a strategy in a fake world runs alone there (its skipped work is still
measured) and one in a world of its own is skipped (it would be the base again). Each (case,
n) is a group of processes of its own (`python -m bench.predict.hostprobe SPEC OUT`): a case that cannot run is that entry's
error or timeout, and the others go on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
import time
from pathlib import Path

SUFFIX = ".host.json"
SCHEMA = "parabench-host-probe/2"
OLDER_SCHEMAS = ("parabench-host-probe/1",)  # one process alone, always a fake world of n


def base_key(row: dict) -> tuple[str, str]:
    """What an entry is looked up by: the base's hardware and what makes it its case (Case.key)."""
    from bench.cases import case as case_mod

    return case_mod.hardware(row), json.dumps(list(map(str, case_mod.Case.from_row(row).key())))


def _named(row: dict) -> str:
    from bench.cases import case as case_mod

    case = case_mod.Case.from_row(row)
    return case.label() + (f", {case.variant()}" if case.variant() else "")


def one_device_cases(rows: list[dict], strategies: tuple[str, ...]) -> list[dict]:
    """The measured one-device cases of `strategies` (the newest of each case)."""
    from bench.cases import results

    return [r for r in results.latest(rows) if r.get("status") == "ok" and int(r.get("n_replicas") or 0) == 1
            and int(r.get("nnodes") or 1) == 1 and r.get("strategy") in strategies
            and r.get("execution") != "cuda-graph"]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one base is run at n: in which world, by how many processes, on which devices."""

    launcher: str  # bench.engine.launchers: fake-world or own-world
    world: int  # the world each process is a rank of (n for a fake world, 1 for its own)
    devices: tuple[tuple[int, ...], ...]  # each process's GPUs (empty on the CPU)
    note: str  # what the entry says about where it ran

    @property
    def together(self) -> int:
        return len(self.devices)


def plan(row: dict, n: int, gpus: list[int]) -> Plan:
    """Where the base's n processes run: one per device, as the ranks of a real run would."""
    import strategies
    from bench.engine import launchers

    fake = bool(strategies.get(row["strategy"]).world_of_one_skips)
    launcher, world = (launchers.FAKE_WORLD, n) if fake else (launchers.OWN_WORLD, 1)
    kind = f"rank 0 of a fake world of {n}" if fake else "a world of its own"
    if row.get("device") != "cuda":
        return Plan(launcher.name, world, ((),) * n, f"{n} processes at once on this host's CPU, each {kind}")
    if len(gpus) >= n:
        return Plan(launcher.name, world, tuple((g,) for g in gpus[:n]),
                    f"{n} processes at once on GPUs {','.join(map(str, gpus[:n]))}, each {kind}")
    own = tuple(int(g) for g in str(row.get("gpus") or "0").split(","))[:1]
    short = f"this host has {len(gpus)} GPU(s) for {n} ranks, so what ranks beside each other cost is not measured"
    if not fake:  # alone in a world of its own it is the base again: nothing to learn
        return Plan(launcher.name, world, (), short)
    return Plan(launcher.name, world, (own,), f"one process alone on GPU {own[0]} ({kind}): {short}")


def _environment(row: dict, n: int) -> dict:
    """The variables a worker of the same case at n devices would get (torchrun's one thread per
    rank where it starts several, no GPU visible for a CPU case)."""
    from bench.cases import case as case_mod
    from bench.engine.launchers import worker_environment
    from bench.run.sweep import launcher_of, worker_env

    base = case_mod.Case.from_row(row)
    target = dataclasses.replace(base, n_replicas=n, gpus=tuple(range(n)) if base.gpus else ())
    return worker_environment(launcher_of(target), target.placement, worker_env())


def _store(timeout_s: float):
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_s))


def measure_one(row: dict, n: int, timeout_s: float, gpus: list[int]) -> dict:
    """The entry of one base at n devices: the slowest process's timed step, or why there is none."""
    from bench.cases import case as case_mod
    from bench.measure.envinfo import REPO
    from bench.run import procs

    how = plan(row, n, gpus)
    case = dataclasses.replace(case_mod.Case.from_row(row), n_replicas=how.world, nnodes=1)
    hardware, key = base_key(row)
    entry = {"hardware": hardware, "base": _named(row), "base_key": key, "base_source": row.get("source"), "world": n,
             "base_step_ms": row.get("step_ms_p50"), "launcher": how.launcher, "rank_world": how.world,
             "together": how.together, "where": how.note}
    if not how.devices:
        return {**entry, "status": "skipped", "reason": how.note}
    env = _environment(row, n)
    store = _store(timeout_s) if how.together > 1 else None  # where the peers meet
    with tempfile.TemporaryDirectory(prefix="parabench-host-") as folder:
        peers = {"port": store.port if store else None, "count": how.together, "timeout_s": timeout_s}
        workers, outs = [], []
        try:
            for i, devices in enumerate(how.devices):
                spec, out = Path(folder) / f"spec-{i}.json", Path(folder) / f"out-{i}.json"
                spec.write_text(json.dumps({"case": {**case.spec(), "gpus": list(devices)}, "launcher": how.launcher,
                                            "world": how.world, "peers": peers, "peer": i}))
                outs.append(out)
                workers.append(procs.Worker([sys.executable, "-m", "bench.predict.hostprobe", str(spec), str(out)],
                                            env, str(REPO)))
            deadline = time.monotonic() + timeout_s
            while any(w.alive() for w in workers):
                failed = [w for w in workers if not w.alive() and w.proc.returncode != 0]
                if failed:  # the others would wait for it at their barrier
                    return {**entry, "status": "error", "reason": _last_line(failed[0].output_tail())}
                if time.monotonic() > deadline:
                    return {**entry, "status": "timeout", "reason": f"no step within {timeout_s:g} s"}
                time.sleep(0.05)
            for worker, out in zip(workers, outs):
                if worker.proc.returncode != 0 or not out.exists():
                    return {**entry, "status": "error", "reason": _last_line(worker.output_tail())}
            figures = [json.loads(out.read_text()) for out in outs]
        finally:
            for worker in workers:
                worker.kill()
    slowest = max(figures, key=lambda f: f["together"]["step_ms_p50"])
    alone = figures[0].get("alone")
    return {**entry, "status": "ok", "reason": "", **slowest["together"],
            "step_ms_p50_each": [round(f["together"]["step_ms_p50"], 4) for f in figures],
            "peak_alloc_mib": max((f["peak_alloc_mib"] for f in figures if f["peak_alloc_mib"]), default=None),
            **({f"alone_{k}": v for k, v in alone.items()} if alone else {})}


def measure(rows: list[dict], counts: list[int], strategies: tuple[str, ...], timeout_s: float, gpus: list[int],
            progress=print, keep=lambda entries: None) -> list[dict]:
    """Every base at every count; `keep(entries)` after each one, so that an interrupted probe
    loses nothing it finished."""
    entries = []
    for row in one_device_cases(rows, strategies):
        for n in counts:
            entry = measure_one(row, n, timeout_s, gpus)
            progress(f"{entry['base']} at {n}: " + (
                f"step {entry['step_ms_p50']:.3f} ms" + (f", {entry['alone_step_ms_p50']:.3f} ms for one of them alone"
                                                         if "alone_step_ms_p50" in entry else "")
                + f" (the base: {float(entry['base_step_ms']):.3f} ms); {entry['where']}"
                if entry["status"] == "ok" else f"{entry['status']}: {entry['reason']}"))
            entries.append(entry)
            keep(entries)
    return entries


def record(entries: list[dict], settings: dict) -> dict:
    from bench.measure import envinfo

    environment = {**envinfo.collect(), **envinfo.for_gpus(tuple(settings.get("gpus") or ())), **envinfo.torch_build()}
    return {"schema": SCHEMA, "settings": settings, "environment": environment, "entries": entries}


def load(path: str | os.PathLike) -> dict[tuple, dict]:
    """{(hardware, base key, n): entry} of the entries measured (an older file's entries: one
    process alone as rank 0 of a fake world of n)."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the host probe {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") not in (SCHEMA, *OLDER_SCHEMAS):
        raise ValueError(f"{path} is not a host probe ({SCHEMA}): make one with `bench probe-host`")
    older = {"launcher": "fake-world", "together": 1}
    return {(e["hardware"], e["base_key"], int(e["world"])):
            {**older, "rank_world": int(e["world"]), "where": f"one process alone, rank 0 of a fake world of {e['world']}",
             **e, "step_ms_p50": float(e["step_ms_p50"])}
            for e in doc.get("entries", []) if e.get("status") == "ok"}


def _figures(step_ms: list[float]) -> dict:
    from bench.core.stats import percentile

    return {f"step_ms_p{q}": round(percentile(step_ms, q), 4) for q in (10, 50, 90)}


def _run(spec_path: str, out_path: str) -> None:
    """In a peer: the case in its world, warmed up, then in every trial the first peer timed alone
    while the others wait, and all of them timed together, meeting after every step. Alone and
    together alternate in one process, so their ratio is free of what moves between launches."""
    from bench.measure.timing import StepClock, peak_memory_mib, reset_peak_memory
    from bench.run import procs
    from bench.run.worker import Job, build_step, configure_backends

    procs.die_with_parent()
    doc = json.loads(Path(spec_path).read_text())
    case, peers = doc["case"], doc["peers"]
    job = Job({"launcher": doc["launcher"], "gpus": case["gpus"], "world": doc["world"], "peers": peers},
              0, doc["world"], 0)
    job.launcher.init(job.spec, 0, doc["world"], 0)
    configure_backends(case)
    step, run = build_step(job, case)
    clock = StepClock(step.devices)
    for _ in range(case["warmup"]):
        run()
    first, together = int(doc["peer"]) == 0, int(peers["count"]) > 1
    paced, alone_ms, together_ms = job.launcher.pace(run), [], []
    reset_peak_memory(step.devices)
    job.launcher.barrier()
    for _ in range(case["trials"]):
        if together:
            if first:
                alone_ms += clock.time_trial(run, case["steps"])[0]
            job.launcher.barrier()
        together_ms += clock.time_trial(paced, case["steps"])[0]
        job.launcher.barrier()
    memory = peak_memory_mib(step.devices)  # what the step allocates in this world, as `bench run` reads it
    job.launcher.close()
    out = {"together": _figures(together_ms), "alone": _figures(alone_ms) if alone_ms else None,
           "peak_alloc_mib": round(max(m[0] for m in memory.values()), 2) if memory else None}
    Path(out_path).write_text(json.dumps(out))


if __name__ == "__main__":
    _run(*sys.argv[1:3])
