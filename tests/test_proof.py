"""`bench check proof`: a search's answer over the fastest row the same call measured, by hardware,
model, precision, device count and batch; exit 1 below the share, one line for what it cannot read."""
import json
from types import SimpleNamespace

import pytest

from bench.cases import results
from bench.checks import proof
from tests.test_report import row


def _write(path, rows):
    results.write(path, rows)
    return path


def _args(searches, against=(), handloop=None, min_ratio=0.95):
    return SimpleNamespace(searches=[str(p) for p in searches], against=[str(p) for p in against],
                           handloop=str(handloop) if handloop else None, min_ratio=min_ratio, out=None)


def test_an_answer_below_the_fastest_row_of_the_call_fails_and_the_table_says_so(tmp_path, capsys):
    search = _write(tmp_path / "search.json", [row("single", 1, 256, ips=20000), row("ddp", 2, 256, ips=38000)])
    listing = _write(tmp_path / "listing.json", [row("ddp", 2, 256, ips=80000, execution="cuda-graph"),
                                                 row("ddp", 2, 256, ips=99000, gpu_name="NVIDIA H100 80GB HBM3"),
                                                 row("ddp", 4, 256, ips=150000)])
    assert proof.main(_args([search], [listing])) == 1
    out = capsys.readouterr().out
    cells = {(c["devices"], c["batch_per_gpu"]): c for c in proof.table([search], [listing], None)}
    # Another GPU's row (an H100's 99k) and another device count's are no yardstick for an H200 at 2 GPUs.
    assert cells[(2, 256)]["best_items_per_s"] == 80000 and cells[(2, 256)]["ratio"] == pytest.approx(0.475)
    assert cells[(1, 256)]["ratio"] == 1.0
    assert "1 of 2 cells at or above 0.95" in out and "2 GPU(s) 256/GPU" in out


def test_cpu_runs_and_a_hand_loop_of_the_same_gpu_are_compared_by_their_devices(tmp_path):
    cpu = {"gpu_name": "", "device": "cpu", "n_gpus": 0, "gpus": ""}
    search = _write(tmp_path / "cpu.json", [row("single", 1, 4, ips=10.0, **cpu), row("ddp", 2, 4, ips=18.0, **cpu)])
    (cell_1, cell_2) = sorted(proof.table([search], [], None), key=lambda c: c["devices"])
    assert (cell_1["ratio"], cell_2["ratio"]) == (1.0, 1.0)  # no crash on n_gpus = 0: devices are replicas
    gpu = _write(tmp_path / "gpu.json", [row("single", 1, 256, ips=20000)])
    loop = tmp_path / "handloop.json"
    loop.write_text(json.dumps({"schema": "parabench-handloop/1", "gpu": "NVIDIA H200", "rows": [
        {"model": "resnet18-small", "precision": "fp32", "batch_per_gpu": 256, "variant": "graph",
         "items_per_s": 25000.0}]}))
    (cell,) = proof.table([gpu], [], loop)
    assert cell["best"] == "hand loop (graph)" and cell["ratio"] == pytest.approx(0.8)


@pytest.mark.parametrize("min_ratio", [float("nan"), 0.0, 1.5])
def test_a_share_that_is_no_share_is_one_line(tmp_path, min_ratio):
    search = _write(tmp_path / "search.json", [row("single", 1, 256, ips=20000)])
    with pytest.raises(proof.ProofError, match="--min-ratio takes a share"):
        proof.main(_args([search], min_ratio=min_ratio))


def test_two_searches_are_checked_for_the_same_pick_cell_by_cell(tmp_path, capsys):
    """Run after run the answer should not move: the proof counts the cells where every search named
    the same configuration."""
    first = _write(tmp_path / "search-1.json", [row("single", 1, 256, ips=20000), row("ddp", 2, 256, ips=38000),
                                                row("single", 1, 1024, ips=30000), row("ddp", 2, 1024, ips=58000)])
    second = _write(tmp_path / "search-2.json", [row("single", 1, 256, ips=20000), row("ddp", 2, 256, ips=38000),
                                                 row("single", 1, 1024, ips=30000), row("ddp", 2, 1024, ips=30000),
                                                 row("zero1", 2, 1024, ips=57000)])
    cells = proof.table([first, second], [], None)
    assert proof.agreement(cells) == (3, 4)  # 2 GPUs at 1024: ddp, then zero1
    proof.main(_args([first, second]))
    assert "the same configuration named by all 2 searches in 3 of 4 cells" in capsys.readouterr().out
