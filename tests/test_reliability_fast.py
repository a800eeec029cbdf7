"""Reliability, fast: each fault an adversarial user or a new user found, proved without a
measuring sweep where possible (the sweep-level faults are in test_reliability.py)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.cases import results
from tests.conftest import REPO, run_cli


# A worker's output is read in time proportional to its length, and one line of it is kept
# to its last part: a 32 MiB line without a newline took 9 s (quadratic) and was kept whole.
def test_a_huge_output_line_is_read_in_linear_time_and_kept_short():
    from bench.run.procs import Worker, _LineTail

    started = time.monotonic()
    worker = Worker([sys.executable, "-c", "import sys; sys.stdout.write('ab' * 16 * 2**20 + 'END'); "
                     "sys.stdout.write('\\nlast line')"], dict(os.environ), str(REPO))
    worker.proc.wait()
    worker._reader.join(timeout=60)
    assert time.monotonic() - started < 5
    lines = list(worker.tail)
    assert lines[-1] == "last line"
    assert lines[-2].startswith(f"[{32 * 2**20 + 3 - _LineTail.LIMIT} characters cut] ") and lines[-2].endswith("abEND")
    assert len(lines[-2]) < _LineTail.LIMIT + 40
