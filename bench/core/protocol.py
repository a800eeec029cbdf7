"""The channel between a worker and the sweep: one JSON event per line, appended to an
events file of its own (PARABENCH_EVENTS) that the parent tails.

Never stdout: whatever user code prints (a line without a newline, a progress bar) stays
output and cannot break or fake a result. A file, unlike an inherited pipe, also reaches
the ranks that torchrun starts. Kept free of torch and mxnet imports so that workers in
other interpreters (the MXNet environment) speak it too.
"""
from __future__ import annotations

import json
import os

ENV = "PARABENCH_EVENTS"
NODE_RANK_ENV = "PARABENCH_NODE_RANK"  # the worker's node in a multi-node sweep (bench/run/nodes.py)
# Set ("1") in a search's workers while side processes compile beside it (bench/run/precompile.py):
# they lower each backward with its forward as the side processes do (training.lower_backward_with_forward).
LOWER_BACKWARD_ENV = "PARABENCH_LOWER_BACKWARD_WITH_FORWARD"

# Exit codes a worker uses after it reported a failed case.
EXIT_AFTER_OOM = 75
EXIT_AFTER_ERROR = 76


def emit(event: str, **fields) -> None:
    """Append one event; a single write of one whole line, so a reader never sees half of it."""
    path = os.environ.get(ENV)
    if not path:
        raise RuntimeError(f"{ENV} is not set: workers are started by `python -m bench run`")
    line = (json.dumps({"event": event, **fields}, default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


class EventReader:
    """The parent's side: new complete events since the last call."""

    def __init__(self, path: str):
        self.path = path
        self.offset = 0
        self.partial = b""

    def poll(self) -> list[dict]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        data = self.partial + data
        *lines, self.partial = data.split(b"\n")
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if isinstance(event, dict) and "event" in event:
                events.append(event)
        return events
