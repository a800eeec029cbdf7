"""Facts about the machine and software that every result row carries.

GPU facts come from NVML (pynvml / nvidia-ml-py) or nvidia-smi, so that the parent
process never creates a CUDA context of its own on the GPUs it measures.
"""
from __future__ import annotations

import datetime
import functools
import importlib.metadata
import importlib.util
import json
import os
import platform
import runpy
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from bench.core.imports import ROOT


def cudnn_version(value) -> str:
    """cuDNN's version number in its usual form: 91900 -> 9.19, 8902 -> 8.9 (torch gives the integer)."""
    try:
        number = int(float(value))
    except (TypeError, ValueError):
        return str(value)
    if number >= 9000 * 10:  # cuDNN 9: major * 10000 + minor * 100 + patch
        return f"{number // 10000}.{number % 10000 // 100}"
    return f"{number // 1000}.{number % 1000 // 100}"  # cuDNN 8 and before: major * 1000 + minor * 100 + patch


def _run(cmd: list[str], timeout: float = 20) -> str | None:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
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
    except Exception:  # noqa: BLE001 - no NVML: ask nvidia-smi
        pass
    out = _run(["nvidia-smi", "--query-gpu=index,name,memory.total,driver_version", "--format=csv,noheader,nounits"])
    if out:
        found = []
        for line in out.splitlines():
            idx, name, mem, driver = (x.strip() for x in line.split(","))
            found.append({"index": int(idx), "name": name, "memory_mib": float(mem), "driver": driver})
        return found
    return []  # not torch: asking it would create a CUDA context in the parent


def gpu_count() -> int:
    """CUDA devices usable by torch here (respects CUDA_VISIBLE_DEVICES).

    The sweep's parent never imports torch (seconds of start-up, and a Ctrl-C inside it is a
    long traceback): from NVML where CUDA_VISIBLE_DEVICES is unset or a list of indices, none
    on a Linux host without GPU device files, else torch asked in a child process (UUIDs,
    MIG, no NVML)."""
    on_host = len(gpus_on_host())
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if on_host and visible is None:
        return on_host
    if on_host and all(x.strip().lstrip("-").isdigit() for x in visible.split(",") if x.strip()):
        count = 0
        for x in (x.strip() for x in visible.split(",")):
            if not x or not 0 <= int(x) < on_host:
                break  # CUDA ignores an invalid index and everything after it
            count += 1
        return count
    if not on_host and not _gpu_device_files():
        return 0
    out = _run([sys.executable, "-c",
                "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"],
               timeout=300)  # torch's import and CUDA's start on a busy host
    return int(out) if out and out.isdigit() else 0


# Where a GPU driver exposes its devices (NVIDIA, WSL's GPU paravirtualisation, AMD ROCm):
# without any of these, no CUDA device can be there.
_GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/dxg", "/dev/kfd")


def _gpu_device_files() -> bool:
    return not sys.platform.startswith("linux") or any(os.path.exists(p) for p in _GPU_DEVICE_FILES)


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
def torch_build() -> dict:
    """torch's version, CUDA version and commit, read from its installed version.py: the
    sweep's parent never imports torch (1.4 s on a 2-core machine, and an import while a
    worker measures would share that worker's CPU)."""
    spec = importlib.util.find_spec("torch")
    version_py = (os.path.join(spec.submodule_search_locations[0], "version.py")
                  if spec and spec.submodule_search_locations else "")
    if not os.path.isfile(version_py):
        return {"torch": _version("torch"), "cuda": None, "torch_git": None}
    facts = runpy.run_path(version_py)
    return {"torch": facts.get("__version__"), "cuda": facts.get("cuda"), "torch_git": facts.get("git_version")}


def runtime_libraries() -> dict:
    """cuDNN and NCCL as the worker's torch loaded them (the worker reports them per case)."""
    import torch

    try:
        nccl = ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - builds without NCCL
        nccl = None
    return {"cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else None,
            "nccl": nccl}


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=1)
def collect() -> dict:
    """The facts of this machine and software that need no torch import (see torch_build)."""
    commit = _run(["git", "rev-parse", "--short=12", "HEAD"])
    if commit and _run(["git", "status", "--porcelain", "--untracked-files=no"]):
        commit += "-dirty"
    gpus = gpus_on_host()
    return {
        "gpu_count_host": len(gpus),
        "driver": gpus[0]["driver"] if gpus else None,
        **torch_build(),
        "numpy": _version("numpy"),
        "python": platform.python_version(),
        **collect_light(),
        "platform": platform.platform(),
        "git_commit": commit,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(portable(a)) for a in sys.argv),
        "host_memory_gib": round(_host_memory() / 2**30, 1),
        "environment": json.dumps(variables(), sort_keys=True),
    }


