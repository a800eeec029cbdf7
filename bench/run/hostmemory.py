"""This host's memory as the sweep may use it: the limit of its memory cgroup counted (a
container's, a Slurm job's, systemd's), and the kernel's out-of-memory kills counted.

A process in a cgroup with `memory.max` (v2) or `memory.limit_in_bytes` (v1) is killed by
the kernel when the group passes it, whatever the host has free: `available` is the least
of the host's available memory and the room left in this process's cgroup and each of its
ancestors. Page cache the kernel may reclaim (inactive file pages) counts as room, as the
kernel counts it. `oom_kills` reads how many processes the OOM killer has ended, in the
cgroup (v2 memory.events, v1 memory.oom_control) and on the host (/proc/vmstat): a worker
that died while a count rose was killed for memory.
"""
from __future__ import annotations

from pathlib import Path

# A limit at or above this is "no limit" (v1 writes 2**63 rounded down to the page size).
_UNLIMITED = 2**60


def _mount_points() -> dict[str, tuple[str, str]]:
    """{'v1' or 'v2': (root inside the hierarchy, mount point)} of the memory controller."""
    found = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, after = left.split(), right.split()
        if len(fields) < 5 or len(after) < 3:
            continue
        if after[0] == "cgroup2":
            found.setdefault("v2", (fields[3], fields[4]))
        elif after[0] == "cgroup" and "memory" in after[2].split(","):
            found.setdefault("v1", (fields[3], fields[4]))
    return found


def cgroup_folders() -> list[tuple[str, Path]]:
    """This process's memory cgroup folders, innermost first, up to the hierarchy's mount:
    [(version, folder)]. The v1 memory controller where it is mounted (it then holds the
    limits), else v2 where its folders have memory files; [] where neither is readable."""
    mounts = _mount_points()
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    paths = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "" and "v2" in mounts:
            paths["v2"] = path
        elif "memory" in controllers.split(",") and "v1" in mounts:
            paths["v1"] = path
    for version in ("v1", "v2"):
        if version not in paths:
            continue
        root, mount = mounts[version]
        path = paths[version]
        inside = path[len(root):] if root != "/" and path.startswith(root) else path
        folder, top = Path(mount) / inside.lstrip("/"), Path(mount)
        chain = []
        while True:
            chain.append((version, folder))
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent
        if version == "v1" or any((f / "memory.max").exists() or (f / "memory.events").exists() for _, f in chain):
            return chain
    return []


def _number(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return _UNLIMITED
    return int(text) if text.isdigit() else None


def _field(path: Path, name: str) -> int | None:
    """A `name value` line of a flat keyed file (memory.stat, memory.events, memory.oom_control)."""
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name and value.strip().isdigit():
                return int(value)
    except OSError:
        pass
    return None


def cgroup_room() -> int | None:
    """Bytes left before this process's cgroup, or an ancestor, reaches its memory limit;
    None where no limit applies."""
    room = None
    for version, folder in cgroup_folders():
        if version == "v2":
            limit, usage = _number(folder / "memory.max"), _number(folder / "memory.current")
            reclaimable = _field(folder / "memory.stat", "inactive_file") or 0
        else:
            limit, usage = _number(folder / "memory.limit_in_bytes"), _number(folder / "memory.usage_in_bytes")
            reclaimable = _field(folder / "memory.stat", "total_inactive_file") or 0
        if limit is None or usage is None or limit >= _UNLIMITED:
            continue
        left = max(0, limit - max(0, usage - reclaimable))
        room = left if room is None else min(room, left)
    return room


def available() -> int:
    """Bytes a new allocation may take: the host's available memory, within the cgroup's room."""
    import psutil

    host = psutil.virtual_memory().available
    room = cgroup_room()
    return host if room is None else min(host, room)


def oom_kills() -> dict[str, int]:
    """How many processes the kernel's OOM killer has ended: in this process's cgroup
    ('cgroup', counting its descendants) and on the host ('host'), where the kernel says."""
    counts = {}
    folders = cgroup_folders()
    if folders:
        version, folder = folders[0]
        count = _field(folder / ("memory.events" if version == "v2" else "memory.oom_control"), "oom_kill")
        if count is not None:
            counts["cgroup"] = count
    host = _field(Path("/proc/vmstat"), "oom_kill")
    if host is not None:
        counts["host"] = host
    return counts


def oom_kills_since(before: dict[str, int]) -> str:
    """'' where no count rose since `before`, else what rose, for a row's reason. The cgroup's
    count where there is one: a kill on the host outside it ended someone else's process."""
    now = oom_kills()
    key = "cgroup" if "cgroup" in before and "cgroup" in now else "host"
    if key in before and key in now and now[key] > before[key]:
        return f"{'this cgroup' if key == 'cgroup' else 'the host'}: {before[key]} -> {now[key]}"
    return ""
