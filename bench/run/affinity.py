"""Which CPUs a worker's processes run on: the `cpu_bind` knob (bench/core/knobs.py).

exclusive: the CPUs a worker was started with are split into contiguous blocks, one per
process on the host, within the NUMA node of each process's GPU where the host has several
(torchrun --numa-binding=exclusive's rule): no two ranks' threads share a CPU.
none: every CPU the worker was started with; the kernel places the threads.

exclusive is what careful multi-GPU setups do (torchrun --numa-binding, Slurm's --cpu-bind);
it is not the default because it did not measure better here: on one host of 2 H200 (a
virtual machine of 32 CPUs), the same 2-GPU DDP case (resnet18-small, amp-bf16, 256 and 1024
per GPU) ran three times each way, and the spread from run to run was alike bound and
unbound (`git show 80034f4:results/reference/h200x2/predict-validate/run-3/repeat/`, with
`host-launch-rate.txt` beside it). What binding does rule out, a
virtual machine hiding which of its CPUs share a physical core: two processes pinned to CPUs
2 and 3 there each launched kernels at half the rate of two pinned to CPUs 2 and 18.
"""
from __future__ import annotations

import os
from pathlib import Path

_STARTED: list[int] | None = None  # the CPUs this process was started with


def cpu_ranges(cpus) -> str:
    """"0-15,32" for [0..15, 32]."""
    cpus, out = sorted(cpus), []
    for cpu in cpus:
        if out and cpu == out[-1][1] + 1:
            out[-1][1] = cpu
        else:
            out.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in out)


def parse_ranges(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in filter(None, text.strip().split(",")):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def split(cpus: list[int], index: int, parts: int) -> list[int]:
    """Block `index` of `parts` contiguous blocks of `cpus`; the first blocks take one more
    where they do not divide evenly. Fewer CPUs than parts: every block is all of them."""
    per, extra = divmod(len(cpus), parts)
    if per == 0:
        return list(cpus)
    start = index * per + min(index, extra)
    return list(cpus[start:start + per + (index < extra)])


def numa_node_of_gpu(ordinal: int) -> int | None:
    """The NUMA node sysfs gives the GPU's PCI device, None where it says none (-1) or is not there."""
    try:
        import torch

        props = torch.cuda.get_device_properties(ordinal)
        address = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
        node = int(Path(f"/sys/bus/pci/devices/{address}/numa_node").read_text())
    except (AttributeError, OSError, ValueError, RuntimeError):
        return None
    return node if node >= 0 else None


def numa_nodes() -> dict[int, set[int]]:
    nodes = {}
    for folder in Path("/sys/devices/system/node").glob("node[0-9]*"):
        try:
            nodes[int(folder.name[4:])] = parse_ranges((folder / "cpulist").read_text())
        except (OSError, ValueError):
            continue
    return nodes


def exclusive_cpus(started: list[int], local_rank: int, local_ranks: int, gpus: list[int]) -> list[int]:
    """This process's block: of its GPU's NUMA node's CPUs when the host has several nodes and
    sysfs names the GPU's, split among the local ranks whose GPUs are on that node; else of
    every CPU, split among every local rank."""
    nodes = numa_nodes()
    if len(nodes) > 1 and gpus:
        where = [numa_node_of_gpu(gpus[r % len(gpus)]) for r in range(local_ranks)]
        mine = where[local_rank]
        on_node = sorted(set(started) & nodes.get(mine, set())) if None not in where else []
        if on_node:
            sharing = [r for r in range(local_ranks) if where[r] == mine]
            return split(on_node, sharing.index(local_rank), len(sharing))
    return split(started, local_rank, local_ranks)


def bind(mode: str, local_rank: int, local_ranks: int, gpus: list[int]) -> list[int]:
    """Put every thread of this process on the CPUs `mode` gives it (threads started later
    inherit them); returns them. Where the platform cannot set affinity, the CPUs are left as they are."""
    global _STARTED
    if not hasattr(os, "sched_setaffinity"):
        return []
    if _STARTED is None:
        _STARTED = sorted(os.sched_getaffinity(0))
    cpus = exclusive_cpus(_STARTED, local_rank, local_ranks, gpus) if mode == "exclusive" else _STARTED
    for task in os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]:
        try:
            os.sched_setaffinity(int(task), cpus)
        except OSError:  # a thread that ended meanwhile
            pass
    return cpus


def cores(cpus: list[int]) -> list[list[int]]:
    """`cpus` grouped by physical core, in order: by sysfs's thread siblings where it shows a core
    of several CPUs; where it shows none (these virtual machines list every CPU alone, yet two
    adjacent CPUs launched kernels at half the rate: the note above), adjacent pairs."""
    cpus, groups, seen = sorted(cpus), [], set()
    siblings = {}
    for cpu in cpus:
        try:
            text = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read_text()
            siblings[cpu] = sorted(parse_ranges(text) & set(cpus))
        except (OSError, ValueError):
            siblings[cpu] = [cpu]
    if not any(len(group) > 1 for group in siblings.values()):
        return [cpus[i:i + 2] for i in range(0, len(cpus), 2)]
    for cpu in cpus:
        if cpu not in seen:
            groups.append(siblings[cpu] or [cpu])
            seen.update(groups[-1])
    return groups


def side_cpus(cpus: list[int]) -> list[int]:
    """The CPUs left to work beside the measured workers (bench/run/precompile.py): the whole cores
    of the last half of `cpus` (`cores`), so that a worker the kernel places on the first half has
    no busy sibling. Fewer than 2 cores: all of them."""
    groups = cores(cpus)
    if len(groups) < 2:
        return sorted(cpus)
    return sorted(cpu for group in groups[len(groups) - len(groups) // 2:] for cpu in group)
