import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

# Tests that press Ctrl-C on a sweep need the terminal's disposition of SIGINT. A shell that
# starts pytest as a background job (a CI script's `cmd &`, nohup) ignores SIGINT, and every
# process started from here would inherit that and never see the Ctrl-C: take it back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """`python -m bench ARGS` as a user types it, from the repository root."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO, env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def rows_of(path) -> list[dict]:
    return json.loads(Path(path).read_text())["rows"]


# The test-only strategies (tests/strategies/), found by the registry through this variable.
TEST_STRATEGIES = {"PARABENCH_STRATEGY_PATH": str(REPO / "tests" / "strategies")}


@pytest.fixture
def faulty_env():
    return dict(TEST_STRATEGIES)


def cuda_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


needs_two_gpus = pytest.mark.skipif(cuda_gpus() < 2, reason="needs 2 CUDA GPUs")
