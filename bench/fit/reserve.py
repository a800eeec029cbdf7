"""What a real world of n >= 2 holds on each GPU outside PyTorch's allocator, which a fake world
of n does not: the communicator's buffers (NCCL's: 1000 MiB per GPU on 2 H100s with NCCL 2.28,
measured by scripts/comm_memory.py and shipped beside this module as comm-memory.jsonl).
`bench fit` holds it back from its probes at n >= 2 without being asked, from the first of these
that exists:

- `--reserve-mib`, given;
- on a host of 2 or more GPUs, measured there (bench/fit/comm_memory.py under torchrun: a 2-rank
  communicator and a DDP step), once per host, driver and NCCL version, and kept in
  <results-dir>/comm-memory.jsonl;
- on one GPU, the shipped measurement for this NCCL version (SHIPPED);
- else nothing, and the fit's sentence says so.

On the CPU nothing is held back: the budget counts tracked tensors, which a real world's gloo
buffers are not. No torch here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.core.imports import pythonpath

KEPT = "comm-memory.jsonl"  # the measurements of this host, in the results folder
SHIPPED = Path(__file__).with_name(KEPT)  # what the package carries: measured on 2 H100s


@dataclass(frozen=True)
class Reserve:
    mib: float
    source: str  # where the figure comes from, said in every sentence of the fit


class ReserveError(ValueError):
    """A measurement that failed; the message names the fix."""


def _version(nccl) -> str:
    """[2, 28, 9] or '2.28.9' -> '2.28.9'."""
    return ".".join(map(str, nccl)) if isinstance(nccl, (list, tuple)) else str(nccl)


def _entries(text: str) -> list[dict]:
    """The measurements among the lines (torchrun's own log lines are skipped)."""
    out = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "communicator_mib" in entry and "nccl" in entry:
            out.append(entry)
    return out


def shipped(nccl: str, path: Path = SHIPPED) -> Reserve | None:
    """The largest communicator the shipped measurement of this NCCL version found, per rank."""
    found = [e for e in _entries(path.read_text()) if _version(e["nccl"]) == nccl] if path.is_file() else []
    if not found:
        return None
    top = max(found, key=lambda e: e["communicator_mib"])
    return Reserve(top["communicator_mib"], f"the shipped measurement for NCCL {nccl} (bench/fit/{path.name}, "
                                            f"{top['world']} x {top['gpu']})")


def kept(folder: Path, host: str, driver: str, nccl: str) -> Reserve | None:
    """This host's own measurement for its driver and NCCL version, where one was kept."""
    path = Path(folder) / KEPT
    if not path.is_file():
        return None
    found = [e for e in _entries(path.read_text())
             if (e.get("host"), e.get("driver"), _version(e["nccl"])) == (host, driver, nccl)]
    if not found:
        return None
    return Reserve(max(e["communicator_mib"] for e in found),
                   f"measured on {host} (driver {driver}, NCCL {nccl}; kept in {path})")


def measure(gpus: list[int], folder: Path, host: str, driver: str) -> list[dict]:
    """bench.fit.comm_memory on the first two of `gpus` (one process each, under torchrun): each
    rank's communicator, MiB, with the host and driver added; appended to <folder>/comm-memory.jsonl."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ",".join(map(str, gpus[:2])), "NCCL_NVLS_ENABLE": "0",
           "PYTHONPATH": pythonpath()}
    try:
        proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                               "-m", "bench.fit.comm_memory"], env=env, capture_output=True, text=True,
                              timeout=600)
    except subprocess.TimeoutExpired:
        raise ReserveError("measuring the communicator's memory took over 600 s: give --reserve-mib instead") from None
    entries = [{**e, "host": host, "driver": driver} for e in _entries(proc.stdout)]
    if proc.returncode != 0 or not entries:
        tail = error_line(proc.stderr)
        raise ReserveError(f"measuring the communicator's memory on GPUs {gpus[:2]} failed ({tail[:200]}): "
                           "give --reserve-mib instead")
    Path(folder).mkdir(parents=True, exist_ok=True)
    with open(Path(folder) / KEPT, "a") as fh:
        fh.writelines(json.dumps(e) + "\n" for e in entries)
    return entries


def error_line(stderr: str) -> str:
    """The line of torchrun's output that says what failed: a rank's own exception, not torchrun's
    ChildFailedError and its summary of = lines, nor the banner of asterisks it starts with."""
    import re

    said = [line.strip() for line in stderr.splitlines() if line.strip().strip("*=-")]
    raised = [line for line in said
              if re.match(r"[\w.]+(Error|Exception)\b.*:", line) and "ChildFailedError" not in line]
    return (raised or said or ["no output"])[-1]


def choose(given: float | None, gpus: list[int], visible: list[int], nccl: str | None, host: str, driver: str | None,
           folder: Path, measure=measure, source: Path = SHIPPED) -> Reserve:
    """What the fit holds back at n >= 2, and where it comes from (the module's order)."""
    if given is not None:
        return Reserve(given, "given with --reserve-mib")
    if not gpus:
        return Reserve(0.0, "")
    if nccl is None:
        return Reserve(0.0, "nothing held back: this torch has no NCCL")
    if len(visible) >= 2:
        found = kept(folder, host, driver, nccl)
        if found is None:
            # on the fit's own GPU and the next one: a fit on GPU 2 of 4 leaves GPUs 0 and 1 to other work
            at = visible.index(gpus[0]) if gpus[0] in visible else 0
            measure(visible[at:] + visible[:at], folder, host, driver)
            found = kept(folder, host, driver, nccl)
        if found is not None:
            return found
    found = shipped(nccl, source)
    if found is not None:
        return found
    return Reserve(0.0, f"nothing held back: no shipped measurement for NCCL {nccl}; measure it on a host of 2 "
                        "GPUs (bench fit does it there) or give --reserve-mib")