def _host_memory() -> int:
    import psutil

    return psutil.virtual_memory().total


# The variables that change what a run measures, recorded as they were in force: NCCL's, and
# whether the profiler lets go of the GPU after a case's counting (bench/measure/counters.py).
VARIABLE_PREFIXES = ("NCCL_", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL_", "OMP_NUM_THREADS", "TEARDOWN_CUPTI",
                     "PARABENCH_LOWER_BACKWARD")  # a search's workers beside side compiles (bench/run/precompile.py)


def variables() -> dict:
    found = {k: v for k, v in os.environ.items() if k.startswith(VARIABLE_PREFIXES)}
    # What parabench sets for its workers unless told otherwise.
    found.setdefault("NCCL_NVLS_ENABLE", "0")
    from bench.measure.counters import detaching_is_safe

    if detaching_is_safe(torch_build()["cuda"]):  # as the workers' counting does (no torch import here)
        found.setdefault("TEARDOWN_CUPTI", "1")
    return found


def portable(text: str) -> str:
    """A command-line argument without this machine's folders: paths inside the working
    directory become relative, others keep their last part."""
    def one(path: str) -> str:
        if not os.path.isabs(path):
            return path
        rel = os.path.relpath(path)
        return rel if not rel.startswith("..") else ".../" + os.path.basename(path.rstrip("/"))

    if "=" in text and text.startswith("-"):
        flag, _, value = text.partition("=")
        return f"{flag}={one(value)}"
    return one(text)


def portable_output(text: str) -> str:
    """A worker's output with the checkout's and the interpreter's folders shortened."""
    if not text:
        return text
    for folder, name in ((str(ROOT), "<parabench>"), (sys.prefix, "<python>"), (sys.base_prefix, "<python>"),
                         (str(Path.home()), "~")):
        if folder and folder not in ("/", ""):
            text = text.replace(folder, name)
    return text


@functools.lru_cache(maxsize=None)
def topology(gpu_ids: tuple[int, ...]) -> str | None:
    """How each pair of the case's GPUs is connected, from NVML: "0-1 NV18" where they reach
    each other over NVLink (directly or through NVSwitch; the number is the first GPU's active
    links, as `nvidia-smi topo -m` prints it), else the PCIe level that joins them."""
    if len(gpu_ids) < 2:
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        handles = {i: pynvml.nvmlDeviceGetHandleByIndex(i) for i in gpu_ids}

        def active_links(handle) -> int:
            count = 0
            for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
                try:
                    count += pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
                except pynvml.NVMLError:
                    break
            return count

        levels = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
        pairs = []
        for n, a in enumerate(gpu_ids):
            for b in gpu_ids[n + 1:]:
                nvlink = pynvml.nvmlDeviceGetP2PStatus(handles[a], handles[b], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if nvlink == pynvml.NVML_P2P_STATUS_OK and active_links(handles[a]):
                    pairs.append(f"{a}-{b} NV{active_links(handles[a])}")
                else:
                    level = pynvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b])
                    pairs.append(f"{a}-{b} {levels.get(level, level)}")
        return "; ".join(pairs)
    except Exception:  # noqa: BLE001 - no NVML, or a driver without these calls
        return None



def for_gpus(gpu_ids: tuple[int, ...]) -> dict:
    """GPU name and memory of the GPUs a case ran on ('cpu' for the CPU)."""
    if not gpu_ids:
        return {"gpu_name": "cpu", "gpu_memory_mib": None, "gpu_topology": None}
    by_index = {g["index"]: g for g in gpus_on_host()}
    names = sorted({by_index[i]["name"] if i in by_index else "unknown" for i in gpu_ids})
    mems = [by_index[i]["memory_mib"] for i in gpu_ids if i in by_index and by_index[i]["memory_mib"]]
    return {"gpu_name": " + ".join(names), "gpu_memory_mib": min(mems) if mems else None,
            "gpu_topology": topology(tuple(gpu_ids))}


def load_average() -> float | None:
    """The host's 1-minute load average (None where the platform has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
