"""A child process that dies with its parent (Linux): the kernel's parent-death signal.

Torch-free and psutil-free, so that any room may start a helper process that cannot
outlive it (a SIGKILLed parent runs no clean-up of its own)."""
from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1
# Looked up once here: the child between fork and exec (preexec_fn) must not load libraries.
try:
    prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None
except (OSError, AttributeError):
    prctl = None


def kill_with_parent(parent: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits, then leave at once if
    the parent (`parent`, its PID, known before the fork) is already gone: one that died
    before the request would never signal. Safe between fork and exec (preexec_fn)."""
    if prctl is None:
        return
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


# A temporary folder that the next sweep removes if its process dies without removing it
# (bench/run/procs.py remove_stale): the prefix every such folder has, and the file its process
# holds locked while it lives (the kernel releases the lock with the process, SIGKILL included).
SCRATCH_PREFIX = "parabench-sweep-"
LIVE = "live.lock"


def lock_folder(path: str) -> int:
    """Hold `path`'s LIVE lock for as long as this process lives (or until the returned
    descriptor is closed). Locked under another name, then renamed: no sweep ever sees the
    lock file unlocked. Not inherited by children (O_CLOEXEC)."""
    import fcntl

    pending = os.path.join(path, f".{LIVE}")
    fd = os.open(pending, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.rename(pending, os.path.join(path, LIVE))
    return fd


def end_processes_in(folder: str) -> int:
    """SIGKILL every process (this one aside) whose TMPDIR lies in `folder`; returns how many.

    A worker's TMPDIR is its folder in the sweep's scratch folder, and whatever it starts
    inherits it: a helper that a model's factory starts in a session of its own is neither the
    worker's descendant once the worker is gone nor in its process group, but it carries the
    worker's environment."""
    import psutil  # here, not at the top: the module stays importable without it

    inside = os.path.join(os.path.realpath(folder), "")
    ended = []
    for proc in psutil.process_iter():
        try:
            tmpdir = proc.environ().get("TMPDIR")
            if not tmpdir or not os.path.isabs(tmpdir) or proc.pid == os.getpid():
                continue  # a relative TMPDIR names a folder of that process's own working directory
            if os.path.join(os.path.realpath(tmpdir), "").startswith(inside):
                proc.kill()
                ended.append(proc)
        except psutil.Error:  # gone, a zombie, or another user's
            continue
    psutil.wait_procs(ended, timeout=5)
    return len(ended)
