"""Step anatomy (`bench run --anatomy`, bench/measure/anatomy.py): traces written per rank and
readable, the breakdown in the row adding up to the profiled step, a host sleep showing
up as idle time (CPU here; GPU where there is one), and the analysis of a real H200
trace (committed fixture) giving the breakdown checked by hand."""
import gzip
import json
import math
import os
from pathlib import Path

import pytest

from bench.measure import anatomy
from tests.conftest import TEST_STRATEGIES, cuda_gpus, rows_of, run_cli

FIXTURES = Path(__file__).parent / "fixtures" / "anatomy"
CPU = ["--gpus", "", "--batch-sizes", "4", "--warmup", "1", "--steps", "3", "--trials", "1", "--anatomy"]


# --- the interval arithmetic ----------------------------------------------------------
def test_partition_gives_each_instant_to_the_first_layer_that_covers_it():
    layers = [("compute", [(0, 4), (3, 6)]), ("optimizer", [(5, 7)]), ("copy", [(6.5, 8)]),
              ("exposed_comm", [(2, 10), (12, 13)])]
    parts = anatomy.partition((0, 12), layers)
    assert parts == {"compute": 6, "optimizer": 1, "copy": 1, "exposed_comm": 2, "idle": 2}
    assert sum(parts.values()) == 12


