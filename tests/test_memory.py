"""Peak memory counts what every execution holds: a CUDA graph's private pool (a captured
step, compile's reduce-overhead CUDA-graph trees) is memory the step uses at every replay,
though the allocator's allocated-bytes statistic stops seeing it once the capture is over
(bench/measure/timing.py: graph_pool_bytes)."""
import os
from pathlib import Path

import pytest

from bench.workloads import get_workload
from tests.conftest import cuda_gpus, rows_of, run_cli

MODEL = "resnet18-small"
COMMON = ["--no-search", "--strategies", "single", "--gpus", "0", "--models", MODEL, "--precisions", "amp-bf16",
          "--batch-sizes", "256", "--optimizer-impl", "fused", "--channels-last", "--warmup", "12", "--steps", "5",
          "--trials", "1"]


def training_state_mib() -> float:
    """fp32 parameters, their gradients and SGD's momentum: the least a training step holds
    (autocast keeps the parameters, hence gradients and momentum, in fp32)."""
    n = sum(p.numel() for p in get_workload(MODEL).build(0).parameters())
    return 3 * 4 * n / 2**20


def test_training_state_of_the_small_model():
    assert training_state_mib() == pytest.approx(127.9, abs=0.2)  # 11.17 M parameters


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
def test_gpu_peak_memory_holds_the_training_state_in_every_execution(tmp_path):
    # PARABENCH_TEST_RESULTS=DIR keeps the two results files (memory-*.json) for the record.
    folder = Path(os.environ.get("PARABENCH_TEST_RESULTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, extra in (("eager-compile-graph", ["--execution", "eager,compile,cuda-graph"]),
                        ("reduce-overhead", ["--execution", "compile", "--compile-mode", "reduce-overhead"])):
        out = folder / f"memory-{name}.json"
        proc = run_cli("run", *COMMON, *extra, "--out", str(out))
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows += rows_of(out)
    floor = training_state_mib()
    seen = set()
    for row in rows:
        label = f"{row['execution']} {row.get('compile_mode') or ''}".strip()
        assert row["status"] == "ok", (label, row["reason"])
        print(f"{label}: peak allocated {row['peak_alloc_mib']:.1f} MiB, reserved {row['peak_reserved_mib']:.1f} MiB "
              f"(parameters + gradients + momentum {floor:.1f} MiB)")
        assert row["peak_alloc_mib"] >= floor, label
        assert row["peak_alloc_mib"] <= row["peak_reserved_mib"] + 1e-6, label
        seen.add(label)
    assert len(seen) == 4, seen
