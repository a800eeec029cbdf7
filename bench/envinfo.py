"""Facts about the machine and software that every result row carries.

GPU facts come from NVML (pynvml / nvidia-ml-py) or nvidia-smi, so that the parent
process never creates a CUDA context of its own on the GPUs it measures.
"""
from __future__ import annotations

import datetime
import functools
import os
import platform
import shlex
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _run(cmd: list[str]) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=REPO)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@functools.lru_cache(maxsize=1)
def gpus_on_host() -> list[dict]:
    """[{index, name, memory_mib, driver}] for every GPU NVML sees, [] without GPUs."""
    try:
        import pynvml

        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
        driver = driver.decode() if isinstance(driver, bytes) else driver
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(handle)
            found.append({
                "index": i, "name": name.decode() if isinstance(name, bytes) else name,
                "memory_mib": pynvml.nvmlDeviceGetMemoryInfo(handle).total / 2**20, "driver": driver,
            })
        return found
    except Exception:  # noqa: BLE001 - no NVML: fall back to nvidia-smi, then to torch
        pass
    out = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    if out:
        found = []
        for line in out.splitlines():
            idx, name, mem, driver = (x.strip() for x in line.split(","))
            found.append({"index": int(idx), "name": name, "memory_mib": float(mem), "driver": driver})
        return found
    import torch

    return [{"index": i, "name": torch.cuda.get_device_name(i), "memory_mib": None, "driver": None}
            for i in range(torch.cuda.device_count())]


def gpu_count() -> int:
    """CUDA devices usable by torch here (respects CUDA_VISIBLE_DEVICES)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@functools.lru_cache(maxsize=1)
def collect_light() -> dict:
    """The facts that need no torch: host and CPU."""
    return {"host": socket.gethostname(), "cpu": f"{_cpu_name()} ({os.cpu_count()} threads)"}


@functools.lru_cache(maxsize=1)
def collect() -> dict:
    import numpy
    import torch

    commit = _run(["git", "rev-parse", "--short=12", "HEAD"])
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    cuda_ok = torch.cuda.is_available()
    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if cuda_ok else None
    except Exception:  # noqa: BLE001 - builds without NCCL
        nccl = None
    gpus = gpus_on_host()
    return {
        "gpu_count_host": len(gpus),
        "driver": gpus[0]["driver"] if gpus else None,
        "cuda": torch.version.cuda,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
        "nccl": nccl,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
        **collect_light(),
        "platform": platform.platform(),
        "git_commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
    }


def for_gpus(gpu_ids: tuple[int, ...]) -> dict:
    """GPU name and memory of the GPUs a case ran on ('cpu' for the CPU)."""
    if not gpu_ids:
        return {"gpu_name": "cpu", "gpu_memory_mib": None}
    by_index = {g["index"]: g for g in gpus_on_host()}
    names = sorted({by_index[i]["name"] if i in by_index else "unknown" for i in gpu_ids})
    mems = [by_index[i]["memory_mib"] for i in gpu_ids if i in by_index and by_index[i]["memory_mib"]]
    return {"gpu_name": " + ".join(names), "gpu_memory_mib": min(mems) if mems else None}
