"""Worker processes: started in their own session, read line by line, killed as a tree.

torchrun starts its ranks in sessions of their own, so killing the launcher's process
group is not enough: `kill_tree` collects every descendant first and kills them all.
"""
from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading

import psutil

from bench import protocol

_EOF = object()


class Worker:
    def __init__(self, cmd: list[str], env: dict, cwd: str, tail_lines: int = 40):
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, text=True, errors="replace", bufsize=1,
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._events: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            event = protocol.parse(line)
            if event is None:
                self.tail.append(line.rstrip("\n"))
            else:
                self._events.put(event)
        self._events.put(_EOF)

    def next_event(self, timeout: float) -> dict | None:
        """The next event; None on timeout; raises EOFError once the output has ended."""
        try:
            event = self._events.get(timeout=max(timeout, 0.01))
        except queue.Empty:
            return None
        if event is _EOF:
            raise EOFError
        return event

    def output_tail(self, lines: int = 20) -> str:
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
