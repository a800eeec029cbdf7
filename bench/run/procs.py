"""Worker processes: started in their own session, tied to the parent's life, killed as a tree.

A worker dies with its parent on every path: the Linux parent-death signal is set in the
child before it runs (so a SIGKILLed sweep takes its workers along), and each worker sets
it again for itself (so torchrun's ranks die with torchrun). torchrun starts its ranks in
sessions of their own, so killing the launcher's process group is not enough: `kill_tree`
collects every descendant first and kills them all.

The sweep makes itself the subreaper of what it starts: a killed rank whose launcher died
with it is handed to the sweep, which reaps it at once, instead of to PID 1 (a container's
init may reap seconds later; that wait was 1.9 s per torchrun worker on the CI machine).

Whatever workers are given or write on disk lives in the sweep's scratch folder (`Scratch`),
removed however the sweep ends: by the sweep itself, or by a guard process that waits for the
sweep's end (SIGKILL included), or, should the guard be killed too, by the next sweep. Whether
a folder's sweep still runs is told by a lock it holds, not by a PID: a sweep in another PID
namespace (a container, `unshare --pid`) has PIDs that mean nothing here.
"""
from __future__ import annotations

import codecs
import collections
import fcntl
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import psutil

from bench.core.imports import pythonpath
from bench.core.lifetime import (LIVE, SCRATCH_PREFIX, end_processes_in, kill_with_parent, lock_folder,
                                 prctl as _prctl)

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


# The PID of the process that started the worker (the sweep, or a node's follower): every
# process of the worker, torchrun's ranks included, checks that it still descends from it.
PARENT_ENV = "PARABENCH_PARENT_PID"


def die_with_parent(parent: int | None = None) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux), then leave at once
    if the parent is already gone: one that died before the request would never signal.

    `parent` is the PID of the direct parent (known between fork and exec). Without it, the
    process that started the worker (PARENT_ENV) must still be an ancestor: an orphan's new
    parent may be any subreaper, not PID 1, so `getppid() == 1` proves nothing."""
    if _prctl is None:
        return
    if parent is not None:
        kill_with_parent(parent)
        return
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    origin = os.environ.get(PARENT_ENV)
    if origin and not _descends_from(int(origin)):
        os._exit(1)


def _descends_from(pid: int) -> bool:
    try:
        return any(p.pid == pid for p in psutil.Process().parents())
    except psutil.Error:
        return False


def become_subreaper() -> None:
    """Orphaned descendants come to this process (Linux), so that `kill_tree` can reap them."""
    if _prctl is not None:
        _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


class _LineTail:
    """The end of one output line, at most LIMIT characters: a line of megabytes (a progress
    bar without newlines, a dump) keeps its last part and says how much was cut."""

    LIMIT = 2000

    def __init__(self):
        self.kept, self.cut = "", 0

    def add(self, piece: str) -> None:
        joined = self.kept + piece[-self.LIMIT:]
        self.cut += len(self.kept) + len(piece) - min(len(joined), self.LIMIT)
        self.kept = joined[-self.LIMIT:]

    def text(self) -> str:
        return f"[{self.cut} characters cut] {self.kept}" if self.cut else self.kept


class Worker:
    """A worker command; its combined stdout/stderr is kept as output (a tail), never parsed."""

    def __init__(self, cmd: list[str], env: dict, cwd: str, tail_lines: int = 80):
        env = {**env, PARENT_ENV: str(os.getpid())}
        become_subreaper()
        self.proc = subprocess.Popen(
            cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=functools.partial(die_with_parent, os.getpid()),
        )
        self.tail: collections.deque[str] = collections.deque(maxlen=tail_lines)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        # Bytes, split on newlines here: output without a final newline is kept too. Each
        # chunk is looked at once, so a line of any length costs time in proportion to it.
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        line = _LineTail()
        for chunk in iter(lambda: self.proc.stdout.read1(65536), b""):
            *ended, rest = decoder.decode(chunk).split("\n")
            for piece in ended:
                line.add(piece)
                self.tail.append(line.text())
                line = _LineTail()
            line.add(rest)
        line.add(decoder.decode(b"", final=True))
        if line.text():
            self.tail.append(line.text())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def drain(self, timeout_s: float = 5.0) -> None:
        """After the process has exited: wait until its last output is read into the tail."""
        self._reader.join(timeout=timeout_s)

    def output_tail(self, lines: int = 40, chars: int = 4000) -> str:
        """The last `lines` lines, at most `chars` characters of them (the end): what a row keeps."""
        return "\n".join(list(self.tail)[-lines:])[-chars:]

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


# The guard: blocks on its stdin, a pipe whose other end only the sweep holds. The read
# returns when the sweep has ended, however it ended; the guard ends what the workers left
# running (lifetime.end_processes_in) and removes the folder (again a few times: a worker killed at
# that moment may still be writing into it).
_GUARD = """
import os, shutil, sys, time
sys.stdin.buffer.read()
try:
    from bench.core.lifetime import end_processes_in
    end_processes_in(sys.argv[1])
except Exception:
    pass  # the folder goes all the same
for _ in range(10):
    shutil.rmtree(sys.argv[1], ignore_errors=True)
    if not os.path.exists(sys.argv[1]):
        break
    time.sleep(0.2)
"""
OWNER = "owner.json"  # who made the folder (PID, host, time): for a person who finds it


class Scratch:
    """The sweep's temporary folder: every worker's spec and events channel live in it.

    Removed when the sweep ends, on every path: by `close`, or by the guard process when the
    sweep is killed (the guard runs in a session of its own, out of reach of the terminal's
    Ctrl-C and of a signal to the sweep's process group). A folder whose guard was killed as
    well is removed by the next sweep (`remove_stale`): nothing holds its lock any more. The
    kernel releases a lock with the last process that held it, in whatever PID namespace."""

    def __init__(self):
        remove_stale()
        self.path = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        self._live = lock_folder(self.path)
        me = psutil.Process()
        with open(os.path.join(self.path, OWNER), "w") as fh:
            json.dump({"pid": me.pid, "create_time": me.create_time()}, fh)
        read_end, self._write_end = os.pipe()  # not inherited: workers never hold the sweep's end
        try:
            self.guard = subprocess.Popen([sys.executable, "-c", _GUARD, self.path], stdin=read_end,
                                          env={**os.environ, "PYTHONPATH": pythonpath()}, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True)
        finally:
            os.close(read_end)

    def folder(self, prefix: str) -> str:
        return tempfile.mkdtemp(prefix=prefix, dir=self.path)

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._live is not None:
            os.close(self._live)
            self._live = None
        if self._write_end is not None:
            os.close(self._write_end)  # the guard reads the end of its input and leaves
            self._write_end = None
            try:
                self.guard.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.guard.kill()
                self.guard.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def remove_stale(folder: str | None = None) -> list[str]:
    """Remove the scratch folders of sweeps that are gone (no process holds their lock);
    returns what was removed. Folders without a lock file are left alone: nothing says
    whether their sweep still runs."""
    removed = []
    for path in sorted(Path(folder or tempfile.gettempdir()).glob(SCRATCH_PREFIX + "*")):
        try:
            fd = os.open(path / LIVE, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its sweep runs
        finally:
            os.close(fd)
        end_processes_in(str(path))  # a worker's helper whose guard was killed with the sweep
        shutil.rmtree(path, ignore_errors=True)
        removed.append(str(path))
    return removed
