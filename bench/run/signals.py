"""How a sweep stops on a signal: Ctrl-C, SIGTERM (a service manager) and SIGHUP (a closed
terminal) all stop it the same way, and the clean-up after the first one is never cut."""
from __future__ import annotations

import contextlib
import signal
import sys

# Signals that stop a sweep as Ctrl-C does: the service manager's and the closed terminal's.
TERMINATING = (signal.SIGTERM, signal.SIGHUP)


class Terminated(Exception):
    """SIGTERM or SIGHUP arrived: the sweep stops as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_status(self) -> int:
        return 128 + self.signum  # the shell's convention: 143 for SIGTERM, 129 for SIGHUP


def _raise_terminated(signum, frame):
    raise Terminated(signum)


def stop_on_signals() -> dict:
    """SIGTERM and SIGHUP raise Terminated from now on; returns the handlers they had."""
    return {signum: signal.signal(signum, _raise_terminated) for signum in TERMINATING}


def ignore_further_signals() -> None:
    """The sweep is stopping on a Ctrl-C, SIGTERM or SIGHUP: later ones are dropped, so that
    nothing cuts the message that says where the results are, nor the exit status."""
    for signum in (signal.SIGINT, *TERMINATING):
        signal.signal(signum, signal.SIG_IGN)


def stopping_on_signal() -> bool:
    """Whether the exception being handled here is the sweep's Ctrl-C or SIGTERM."""
    return isinstance(sys.exc_info()[1], (KeyboardInterrupt, Terminated))


@contextlib.contextmanager
def signals_held(stopping: bool = False):
    """Clean-up that a second Ctrl-C or SIGTERM must not interrupt: the signals wait until it
    is done. When the clean-up runs because the sweep is stopping on one, the later ones are
    dropped (the clean-up can take milliseconds, and a second Ctrl-C can come after it)."""
    held = {signal.SIGINT, *TERMINATING}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        if stopping:
            ignore_further_signals()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
