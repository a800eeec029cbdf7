"""Resolving model names that are not built in, in a process of their own (`probe`), so that the
sweep's parent imports neither torch nor the user's module: the parent's side here, the process's
in bench/workloads/_probe.py; what it found (`PROBED`) gives `bench.workloads.data_of` the data of
such a name, torch-free.
"""
from __future__ import annotations

import functools

from bench.workloads import WorkloadError, builtin

# What `probe` found of each name that is not built in, in this process (its data among it).
PROBED: dict[str, dict] = {}


def probe(names: list[str], timeout_s: float = 300) -> dict[str, dict]:
    """Resolve the names that are not built in, in a process of their own (as a worker
    would: the repository and PYTHONPATH on its path), so that the caller imports neither
    torch nor the user's module: {name: facts}; WorkloadError (one line) for the first name
    that cannot be built, or when resolving takes over `timeout_s` (the sweep's
    --startup-timeout: a factory that loads weights may take long). Costs that process's
    torch import, only where such names are given. The answer comes in a file of its own,
    never on stdout, where the user's code may print anything (a line without a newline
    too); the process dies with the caller, SIGKILL included."""
    import json
    import os
    import subprocess
    import sys
    import tempfile

    from bench.core.imports import ROOT, pythonpath
    from bench.core.lifetime import SCRATCH_PREFIX, end_processes_in, kill_with_parent, lock_folder

    others = [n for n in dict.fromkeys(names) if builtin(n) is None]
    if not others:
        return {}
    # A folder the next sweep removes should this process be killed while the factory resolves,
    # with whatever the factory left running there (its TMPDIR: bench/core/lifetime.py end_processes_in).
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIX}probe-") as folder:
        env = {**os.environ, "PYTHONPATH": pythonpath(), "TMPDIR": folder}
        live = lock_folder(folder)
        try:
            answer = os.path.join(folder, "answer.jsonl")
            # Its output goes to a file and the wait is for the process, not for the end of its
            # output: a helper process the factory starts holds pipes open, never a file. In a
            # process group of its own, so that such helpers end with it.
            with open(os.path.join(folder, "output.txt"), "w+", errors="replace") as output:
                dies_with_us = functools.partial(kill_with_parent, os.getpid())
                proc = subprocess.Popen([sys.executable, "-m", "bench.workloads._probe", answer, *others], cwd=ROOT,
                                        env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=output,
                                        start_new_session=True, preexec_fn=dies_with_us)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    raise WorkloadError(f"resolving {', '.join(others)} took over {timeout_s:g} s: give its factory "
                                        f"more time with a larger --startup-timeout") from None
                finally:
                    _end_group(proc)
                    end_processes_in(folder)  # a helper that left the probe's tree still carries its TMPDIR
                output.seek(0)
                printed = output.read()
            try:
                with open(answer) as fh:
                    lines = fh.read().splitlines()
            except OSError:
                lines = []
        finally:
            os.close(live)
    found = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("name") in others:
            found[entry["name"]] = entry
    for name in others:
        if name in found and "error" not in found[name]:
            PROBED[name] = found[name]
        if name not in found:
            output = printed.strip().splitlines()
            tail = output[-1][-300:] if output else "no output"
            raise WorkloadError(f"model {name!r}: resolving it failed (exit {proc.returncode}): {tail}")
        if "error" in found[name]:
            raise WorkloadError(found[name]["error"])
    return found


def _end_group(proc) -> None:
    """SIGKILL the probe's process group (the probe, and what it started and left behind), and
    its descendants in sessions of their own, which the group does not reach; reap it."""
    import os
    import signal

    import psutil

    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:
        try:
            child.kill()
        except psutil.Error:
            pass
    proc.wait()
