"""A base's own work at n devices, measured on one device: the case run as rank 0 of a world of
n ranks whose collectives do nothing (PyTorch's fake process group, the fake-world launcher of
bench/engine/launchers.py), timed as `bench run` times it.

Why: a strategy may do less at one device than at n. FSDP2 with a world of one skips its
all-gathers and reduce-scatters and the copies around them, so its one-device trace holds
none of that work; where the host sets the pace, that work is what the step grows by
(bench/predict/README.md). Under the fake world it runs, on the host and on the device, and
only the communication is left out, which the probe and the simulation add.

Each (case, n) runs in a process of its own (`python -m bench.predict.hostprobe SPEC OUT`):
a strategy that cannot run under the fake group (DDP's reducer gets no tensor back from its
fake all-reduce) is that entry's error, and the others go on.
"""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

SUFFIX = ".host.json"
SCHEMA = "parabench-host-probe/1"
# The strategies known to do less at one device than at n (predict.WORLD_OF_ONE_SKIPS).
DEFAULT_STRATEGIES = ("fsdp2",)


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


def measure_one(row: dict, n: int, timeout_s: float) -> dict:
    """The entry of one base at a world of n: its timed step, or why it has none."""
    from bench.cases import case as case_mod

    case = dataclasses.replace(case_mod.Case.from_row(row), n_replicas=n, nnodes=1)
    hardware, key = base_key(row)
    entry = {"hardware": hardware, "base": _named(row), "base_key": key, "base_source": row.get("source"), "world": n,
             "base_step_ms": row.get("step_ms_p50")}
    with tempfile.TemporaryDirectory(prefix="parabench-host-") as folder:
        spec, out = Path(folder) / "spec.json", Path(folder) / "out.json"
        spec.write_text(json.dumps({"case": case.spec(), "world": n}))
        try:
            proc = subprocess.run([sys.executable, "-m", "bench.predict.hostprobe", str(spec), str(out)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {**entry, "status": "timeout", "reason": f"no step within {timeout_s:g} s"}
        if proc.returncode != 0 or not out.exists():
            return {**entry, "status": "error", "reason": _last_line(proc.stderr or proc.stdout)}
        figures = json.loads(out.read_text())
    return {**entry, "status": "ok", "reason": "",
            **{k: figures[k] for k in ("step_ms_p10", "step_ms_p50", "step_ms_p90", "img_per_s")}}


def measure(rows: list[dict], counts: list[int], strategies: tuple[str, ...], timeout_s: float,
            progress=print) -> list[dict]:
    entries = []
    for row in one_device_cases(rows, strategies):
        for n in counts:
            entry = measure_one(row, n, timeout_s)
            progress(f"{entry['base']} as rank 0 of {n}: " + (f"step {entry['step_ms_p50']:.3f} ms (1 device: "
                     f"{float(entry['base_step_ms']):.3f} ms)" if entry["status"] == "ok"
                     else f"{entry['status']}: {entry['reason']}"))
            entries.append(entry)
    return entries


def record(entries: list[dict], settings: dict) -> dict:
    from bench.measure import envinfo

    return {"schema": SCHEMA, "settings": settings, "environment": {**envinfo.collect(), **envinfo.torch_build()},
            "entries": entries}


def load(path: str | os.PathLike) -> dict[tuple, float]:
    """{(hardware, base label, world): step ms} of the entries measured."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the host probe {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a host probe ({SCHEMA}): make one with `bench probe-host`")
    return {(e["hardware"], e["base_key"], int(e["world"])): float(e["step_ms_p50"])
            for e in doc.get("entries", []) if e.get("status") == "ok"}


def _run(spec_path: str, out_path: str) -> None:
    """In the child: the case as rank 0 of the fake world, measured by the worker's own code."""
    from bench.engine import launchers
    from bench.run.worker import Job, configure_backends, measure_case

    doc = json.loads(Path(spec_path).read_text())
    case, n = doc["case"], doc["world"]
    job = Job({"launcher": launchers.FAKE_WORLD.name, "gpus": case["gpus"], "fake_world": n}, 0, n, 0)
    job.launcher.init(job.spec, 0, n, 0)
    configure_backends(case)
    figures = measure_case(job, case)
    Path(out_path).write_text(json.dumps(figures, default=str))


if __name__ == "__main__":
    _run(*sys.argv[1:3])
