import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

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
