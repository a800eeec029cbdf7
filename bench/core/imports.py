"""Where this code is imported from: the folder holding the `bench` and `strategies` packages
(a checkout, or site-packages when installed). Workers start with it first on PYTHONPATH, so
that every process of a sweep runs this very code, whatever the current folder."""
from __future__ import annotations

import os
from pathlib import Path

import bench

ROOT = Path(bench.__file__).resolve().parent.parent


def pythonpath(env: dict | None = None) -> str:
    """PYTHONPATH for a worker: ROOT first, then what `env` (or this process) had."""
    given = (os.environ if env is None else env).get("PYTHONPATH")
    return os.pathsep.join(filter(None, [str(ROOT), given]))
