"""Input a user can give that once hung, leaked a process, or ended in a traceback: each gives the
right outcome or one line naming the fix, and leaves no process behind."""
import os
import time

import psutil
import pytest

HELPER = '''
import subprocess

def with_helper():
    import torch
    subprocess.Popen(["sleep", "117.25"])  # a helper that outlives the call and holds its output pipes
    return {"model": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)), "input_shape": (3, 8, 8)}
'''


def helpers() -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "117.25"]]


def test_a_factory_that_starts_a_helper_process_resolves_at_once_and_leaves_no_helper(tmp_path, monkeypatch):
    from bench import workloads

    (tmp_path / "helperfactory.py").write_text(HELPER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    try:
        found = workloads.probe(["helperfactory:with_helper"], timeout_s=100)
        assert found["helperfactory:with_helper"]["num_classes"] == 10
        assert time.monotonic() - started < 60  # not the helper's 117 s, nor the time limit
        assert not helpers()
    finally:
        for p in helpers():
            p.kill()
