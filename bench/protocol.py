"""The line protocol between a worker and the sweep: one JSON event per line on stdout.

Kept free of torch and mxnet imports so that workers in other interpreters (the
MXNet environment) speak it too.
"""
from __future__ import annotations

import json
import sys

PREFIX = "@@parabench "

# Exit code a worker uses after it reported an out-of-memory case.
EXIT_AFTER_OOM = 75
EXIT_AFTER_ERROR = 76


def emit(event: str, **fields) -> None:
    sys.stdout.write(PREFIX + json.dumps({"event": event, **fields}, default=str) + "\n")
    sys.stdout.flush()


def parse(line: str) -> dict | None:
    if not line.startswith(PREFIX):
        return None
    try:
        return json.loads(line[len(PREFIX):])
    except json.JSONDecodeError:
        return None
