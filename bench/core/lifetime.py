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
