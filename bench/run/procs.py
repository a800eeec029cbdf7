"""Worker processes: started in their own session, tied to the parent's life, killed as a tree.

A worker dies with its parent on every path: the Linux parent-death signal is set in the
child before it runs (so a SIGKILLed sweep takes its workers along), and each worker sets
it again for itself (so torchrun's ranks die with torchrun). torchrun starts its ranks in
sessions of their own, so killing the launcher's process group is not enough: `kill_tree`
collects every descendant first and kills them all.

The sweep makes itself the subreaper of what it starts: a killed rank whose launcher died
with it is handed to the sweep, which reaps it at once, instead of to PID 1 (a container's
init may reap seconds later; that wait was 1.9 s per torchrun worker on the CI machine).
"""
from __future__ import annotations

import collections
import ctypes
import os
import signal
import subprocess
import sys
import threading

import psutil

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
# Looked up once here: the child between fork and exec (preexec_fn) must not load libraries.
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    _prctl = None


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux only); if the
    parent is already gone, leave now."""
    if _prctl is None:
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    expected = os.environ.get("PARABENCH_PARENT_PID")
    if expected and os.getppid() != int(expected) and os.getppid() == 1:
        os._exit(1)


def become_subreaper() -> None:
    """Orphaned descendants come to this process (Linux), so that `kill_tree` can reap them."""
    if _prctl is not None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class Worker:
    """A worker command; its combined stdout/stderr is kept as output (a tail), never parsed."""

    def __init__(self, cmd: list[str], env: dict, cwd: str, tail_lines: int = 80):
        env = {**env, "PARABENCH_PARENT_PID": str(os.getpid())}
        become_subreaper()
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=die_with_parent,
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Bytes, split on newlines here: output without a final newline is kept too.
        partial = ""
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
            *lines, partial = (partial + chunk.decode(errors="replace")).split("\n")
            self.tail.extend(lines)
        if partial:
            self.tail.append(partial)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def output_tail(self, lines: int = 40) -> str:
        return "\n".join(list(self.tail)[-lines:])

    def exit_description(self) -> str:
        code = self.proc.wait()
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit code {code}"

    def kill(self, grace_s: float = 0.0) -> None:
        """Kill the worker and everything it started; `grace_s` lets a worker that is
        already leaving exit by itself first, so that its own exit status is kept."""
        if grace_s:
            try:
                self.proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
        kill_tree(self.proc.pid)
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self._reader.join(timeout=5)


def kill_tree(pid: int) -> None:
    """SIGKILL every descendant of `pid` (in any session) and its process group.

    The root itself is left to its parent, which reaps it and so keeps its exit status.
    """
    try:
        descendants = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    for proc in descendants:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    psutil.wait_procs(descendants, timeout=5)