def test_union_and_overlap():
    assert anatomy.union([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert anatomy.overlap([(0, 2), (3, 4)], [(1, 3.5)]) == 1.5


# --- end to end on the CPU (gloo) ---------------------------------------------------
def check_row(row, results_file: Path, ranks: int):
    assert row["status"] == "ok", row["reason"]
    parts = sum(row[f"anatomy_{p}_ms"] for p in anatomy.PARTS)
    assert math.isclose(parts, row["anatomy_step_ms"], rel_tol=1e-3), row
    assert row["anatomy_compute_ms"] > 0 and row["anatomy_optimizer_ms"] > 0
    assert row["anatomy_basis"] == "cpu ops" and row["anatomy_steps"] == 3
    folder = results_file.parent / row["anatomy_traces"]
    traces = sorted(folder.glob("rank*.pt.trace.json.gz"))
    assert [t.name for t in traces] == [f"rank{r}.pt.trace.json.gz" for r in range(ranks)]
    for trace in traces:
        with gzip.open(trace, "rt") as fh:
            events = json.load(fh)["traceEvents"]
        assert sum(str(e.get("name")).startswith("ProfilerStep#") for e in events) == 3
    assert len(row["anatomy_idle_ms_per_device"].split(";")) == ranks
    assert not Path(row["anatomy_traces"]).is_absolute()


@pytest.mark.slow
def test_anatomy_end_to_end_on_single_and_ddp(tmp_path):
    out = tmp_path / "run.json"
    proc = run_cli("run", "--strategies", "single,ddp", *CPU, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = {r["strategy"]: r for r in rows_of(out)}
    check_row(rows["single"], out, ranks=1)
    check_row(rows["ddp"], out, ranks=2)
    assert rows["single"]["anatomy_comm_ms"] == 0
    # DDP's gradients travel through gloo: communication is seen, and some of it is exposed
    # (the last bucket cannot overlap anything).
    assert rows["ddp"]["anatomy_comm_ms"] > 0 and rows["ddp"]["anatomy_exposed_comm_ms"] > 0
    # The timing columns are the timed trials' and nothing else.
    assert rows["single"]["step_ms_p50"] > 0 and rows["single"]["anatomy_wall_s"] > 0


def test_the_row_is_unchanged_without_anatomy(tmp_path):
    out = tmp_path / "plain.json"
    proc = run_cli("run", "--strategies", "single", *CPU[:-1], "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    row = rows_of(out)[0]
    assert all(row.get(c) in (None, "") for c in anatomy.COLUMNS)
    assert not (tmp_path / "traces").exists()


def sleepy(tmp_path, name, sleep_ms, where):
    out = tmp_path / f"{name}.json"
    fault = ["--option", "fault=slow", "--option", f"slow_ms={sleep_ms}"] if sleep_ms else []
    proc = run_cli("run", "--strategies", "faulty", *where, *fault, "--out", str(out), env=TEST_STRATEGIES)
    assert proc.returncode == 0, proc.stderr
    row = rows_of(out)[0]
    assert row["status"] == "ok", row["reason"]
    return row


@pytest.mark.slow
def test_a_host_sleep_shows_as_idle_on_the_cpu(tmp_path):
    where = [*CPU, "--cpu-replicas", "1"]
    # 200 ms: well above what a busy machine adds to a ~100 ms step's time outside operators.
    sleep_ms = 200
    plain, slept = sleepy(tmp_path, "plain", 0, where), sleepy(tmp_path, "slept", sleep_ms, where)
    rise = slept["anatomy_idle_ms"] - plain["anatomy_idle_ms"]
    assert sleep_ms * 0.7 < rise < sleep_ms * 1.5, (plain["anatomy_idle_ms"], slept["anatomy_idle_ms"])


@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
def test_a_host_sleep_shows_as_idle_on_a_gpu(tmp_path):
    # Batch 32 is host-bound already (the GPU waits for launches): a host sleep adds to the wait.
    # 40 ms: well above how far the idle of a host-bound step moves between two launches on a slow
    # host (10.0 and 22.7 ms with a 5 ms sleep on one H200, a rise of 12.7 ms).
    where = ["--no-search", "--gpus", "0", "--models", "resnet18-small", "--precisions", "amp-bf16",
             "--batch-sizes", "32", "--warmup", "5", "--steps", "10", "--trials", "2", "--anatomy",
             "--anatomy-steps", "5"]
    sleep_ms = 40
    plain, slept = sleepy(tmp_path, "plain", 0, where), sleepy(tmp_path, "slept", sleep_ms, where)
    rise = slept["anatomy_idle_ms"] - plain["anatomy_idle_ms"]
    print(f"idle {plain['anatomy_idle_ms']:.3f} -> {slept['anatomy_idle_ms']:.3f} ms with a {sleep_ms} ms host sleep")
    assert sleep_ms * 0.8 < rise < sleep_ms * 1.3
    for row in (plain, slept):
        assert row["anatomy_basis"] == "gpu timeline"
        # The note about the profiled step's gap is there exactly when the gap passes the tolerance.
        noted = "against the timed median" in row["anatomy_note"]
        assert noted == (abs(row["anatomy_vs_timed_pct"]) > anatomy.TOLERANCE_PCT), row["anatomy_note"]


# --- waiting for a slow rank against transfer ----------------------------------------
def per_device(row, value) -> dict:
    figures = row[f"anatomy_{value}_ms_per_device"]
    assert figures, f"no anatomy_{value}_ms_per_device: {row.get('anatomy_note')!r} ({row.get('reason')!r})"
    return {k: float(v) for k, v in (item.split("=") for item in figures.split(";"))}


def test_the_wait_for_the_last_rank_is_split_from_the_transfer():
    # Rank 1 enters both collectives 300 us before rank 0; rank 0's clock reads 1000 us later
    # than rank 1's. Each collective ends 10 us after rank 0 entered it, on both ranks.
    def device(collectives, exposed):
        comm = sum(b - a for a, b in exposed) / 1000
        return {"device": "cpu", "steps": 1, "collectives": collectives, "exposed_spans": exposed, "exposed_comm": comm}

    rank0 = device([[1300, 1310], [1900, 1910]], [[1300, 1310], [1900, 1910]])
    rank1 = device([[0, 310], [600, 910]], [[0, 310], [700, 910]])  # 100 us of the second one hidden
    assert anatomy.split_exposed_comm([rank0, rank1]) is None
    assert rank0["wait"] == pytest.approx(0) and rank0["transfer"] == pytest.approx(0.020)
    assert rank1["wait"] == pytest.approx(0.300 + 0.200) and rank1["transfer"] == pytest.approx(0.020)
    lone = device([[0, 5]], [[0, 5]])
    assert anatomy.split_exposed_comm([lone]) is None and lone["wait"] == 0  # nobody to wait for
    odd = [device([[0, 5]], []), device([[0, 5], [6, 7]], [])]
    assert "different numbers of collectives" in anatomy.split_exposed_comm(odd)


@pytest.mark.slow
def test_a_slow_rank_shows_as_its_peers_wait_not_as_transfer(tmp_path):
    # Rank 0 sleeps 300 ms in every step before its forward (gloo, 2 processes): rank 1
    # reaches the step's first collective 300 ms early and waits there. Bounds allow for a
    # busy 2-core machine: at least 200 ms of the wait seen, transfer well under it.
    where = [*CPU, "--option", "launcher=torchrun"]
    row = sleepy(tmp_path, "slow-rank", 300, where)
    wait, transfer, exposed = (per_device(row, v) for v in ("wait", "transfer", "exposed_comm"))
    print(f"wait {wait}, transfer {transfer}, exposed {exposed}")
    for rank in ("0:cpu", "1:cpu"):
        assert wait[rank] + transfer[rank] == pytest.approx(exposed[rank], rel=1e-3, abs=0.01)
    assert wait["1:cpu"] >= 200, wait
    assert transfer["1:cpu"] < 0.5 * wait["1:cpu"], (wait, transfer)
    assert wait["1:cpu"] > wait["0:cpu"] + 150, wait  # the sleeper itself waits for nobody


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 2, reason="needs 2 CUDA GPUs: two ranks cannot share one GPU through NCCL")
def test_a_slow_rank_shows_as_its_peers_wait_on_gpus(tmp_path):
    where = ["--no-search", "--gpus", "0,1", "--models", "resnet18-small", "--precisions", "amp-bf16",
             "--batch-sizes", "64",
             "--warmup", "5", "--steps", "5", "--trials", "1", "--anatomy", "--option", "launcher=torchrun"]
    row = sleepy(tmp_path, "slow-rank-gpu", 20, where)
    wait, transfer, exposed = (per_device(row, v) for v in ("wait", "transfer", "exposed_comm"))
    print(f"wait {wait}, transfer {transfer}, exposed {exposed}")
    assert wait["1:cuda:1"] >= 15, wait
    assert transfer["1:cuda:1"] < 0.2 * wait["1:cuda:1"], (wait, transfer)
    assert wait["1:cuda:1"] > wait["0:cuda:0"] + 10, wait


# --- a real H200 trace ----------------------------------------------------------------
# ddp, resnet18-small amp-bf16 + channels_last, 32 per GPU on 2 H200s, 2 profiled steps
# (`git show 05e1815:scripts/campaign4_anatomy.sh`, step "fixture"): every rank's labelled trace and GPU timeline.
DDP_H200 = FIXTURES / "ddp-amp-bf16-resnet18-small-2-gpu-b32-channels-last"
# Checked by hand: copy is the sum of the 258 memcpy/memset durations (none overlap) and
# comm the sum of the 8 NCCL kernels' (over 2 steps); compute + optimizer is the union of the
# 782 other kernels (8 us under their summed durations: two streams overlapped); the five
# parts fill the window, from the end of the synchronisation before the steps to the last kernel.
EXPECTED = {
    0: {"step": 11.0912, "compute": 1.7108, "optimizer": 0.1565, "copy": 0.1425, "exposed_comm": 1.3596,
        "idle": 7.7218, "comm": 1.4424},
    1: {"step": 12.5311, "compute": 1.7312, "optimizer": 0.1572, "copy": 0.1492, "exposed_comm": 1.7150,
        "idle": 8.7784, "comm": 1.9217},
}


def gpu_events(path):
    return [e for e in anatomy.load(str(path))["traceEvents"] if e.get("ph") == "X" and anatomy.kernel_class(e)]


@pytest.mark.parametrize("rank", [0, 1])
def test_the_breakdown_of_a_real_h200_trace(rank):
    (got,) = anatomy.analyse_rank(str(DDP_H200), rank)
    assert got["device"] == f"cuda:{rank}" and got["basis"] == "gpu timeline" and got["steps"] == 2
    for part, value in EXPECTED[rank].items():
        assert got[part] == pytest.approx(value, abs=1e-3), part
    assert sum(got[p] for p in anatomy.PARTS) == pytest.approx(got["step"], rel=1e-9)
    # The independent sums behind the expected values.
    events = gpu_events(anatomy.timeline_path(str(DDP_H200), rank))
    steps = got["steps"] * 1000
    copies = [e["dur"] for e in events if anatomy.kernel_class(e) == "copy"]
    nccl = [e["dur"] for e in events if anatomy.kernel_class(e) == "comm"]
    assert len(copies) == 258 and len(nccl) == 8
    assert got["copy"] == pytest.approx(sum(copies) / steps, rel=1e-4)
    assert got["comm"] == pytest.approx(sum(nccl) / steps, rel=1e-4)


def test_the_exposed_communication_of_a_real_h200_trace_is_mostly_waiting():
    # Host-bound DDP at batch 32: each rank's NCCL kernels spin while the other rank's host
    # catches up. What is left once the wait is taken out is the transfer: ~0.18 ms per step,
    # the 2-GPU all-reduce of these 45 MiB of fp32 gradients measured alone (0.19 ms in the
    # committed probes of 2 H200: results/reference/h200x2/predict-validate/run-*/link.comm.json).
    per_rank = [anatomy.analyse_rank(str(DDP_H200), rank) for rank in (0, 1)]
    row = anatomy.summarise(per_rank, 11.0, on_gpu=True)
    wait, transfer, exposed = (per_device(row, v) for v in ("wait", "transfer", "exposed_comm"))
    for where in ("0:cuda:0", "1:cuda:1"):
        assert wait[where] + transfer[where] == pytest.approx(exposed[where], rel=1e-3)
        assert 0.1 < transfer[where] < 0.3 and wait[where] > 1.0, (wait, transfer)
    assert row["anatomy_wait_ms"] + row["anatomy_transfer_ms"] == pytest.approx(row["anatomy_exposed_comm_ms"],
                                                                                 rel=1e-3)


def test_the_row_notes_a_profiled_step_off_the_timed_median_exactly_when_past_the_tolerance():
    # The real H200 trace's ranks, set against timed medians at, inside and past the tolerance:
    # the gap is the profiled step against the timed median, signed, and only a gap past
    # TOLERANCE_PCT on a GPU gets the note (a CPU row always says what its parts are).
    per_rank = [anatomy.analyse_rank(str(DDP_H200), rank) for rank in (0, 1)]
    profiled = anatomy.summarise(per_rank, 1.0, on_gpu=True)["anatomy_step_ms"]
    tolerance = anatomy.TOLERANCE_PCT / 100
    for timed_ms, noted in ((profiled, False), (profiled / (1 + 0.9 * tolerance), False),
                            (profiled / (1 - 0.9 * tolerance), False), (profiled / (1 + 1.2 * tolerance), True),
                            (profiled / (1 - 1.2 * tolerance), True)):
        row = anatomy.summarise([[dict(d) for d in r] for r in per_rank], timed_ms, on_gpu=True)
        gap = 100 * (profiled - timed_ms) / timed_ms
        assert row["anatomy_vs_timed_pct"] == pytest.approx(gap, abs=0.01)
        assert ("against the timed median" in row["anatomy_note"]) == noted, (gap, row["anatomy_note"])
        if noted:
            assert f"{gap:+.1f}% against the timed median {timed_ms:.3f} ms" in row["anatomy_note"]
    cpu = anatomy.summarise([[dict(d) for d in r] for r in per_rank], 2 * profiled, on_gpu=False)
    assert "against the timed median" not in cpu["anatomy_note"] and cpu["anatomy_note"].startswith("CPU:")


def test_the_timeline_finds_the_optimizer_kernels_the_labels_mark():
    # Optimiser kernels in the labelled trace are exact (correlation ids); the timeline
    # matches them by position in each stream's sequence: the same time per step.
    for rank in (0, 1):
        (timeline,) = anatomy.analyse_rank(str(DDP_H200), rank)
        (labelled,) = anatomy.analyse(anatomy.load(anatomy.trace_path(str(DDP_H200), rank)))
        assert timeline["optimizer"] == pytest.approx(labelled["optimizer"], rel=0.05)
        assert labelled["optimizer"] > 0.1


def test_a_timeline_without_its_labelled_trace_is_refused():
    with pytest.raises(ValueError, match="labelled trace"):
        anatomy.analyse(anatomy.load(anatomy.timeline_path(str(DDP_H200), 0)))


def test_holistic_trace_analysis_agrees(tmp_path):
    """HTA's temporal breakdown of the same timelines: its compute and non-compute times
    match ours up to its rounding of every event to whole microseconds (it floors each
    timestamp and duration: at most 1 us lost per kernel)."""
    if os.environ.get("PARABENCH_REQUIRE_HTA"):
        import hta.trace_analysis as hta  # CI: must run, not skip
    else:
        hta = pytest.importorskip("hta.trace_analysis")
    for rank in (0, 1):
        with gzip.open(anatomy.timeline_path(str(DDP_H200), rank), "rt") as src:
            (tmp_path / f"rank{rank}.json").write_text(src.read())
    breakdown = hta.TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(visualize=False)
    for rank in (0, 1):
        (ours,) = anatomy.analyse_rank(str(DDP_H200), rank)
        theirs = breakdown[breakdown["rank"] == rank].iloc[0]
        events = gpu_events(anatomy.timeline_path(str(DDP_H200), rank))
        n_compute = sum(anatomy.kernel_class(e) == "kernel" for e in events)
        n_other = len(events) - n_compute
        per_step = 1000 * ours["steps"]  # ms per step -> us over the window
        compute = (ours["compute"] + ours["optimizer"]) * per_step
        assert 0 <= compute - theirs["compute_time(us)"] <= n_compute, rank
        non_compute = (ours["copy"] + ours["exposed_comm"]) * per_step
        assert abs(non_compute - theirs["non_compute_time(us)"]) <= n_other + n_compute, rank


def test_bad_anatomy_input_gets_one_line(tmp_path):
    proc = run_cli("run", "--strategies", "single", "--gpus", "", "--anatomy-steps", "2",
                   "--out", str(tmp_path / "r.json"))
    assert proc.returncode == 2 and "--anatomy-steps sets the profiled window of --anatomy" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    (tmp_path / "case").mkdir()
    (tmp_path / "case" / "rank0.pt.trace.json.gz").write_bytes(
        gzip.compress(b'{"traceEvents": [')[:30])  # cut short, as a full disk leaves it
    proc = run_cli("anatomy", str(tmp_path / "case"))
    assert proc.returncode == 2 and "cannot analyse rank 0" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = run_cli("anatomy", str(tmp_path))
    assert proc.returncode == 2 and "no traces in" in proc.stderr
