"""Predicting beyond this host (bench/predict/): the collective cost model against costs
worked out by hand, the overlap and FSDP2 simulations on hand-built timelines, the memory
model, DDP's buckets against torch's own rule and a real H200 trace, the host-bound floor,
predictions from committed H200 traces against committed runs (where communication is too
small to tell a model from linear scaling, so each also predicts over a slow link and counts
the collectives), the baselines every validation prints, and one end-to-end prediction of
three strategies on 2 CPU processes (gloo) judged by the collectives the measured run issued."""
import json
import os
import subprocess
import sys

import pytest

from bench.predict import collectives as col
from bench.predict import memory, simulate
from bench.predict.params import ModelFacts, Param, ddp_buckets, zero_partition
from bench.predict.timeline import StepTimeline
from tests.conftest import REPO, run_cli

H200_DDP = REPO / "tests" / "fixtures" / "anatomy" / "ddp-amp-bf16-resnet18-small-2-gpu-b32-channels-last"
MB = 1e6


# --- the collective model -------------------------------------------------------------------
def test_ring_costs_worked_by_hand():
    link = col.Link(hop_us=10, busbw_gbps=100)
    # all-reduce, 4 ranks, 100 MB: 2*3 = 6 hops of 10 us, 2*3/4 * 100 MB at 100 GB/s = 1.5 ms
    assert col.ring_ms("all_reduce", 100 * MB, 4, link) == pytest.approx(0.06 + 1.5)
    # reduce-scatter and all-gather: 3 hops, 3/4 * 100 MB = 0.75 ms
    assert col.ring_ms("reduce_scatter", 100 * MB, 4, link) == pytest.approx(0.03 + 0.75)
    assert col.ring_ms("all_gather", 100 * MB, 4, link) == pytest.approx(0.03 + 0.75)
    # broadcast: 3 hops, the whole message through every link
    assert col.ring_ms("broadcast", 100 * MB, 4, link) == pytest.approx(0.03 + 1.0)
    # two ranks: all-reduce moves the message once (2 * 1/2), in 2 hops
    assert col.ring_ms("all_reduce", 100 * MB, 2, link) == pytest.approx(0.02 + 1.0)
    assert col.ring_ms("all_reduce", 100 * MB, 1, link) == 0.0


def test_hierarchical_cost_worked_by_hand():
    intra, inter = col.Link(5, 200), col.Link(10, 400 / 8)  # NVLink-class; 400 Gb/s per host
    # 4 hosts x 8 GPUs, all-reduce of 100 MB: reduce-scatter and all-gather inside (7 hops of
    # 5 us + 7/8 * 100 MB at 200 GB/s = 0.4725 ms each), all-reduce across the 4 hosts (6 hops
    # of 10 us + 2*3/4 * 100 MB at 50 GB/s = 3.06 ms).
    got = col.hierarchical_ms("all_reduce", 100 * MB, 8, 4, intra, inter)
    assert got == pytest.approx(2 * 0.4725 + 3.06)
    # reduce-scatter: inside (0.4725) then across (3 hops + 3/4 * 100 MB at 50 GB/s = 1.53 ms)
    assert col.hierarchical_ms("reduce_scatter", 100 * MB, 8, 4, intra, inter) == pytest.approx(0.4725 + 1.53)
    # one host: the plain ring; one GPU per host: the network alone
    one_host = col.hierarchical_ms("all_reduce", 100 * MB, 8, 1, intra, inter)
    assert one_host == col.ring_ms("all_reduce", 100 * MB, 8, intra)
    assert col.hierarchical_ms("all_reduce", 100 * MB, 1, 4, intra, inter) == pytest.approx(3.06)


def test_the_fit_recovers_latency_and_bandwidth():
    truth = col.Link(hop_us=25, busbw_gbps=20)  # alpha = 2 hops x 25 us at 2 ranks
    points = [(s, col.ring_ms("all_reduce", s, 2, truth)) for s in (4e3, 64e3, 1e6, 16e6, 45e6)]
    fit = col.fit("all_reduce", 2, points)
    assert fit.alpha_us == pytest.approx(50, rel=1e-9) and fit.busbw_gbps == pytest.approx(20, rel=1e-9)
    assert fit.rel_rms < 1e-9 and fit.link().base_us == pytest.approx(50)
    # Times that fall below a line through zero at the small end: the latency clamps to 0.
    noisy = [(1e3, 0.00004), (1e6, 0.1), (1e7, 1.0)]
    assert col.fit("all_gather", 2, noisy).alpha_us == 0.0
    with pytest.raises(ValueError, match="2 or more message sizes"):
        col.fit("all_reduce", 2, [(1e6, 1.0), (1e6, 1.1)])


def test_other_counts_take_the_nearest_bandwidth_and_the_fitted_latency():
    one = col.CommModel({("all_reduce", 2): col.Fit("all_reduce", 2, 20.0, 10.0, 0.0, 5)})
    # One count measured: its 20 us stay fixed; 8 devices move 2*7/8 of 100 MB at 10 GB/s.
    assert one.ms("all_reduce", 100 * MB, 8) == pytest.approx(0.02 + 1.75 * 100 * MB / 10e9 * 1e3)
    assert "one count measured: fixed" in one.describe("all_reduce", 8)
    assert one.ms("all_reduce", 100 * MB, 1) == 0.0
    # Two counts: 20 us at 2 (2 ring steps) and 32 us at 4 (6 steps) are 14 us + 3 us per step;
    # 8 devices (14 steps) take 14 + 42 us, at the bandwidth of 4, the nearest count.
    two = col.CommModel({("all_reduce", 2): col.Fit("all_reduce", 2, 20.0, 10.0, 0.0, 5),
                         ("all_reduce", 4): col.Fit("all_reduce", 4, 32.0, 12.0, 0.0, 5)})
    assert two.ms("all_reduce", 100 * MB, 8) == pytest.approx(0.056 + 1.75 * 100 * MB / 12e9 * 1e3)
    assert two.ms("all_reduce", 100 * MB, 4) == pytest.approx(0.032 + 1.5 * 100 * MB / 12e9 * 1e3)
    with pytest.raises(ValueError, match="--inter-host-gbps"):
        one.ms("all_reduce", 100 * MB, 8, hosts=2)


# --- buckets and partitions -------------------------------------------------------------------
def test_ddp_buckets_close_at_the_tensor_that_crosses_the_cap():
    # cap 25: 10+10 = 20 stays open, +30 crosses (closed with it); 5+5+40 crosses; 7 remains.
    assert ddp_buckets([10, 10, 30, 5, 5, 40, 7], 25) == [[0, 1, 2], [3, 4, 5], [6]]
    # A smaller first bucket (DDP's 1 MiB when bucket_cap_mb is left unset).
    assert ddp_buckets([10, 10, 30, 5], 25, first_cap_bytes=5) == [[0], [1, 2], [3]]


def test_ddp_buckets_follow_torch_and_the_h200_trace():
    """On resnet18-small in gradient-ready order with parabench's explicit 25 MB cap, the
    buckets are torch's own assignment and the two all-reduces the H200 trace recorded
    (7,086,090 and 4,086,720 elements, from its NCCL kernels' arguments)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from bench.measure import anatomy
    from bench.predict.params import facts

    model = facts("resnet18-small")
    ours = [sum(model.ready[i].numel for i in b) for b in ddp_buckets([p.numel * 4 for p in model.ready], 25 << 20)]
    tensors = [torch.empty(p.numel) for p in model.ready]
    theirs, _ = dist._compute_bucket_assignment_by_size(tensors, [25 << 20, 25 << 20])
    assert ours == [sum(tensors[i].numel() for i in b) for b in theirs]
    events = anatomy.load(anatomy.trace_path(str(H200_DDP), 0))["traceEvents"]
    recorded = [e["args"]["In msg nelems"] for e in sorted(events, key=lambda e: e.get("ts", 0))
                if e.get("cat") == "kernel" and "AllReduce" in e.get("name", "")]
    assert recorded == ours * 2 and ours == [7086090, 4086720]


def test_the_ready_order_puts_a_blocks_downsample_after_its_main_branch():
    pytest.importorskip("torch")
    from bench.predict.params import facts

    model = facts("resnet18-small")
    names = [p.name for p in model.ready]
    assert len(names) == 62 and model.numel == 11_172_810
    assert names[:3] == ["fc.bias", "fc.weight", "layer4.1.bn2.weight"]
    assert names.index("layer4.0.downsample.0.weight") > names.index("layer4.0.conv1.weight")
    assert names[-1] == "conv1.weight"


def test_zero_partition_is_greedy_largest_first():
    assert zero_partition([3, 5, 3, 4], 2) == [8, 7]  # 5 | 4 | 4+3 | 5+3
    assert zero_partition([1], 3) == [1, 0, 0]


# --- the simulations ---------------------------------------------------------------------------
class FlatComm:
    """A cost model of fixed ms per byte and per call, any count."""

    def __init__(self, per_mb: float, per_call: float = 0.0):
        self.per_mb, self.per_call = per_mb, per_call

    def ms(self, collective, nbytes, per_host, hosts=1):
        return 0.0 if per_host * hosts <= 1 else self.per_call + nbytes / MB * self.per_mb


def step_of(ready, forward=2.0, tail=1.0, optimizer=0.5):
    return StepTimeline(forward=forward, backward=ready[-1], tail=tail, ready=tuple(ready), optimizer=optimizer,
                        idle=0.0, steps=1, basis="by hand")


def test_bucket_overlap_exposes_what_runs_past_backward():
    # Buckets ready at 2, 5 and 9 ms of a 10 ms backward, all-reduces of 4, 1 and 3 ms: the
    # second waits for the first (6 to 7), the third runs 9 to 12: 2 ms past backward.
    schedule = simulate.bucket_schedule([2, 5, 9], [4, 1, 3])
    assert schedule == [(2, 6), (6, 7), (9, 12)]
    facts = ModelFacts("hand", (Param("a", 25_000, "root"), Param("b", 250_000, "root"), Param("c", 250_000, "root")),
                       ())
    # 4-byte gradients, cap 1 MiB: bucket [a, b] (1.1 MB) ready at 4 ms, [c] (1 MB) at 10 ms.
    step = step_of([1.0, 4.0, 10.0])
    sim = simulate.ddp(step, facts, FlatComm(per_mb=2.0), simulate.Target("ddp", 2, 1, {"bucket_cap_mb": 1}))
    # [a, b]: 4 to 6.2 ms; [c]: 10 to 12 ms; backward ends at 12: 2 ms exposed.
    assert sim.backward == pytest.approx(12.0) and sim.comm == pytest.approx(2.2 + 2.0)
    assert sim.step == pytest.approx(2.0 + 12.0 + 1.0)
    # Slow enough that the first bucket's all-reduce delays the last: 4 to 15, then 15 to 25.
    slow = simulate.ddp(step, facts, FlatComm(per_mb=10.0), simulate.Target("ddp", 2, 1, {"bucket_cap_mb": 1}))
    assert slow.backward == pytest.approx(25.0)


def test_fsdp2_gathers_ahead_and_reduce_scatters_behind_by_hand():
    # Two units: B's gradients ready first (3 ms), then A's (5 ms); forward 2.5 ms split like
    # backward (A 1, B 1.5). All-gathers: A 1 ms, B 2 ms; reduce-scatters: A 0.5, B 1 ms.
    facts = ModelFacts("hand", (Param("b", 2_000_000, "B"), Param("a", 1_000_000, "A")), ())
    step = step_of([3.0, 5.0], forward=2.5, tail=1.0, optimizer=0.4)

    class PerUnit:
        def ms(self, collective, nbytes, per_host, hosts=1):
            if per_host * hosts <= 1:
                return 0.0
            return nbytes / 4e6 * (1.0 if collective == "all_gather" else 0.5)

    sim = simulate.fsdp2(step, facts, PerUnit(), simulate.Target("fsdp2", 2, 1, {"reshard_after_forward": True}))
    # Forward: gather A (0-1), compute A (1-2); gather B (1-3), compute B (3-4.5).
    assert sim.forward == pytest.approx(4.5)
    # Backward: gather B again (4.5-6.5), compute B (6.5-9.5) while A is gathered (6.5-7.5);
    # reduce-scatter B (9.5-10.5); compute A (9.5-11.5); reduce-scatter A (11.5-12).
    assert sim.backward == pytest.approx(12.0 - 4.5)
    # The update: half the optimiser's 0.4 ms on 2 devices.
    assert sim.tail == pytest.approx(1.0 - 0.2) and sim.optimizer == pytest.approx(0.2)
    # One device: nothing to gather, the measured step back.
    one = simulate.fsdp2(step, facts, PerUnit(), simulate.Target("fsdp2", 1, 1, {}))
    assert one.step == pytest.approx(step.step)


def test_fsdp2_forward_gathers_one_unit_ahead():
    # A computes 5 ms, B 1, C 1; all-gathers A 1, B 0.1, C 3 ms. C's all-gather may start only
    # when B's compute starts (6 ms; B's parameters copied out), so C computes from 9 to 10,
    # not from 7 as an unbounded prefetch would allow.
    end, channel = simulate._fsdp_forward([("A", 5), ("B", 1), ("C", 1)], {"A": 1, "B": 0.1, "C": 3})
    assert (end, channel) == pytest.approx((10.0, 9.0))


def test_zero1_shards_the_update_and_broadcasts_every_parameter():
    facts = ModelFacts("hand", (Param("a", 500_000, "root"), Param("b", 250_000, "root"),
                                Param("c", 250_000, "root")), ())
    step = step_of([1.0, 2.0, 3.0], optimizer=1.0)
    target = simulate.Target("zero1", 2, 1, {"broadcast_buffers": False})
    sim = simulate.zero1(step, facts, FlatComm(per_mb=1.0), target)
    # The busiest rank updates a (half the elements); the broadcasts move 2 + 1 + 1 MB.
    assert sim.optimizer == pytest.approx(0.5)
    assert sim.tail == pytest.approx(1.0 - 0.5 + 4.0)


# --- memory ------------------------------------------------------------------------------------
def test_memory_per_gpu_by_hand():
    facts = ModelFacts("hand", (Param("a", 2**20, "layer1"), Param("b", 3 * 2**20, "layer2")), ())
    # 4 Mi elements x 4 bytes = 16 MiB per copy.
    assert sum(memory.state_bytes("single", facts, 1, {}).values()) / 2**20 == 48
    assert sum(memory.state_bytes("ddp", facts, 4, {}).values()) / 2**20 == 64  # + buckets
    assert sum(memory.state_bytes("ddp", facts, 4, {"gradient_as_bucket_view": True}).values()) / 2**20 == 48
    # ZeRO-1 on 2: momentum of the busiest rank (b, 12 MiB).
    assert sum(memory.state_bytes("zero1", facts, 2, {}).values()) / 2**20 == 16 * 3 + 12
    # FSDP2 on 4: 3 x 16/4, plus two neighbouring units' parameters (4 + 12) and one unit's gradients (12).
    assert sum(memory.state_bytes("fsdp2", facts, 4, {}).values()) / 2**20 == 12 + 28
    # Three units of 4, 12 and 4 MiB (a 20 MiB copy): gathered at once are the largest neighbours (16 MiB),
    # not twice the largest (24); without reshard_after_forward all of it (20), never less.
    three = ModelFacts("hand", (Param("a", 2**20, "u1"), Param("b", 3 * 2**20, "u2"), Param("c", 2**20, "u3")), ())
    assert sum(memory.state_bytes("fsdp2", three, 4, {}).values()) / 2**20 == 15 + 16 + 12
    assert sum(memory.state_bytes("fsdp2", three, 4, {"reshard_after_forward": False}).values()) / 2**20 == 15 + 20 + 12
    # Activations: a single base that peaked at 100 MiB had 52 MiB beside its 48 MiB of state.
    got = memory.per_gpu_mib("ddp", facts, 4, {}, "single", {}, 100.0)
    assert got == {"state_mib": 64.0, "activations_mib": 52.0, "memory_mib": 116.0}


# --- a real H200 trace: when gradients are ready, and the host-bound floor ---------------------
def test_ready_times_from_an_h200_trace_meet_ddps_own_launches():
    """The fixture is DDP on 2 H200s (resnet18-small bf16, 32 per GPU, 2 profiled steps). The
    ready time of each bucket's last gradient, read from the timeline, must come just before
    the NCCL all-reduce that DDP launched for it: checked by hand at 57-99 us later (the
    copy into the bucket and the launch); no all-reduce may start before its gradients."""
    from bench.measure import anatomy
    from bench.predict import timeline

    bucket_last = [10, 61]  # indices of the buckets' last gradients (7,086,090 | 4,086,720 elements)
    for rank, profiled in ((0, 11.0912), (1, 12.5311)):
        step = timeline.read(str(H200_DDP), rank)
        assert step.basis == "gpu timeline" and len(step.ready) == 62
        assert step.step == pytest.approx(profiled, abs=1e-3)  # the steps tile the anatomy's window
        assert list(step.ready) == sorted(step.ready) and step.ready[-1] == pytest.approx(step.backward)
        events = timeline._x(anatomy.load(anatomy.trace_path(str(H200_DDP), rank)))
        marks = timeline.gpu_marks(events)
        tl = anatomy.load(anatomy.timeline_path(str(H200_DDP), rank))
        nccl = sorted((e for e in timeline._x(tl) if "AllReduce" in e["name"]), key=lambda e: e["ts"])
        for i, kernels in enumerate(timeline.timeline_kernels(tl, marks)):
            b0 = kernels[marks["first"]]["ts"]
            for last, reduce in zip(bucket_last, nccl[2 * i:2 * i + 2]):
                ready = timeline._end(kernels[marks["ready"][last]])
                assert 0 < reduce["ts"] - ready < 150, (rank, i, reduce["ts"] - ready)
            assert b0 < nccl[2 * i]["ts"]


def base_row(step_ms: float, peak: float | None = 300.0) -> dict:
    from bench.cases.case import Case

    case = Case("ddp", "amp-bf16", "resnet18-small", (0,), 1, 32, options=(),
                knobs=(("channels_last", True), ("cudnn_benchmark", True), ("sgd_impl", "foreach")))
    return {**case.row(), "status": "ok", "step_ms_p50": step_ms, "img_per_s": 32 / step_ms * 1e3,
            "peak_alloc_mib": peak, "gpu_name": "NVIDIA H200", "source": str(H200_DDP / "run.json"),
            "anatomy_traces": H200_DDP.name}


def nvlink():
    # docs/findings.md: NCCL all-reduce of 44.6 MiB on 2 H200s in 0.19 ms, 240-251 GB/s bus.
    fits = {(c, 2): col.Fit(c, 2, 10.0, 250.0, 0.0, 8) for c in col.COLLECTIVES}
    return col.CommModel(fits, col.Link(5, 400 / 8), source="by hand")


def test_a_host_bound_step_keeps_its_measured_time_as_the_floor():
    """The fixture's step idles its GPU 70% of the time (the host launches kernels): taken as a
    one-device base, the host's step is the floor, the sharded optimiser saves nothing, and
    the exposed communication first fills the device's wait for the host after backward."""
    from bench.predict import params, predict, timeline

    step = timeline.read(str(H200_DDP), 0)
    facts = params.facts("resnet18-small")
    base = base_row(11.09)
    for target in ("ddp", "zero1", "fsdp2"):
        row = predict.predict_one(base, step, facts, nvlink(), target, {}, 8, 2)
        assert row["host_bound"] and row["step_ms"] >= 11.09 and row["scaling_efficiency"] <= 1
        assert "host-bound" in row["assumptions"][0] and "the floor" in row["assumptions"][0]
        assert row["devices"] == 16 and row["hosts"] == 2 and any("hierarchical" in a for a in row["assumptions"])
    # An FSDP2 base, host-bound: its trace lacks the host work FSDP2 skips at one device, and says so.
    fsdp2_base = {**base, "strategy": "fsdp2"}
    warned = [a for a in predict.predict_one(fsdp2_base, step, facts, nvlink(), "fsdp2", {}, 2, 1)["assumptions"]
              if "skips its all-gathers" in a]
    assert len(warned) == 1 and "too fast" in warned[0]
    assert "H200" not in warned[0] and "1.5x" not in warned[0]  # no figure of other hardware on this one
    assert not any("skips its all-gathers" in a
                   for a in predict.predict_one(fsdp2_base, step, facts, nvlink(), "fsdp2", {}, 1, 1)["assumptions"])
    # The same timeline with a busy GPU: device-bound, the sharded update is saved.
    busy = timeline.StepTimeline(**{**step.__dict__, "idle": 0.0})
    row = predict.predict_one(base, busy, facts, nvlink(), "fsdp2", {}, 8, 1)
    assert not row["host_bound"] and row["assumptions"][0].startswith("step = measured 1-device median")
    saved = step.optimizer * (1 - 1 / 8)
    assert row["step_ms"] == pytest.approx(11.09 + row["exposed_comm_ms"] - saved, abs=1e-3)
    # Memory: 300 MiB measured with DDP's 4 copies of 11.17 M fp32 elements (170.5 MiB).
    assert row["activations_mib"] == pytest.approx(300 - 4 * 11_172_810 * 4 / 2**20, abs=0.1)


def test_predict_on_gpu_traces_across_hosts(tmp_path):
    """The whole command on the H200 trace taken as a one-device base: a results file whose
    row points at the traces, a probe file (NVLink figures of docs/findings.md), 1 to 64 GPUs in
    hosts of 8 over 400 Gb/s. Every count gets a row that names its base and probe, counts
    past 8 span hosts, and efficiency does not rise with the count."""
    import shutil

    from bench.cases import results
    from bench.predict import probe as probe_mod

    shutil.copytree(H200_DDP, tmp_path / "traces" / H200_DDP.name)
    row = {**base_row(11.09), "anatomy_traces": f"traces/{H200_DDP.name}", "step_ms_p10": 10.9, "step_ms_p90": 11.3}
    row.update(img_per_s_p10=32 / 11.3e-3, img_per_s_p90=32 / 10.9e-3)
    # A second profiled case whose traces are not there: left out as a base, said in one line.
    gone = {**row, "model": "resnet18", "anatomy_traces": "traces/not-unpacked"}
    results.write(tmp_path / "base.json", [row, gone])
    fits = [{"collective": c, "n": 2, "alpha_us": 10.0, "busbw_gbps": 250.0, "rel_rms": 0.0, "points": 8}
            for c in col.COLLECTIVES]
    probe_mod.write(tmp_path / "h200.comm.json", {"schema": probe_mod.SCHEMA, "device": "cuda", "backend": "nccl",
                                                   "gpus": [0, 1], "environment": {"gpu_name": "NVIDIA H200"},
                                                   "fits": fits, "points": []})
    out = tmp_path / "predictions.json"
    proc = bench_cli("predict", "--results-dir", str(tmp_path), "--devices", "1,2,8,16,64", "--inter-host-gbps", "400",
                     "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["predictions"]
    assert sorted({r["strategy"] for r in rows}) == ["ddp", "fsdp2", "zero1"] and len(rows) == 15
    for strategy in ("ddp", "fsdp2", "zero1"):
        mine = [r for r in rows if r["strategy"] == strategy]
        assert [(r["devices"], r["hosts"]) for r in mine] == [(1, 1), (2, 1), (8, 1), (16, 2), (64, 8)]
        efficiency = [r["scaling_efficiency"] for r in mine]
        assert efficiency[0] == 1 and efficiency == sorted(efficiency, reverse=True)
        assert all(r["host_bound"] and r["probe"].endswith("h200.comm.json") for r in mine)
        assert all(r["base"]["traces"].endswith(H200_DDP.name) and r["memory_mib"] > 0 for r in mine)
    assert "host-bound: host time is the floor" in proc.stdout
    assert "1 profiled case(s) left out as bases, their traces are not there" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # --json alone: standard output is the JSON and nothing else (it can be piped).
    piped = bench_cli("predict", "--results-dir", str(tmp_path), "--devices", "1,2", "--json")
    assert piped.returncode == 0 and len(json.loads(piped.stdout)["predictions"]) == 6, piped.stdout[:200]


# --- a link stated instead of probed ------------------------------------------------------------
def test_a_stated_link_costs_every_collective_on_one_ring_and_says_so():
    from bench.predict import probe

    comm = probe.stated_model(250.0, 10.0, inter_host_gbps=400)
    # All-reduce of 100 MB on 4 GPUs: 10 us + 2 x 3/4 x 100 MB / 250 GB/s = 0.01 + 0.6 ms.
    assert comm.ms("all_reduce", 100 * MB, 4) == pytest.approx(0.61)
    # All-gather on 8: 10 us + 7/8 x 100 MB / 250 GB/s.
    assert comm.ms("all_gather", 100 * MB, 8) == pytest.approx(0.01 + 0.35)
    # Across 2 hosts of 4: reduce-scatter + all-gather inside, all-reduce of 100 MB over 50 GB/s across.
    inside = 2 * (0.01 + 0.75 * 100 * MB / 250e9 * 1e3)
    across = 2 * 5e-3 + 2 * 0.5 * 100 * MB / 50e9 * 1e3
    assert comm.ms("all_reduce", 100 * MB, 4, 2) == pytest.approx(inside + across)
    assert "stated, not probed" in comm.describe("all_reduce", 4)
    with pytest.raises(ValueError, match="must be positive"):
        probe.stated_model(0, 10)


H200_BASES = REPO / "results" / "reference" / "h200" / "predict"
H200_MEASURED = [REPO / "results" / "reference" / "h200" / name for name in (
    "h200x4-shard-r18.json", "h200-scaling-resnet18-fp32-foreach.json", "h200x2-fsdp2-reshard-1.json")]


def communication_bounds(target: str, facts, comm, n: int) -> tuple[float, float]:
    """(least, most) ms that the collectives of one step at n can add to the one-device step,
    from the collectives alone, worked out independently of the simulation: the most is every
    collective one after the other; the least is what no compute can hide: DDP's last bucket
    (its last gradient is ready when backward ends) and the buffers' broadcast before forward,
    ZeRO-1's per-parameter broadcasts after the update besides, FSDP2's first all-gather (before
    any compute) and its last reduce-scatter (after the last gradient)."""
    sizes = [p.numel * 4 for p in facts.ready]
    buckets = [sum(sizes[i] for i in b) for b in ddp_buckets(sizes, 25 << 20)]
    broadcasts = sum(comm.ms("broadcast", b, n) for b in facts.buffer_bytes)
    reduce = [comm.ms("all_reduce", b, n) for b in buckets]
    if target == "fsdp2":
        units = facts.unit_numel()
        gathers = {u: comm.ms("all_gather", k * 4, n) for u, k in units.items()}
        scatters = {u: comm.ms("reduce_scatter", k * 4, n) for u, k in units.items()}
        last = facts.ready[-1].unit  # its gradients are ready last, and it is gathered first in forward
        return gathers[last] + scatters[last], 2 * sum(gathers.values()) + sum(scatters.values())
    least, most = reduce[-1] + broadcasts, sum(reduce) + broadcasts
    if target == "zero1":
        parameters = sum(comm.ms("broadcast", p.numel * 4, n) for p in facts.ready)
        least, most = least + parameters, most + parameters
    return least, most


def assert_communication_shows(rows: list[dict], comm, targets, n: int) -> None:
    """Predicted over `comm`, a link slow enough that communication is most of the step, every
    strategy's step at n lies between the one-device step plus what no compute can hide (less
    the most a sharded update can save) and the one-device step plus every collective: a
    predictor that leaves communication out, or counts it twice, falls outside."""
    from bench.predict import params, predict, timeline

    for row in predict.predict(rows, comm, targets, [n]):
        base = next(r for r in rows if r.get("anatomy_traces") and predict.traces_of(r) == row["base"]["traces"])
        step = timeline.read(predict.traces_of(base), 0)
        least, most = communication_bounds(row["strategy"], params.facts(row["model"]), comm, n)
        assert least > step.optimizer, (row["strategy"], least)  # so that leaving it out cannot pass
        low = float(base["step_ms_p50"]) + least - step.optimizer
        high = float(base["step_ms_p50"]) + most
        assert low <= row["step_ms"] <= high + 1e-6, (row["strategy"], low, row["step_ms"], high)


def slowed(comm, factor: float):
    """The same probe's fits with every bus bandwidth divided by `factor`."""
    fits = {k: col.Fit(f.collective, f.n, f.alpha_us, f.busbw_gbps / factor, f.rel_rms, f.points)
            for k, f in comm.fits.items()}
    return col.CommModel(fits, comm.inter, source=f"{comm.source} / {factor:g}")


def assert_collectives_counted(pairs: list[dict]) -> None:
    """Every pair at 2+ devices whose measured run counted its collectives: the simulated
    collectives carry exactly the elements the run's did (bench.measure.counters)."""
    counted = [v for v in pairs if v["devices"] > 1 and v.get("measured_collective_elements") is not None]
    assert counted, "no measured run counted its collectives"
    for v in counted:
        assert v["predicted_collective_elements"] == v["measured_collective_elements"], v


def test_h200_one_gpu_traces_predict_the_measured_2_and_4_gpu_runs(tmp_path):
    """From the committed one-GPU H200 bases (resnet18 fp32 at 256, --anatomy) and NCCL's bus
    bandwidth of 2 H200 (253 GB/s, stated): DDP, FSDP2 and ZeRO-1 at 2 and 4 GPUs against the
    committed runs (bound by the GPU; other H200 hosts, other days).

    What it proves: the compute the model keeps and the memory it adds hold (images/s within 5%,
    the sharded strategies' peak memory within 5%); the collectives it simulates are the ones the
    runs issued (the elements each run's profiler counted, exactly); and its communication
    counts: over a link 100 times slower, each step lies between the one-device step plus what
    no compute can hide and the one-device step plus every collective. The images/s alone cannot
    tell the model from linear scaling here (communication is under 1% of these steps); the last
    two fail for a predictor that drops communication."""
    import shutil
    import tarfile

    from bench.cases import results
    from bench.predict import predict, probe, validate

    for name in ("h200-bases-cl-256.json", "h200-bases-256.json"):
        shutil.copy(H200_BASES / name, tmp_path / name)
    with tarfile.open(H200_BASES / "traces.tar.xz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if "fp32-resnet18-1-gpu-b256" in m.name],
                       filter="data")
    rows = results.load_many([tmp_path / "h200-bases-cl-256.json", tmp_path / "h200-bases-256.json", *H200_MEASURED])
    rows = [r for r in rows if r["model"] == "resnet18" and r["precision"] == "fp32"]
    link = probe.stated_model(253.0, 10.0)
    predicted = predict.predict(rows, link, ["ddp", "fsdp2", "zero1"], [2, 4])
    pairs = [v for v in validate.pair(predicted, rows, link) if v["devices"] > 1]
    assert {(v["strategy"], v["devices"]) for v in pairs} >= {("ddp", 2), ("ddp", 4), ("fsdp2", 2), ("fsdp2", 4),
                                                              ("zero1", 4)}
    for v in pairs:
        assert not v["host_bound"], v
        assert abs(v["error_pct"]) <= 5, v
        if v["strategy"] != "ddp":
            assert abs(v["predicted_memory_mib"] / v["measured_memory_mib"] - 1) <= 0.05, v
    assert_collectives_counted(pairs)
    bases = [r for r in rows if r.get("anatomy_traces")]
    assert_communication_shows(bases, probe.stated_model(2.53, 10.0), ["ddp", "fsdp2", "zero1"], 4)


def test_one_host_of_2_h200_resnet18_at_1024_within_5_percent(tmp_path):
    """`make predict-validate` on one host of 2 H200 (results/reference/h200x2/predict-validate/run-1):
    from its probe and one-GPU traces, DDP, FSDP2 and ZeRO-1 on resnet18 at 1024 per GPU, fp32 and
    amp-bf16, against the 2-GPU runs measured there.

    What it proves: each prediction within 5% of the measured images/s, with the collectives the
    runs issued (exactly the elements their profiler counted), and, over the same probe's link
    made 300 times slower, a step between the one-device step plus what no compute can hide and
    the one-device step plus every collective. At 2 GPUs on NVLink communication is about 0.2 ms
    of these steps and linear scaling is within 5% too (the validation prints both); the last two
    checks are what fail for a predictor that drops communication."""
    import shutil
    import tarfile

    from bench.cases import results
    from bench.predict import predict, probe, validate

    run = REPO / "results" / "reference" / "h200x2" / "predict-validate" / "run-1"
    for name in ("bases.json", "measured.json"):
        shutil.copy(run / name, tmp_path / name)
    with tarfile.open(run / "traces.tar.xz") as tar:
        tar.extractall(tmp_path, members=[m for m in tar.getmembers() if "-resnet18-1-gpu-b1024" in m.name],
                       filter="data")
    rows = [r for r in results.load_many([tmp_path / "bases.json", tmp_path / "measured.json"])
            if r["model"] == "resnet18" and r["batch_per_gpu"] == 1024]
    comm = probe.comm_model(probe.load(run / "link.comm.json"))
    pairs = [v for v in validate.pair(predict.predict(rows, comm, ["ddp", "fsdp2", "zero1"], [2]), rows, comm)
             if v["devices"] == 2]
    assert {(v["strategy"], v["precision"]) for v in pairs} == {
        (s, p) for s in ("ddp", "fsdp2", "zero1") for p in ("fp32", "amp-bf16")}
    assert all(abs(v["error_pct"]) <= 5 for v in pairs), [(v["label"], v["error_pct"]) for v in pairs]
    assert all("linear_error_pct" in v and "serial_error_pct" in v for v in pairs)
    assert_collectives_counted(pairs)
    bases = [r for r in rows if r.get("anatomy_traces") and r["precision"] == "fp32"]
    assert_communication_shows(bases, slowed(comm, 300), ["ddp", "fsdp2", "zero1"], 2)


def test_validation_prints_the_model_beside_linear_scaling_and_serial_communication():
    """Both baselines by hand on one pair: linear = n x the one-device images/s; serial = the
    global batch over (the one-device step + the all-reduce of every fp32 gradient at n). The
    committed validations (runs 1-4 on 2 H200, recomputed from their files) count the pairs the
    issue counted: 84 at 2 GPUs, 55 bound by the GPU of which the model has 41 within 5% and
    linear scaling 42, 29 bound by the host (3 and 3); so the model has not beaten linear scaling
    in either regime, and the summary says so."""
    from bench.predict import probe, validate

    link = probe.stated_model(100.0, 0.0)  # 2 ranks: an all-reduce of S bytes takes S / 100 GB/s
    got = validate.baselines({"img_per_s": 1000.0, "step_ms_p50": 32.0}, link, 25_000_000, 2, 2, 1, 64)
    assert got["linear_img_per_s"] == 2000.0
    assert got["gradient_all_reduce_ms"] == pytest.approx(1.0)  # 100 MB of fp32 gradients at 100 GB/s
    assert got["serial_img_per_s"] == pytest.approx(64 / 0.033, abs=0.01)
    committed = validate.committed_pairs()
    regimes = validate.by_regime(committed)
    device, host = regimes["device-bound"], regimes["host-bound"]
    assert (device["pairs"], device["model"]["within"], device["linear"]["within"]) == (55, 41, 42)
    assert (host["pairs"], host["model"]["within"], host["linear"]["within"]) == (29, 3, 3)
    assert not validate.beats_linear(device) and not validate.beats_linear(host)
    assert sorted({v["run"] for v in committed}) == ["run-1", "run-2", "run-3", "run-4"]
    said = validate.summary(committed)
    assert any(line.startswith("device-bound bases: 55 pairs") and "has not beaten linear scaling" in line
               for line in said), said


def test_validation_says_whether_a_prediction_falls_inside_the_measured_spread():
    """A host-bound step moves more within one measurement than the 5% a prediction is held to
    (results/reference/h200/repeat/): each pair says whether the prediction falls between the
    measured case's p10 and p90 images/s, and the summary counts them per kind of base."""
    from bench.predict import validate

    assert validate.within_spread(100.0, 90.0, 110.0) is True
    assert validate.within_spread(100.0, 110.0, 90.0) is True  # images/s p10 may be the larger
    assert validate.within_spread(111.0, 90.0, 110.0) is False
    assert validate.within_spread(100.0, None, 110.0) is None

    def pair(error, inside, host_bound):
        return {"devices": 2, "error_pct": error, "within_measured_spread": inside, "host_bound": host_bound,
                "run_drift_pct": 0.0, "strategy": "ddp"}

    lines = validate.summary([pair(12.0, True, True), pair(-20.0, False, True), pair(30.0, None, True),
                              pair(1.0, False, False)])
    host = next(line for line in lines if line.startswith("host-bound"))
    device = next(line for line in lines if line.startswith("device-bound"))
    assert "3 pairs" in host and "inside the measured p10-p90: 1 of 2" in host
    assert "inside the measured p10-p90: 0 of 1" in device


def test_report_draws_predictions_beside_the_measured_and_the_answer_ignores_them(tmp_path):
    import shutil

    from bench.report import pages

    shutil.copy(H200_BASES / "h200-bases-best-r18.json", tmp_path / "run.json")
    alone = pages.write_report([tmp_path / "run.json"], tmp_path / "alone").read_text()
    assert "Predicted" not in alone
    shutil.copy(H200_BASES / "scale-out-3200gbps.predictions.json", tmp_path / "scale.predictions.json")
    report = pages.write_report([tmp_path / "run.json"], tmp_path / "with").read_text()
    def answer(text):
        return text.split("## The answer")[1].split("\n## ")[0]

    assert answer(report) == answer(alone) and "predicted" not in answer(report).lower()
    section = report.split("## Predicted beyond the measured devices")[1]
    from bench.report.figures import slug

    name = f"nvidia-h200-resnet18-predicted-{slug(tmp_path.name, 'scale')}"  # the file's folder and name
    assert f"![{name}]({name}.png)" in section
    assert (tmp_path / "with" / f"{name}.png").exists()
    assert "8x8" in section and "stated link (295 GB/s, 10 us)" in section and "3200 Gb/s per host" in section
    # How far to trust it: the committed 2-H200 validations, recomputed, per regime beside linear scaling,
    # and each H200 series' validated error range (its regime's, at the device counts validated).
    assert "How far to trust a prediction: the committed validations (NVIDIA H200" in section
    assert "- device-bound: 55 pairs; within 5%: model 41, linear 42" in section
    assert section.count("**The model has not beaten linear scaling here.**") == 2
    assert "validated error" in section and "pairs at 2 devices)" in section
    # `bench answer` says it apart, from a prediction whose base ran the strategy itself.
    from bench.report.predicted import said_in_answer

    said = said_in_answer([tmp_path / "run.json"])
    assert len(said) == 1 and said[0].startswith("Predicted, not measured (scale.predictions.json): at 8x8 devices")
    assert "the highest is ddp (" in said[0] and "from ddp amp-fp16 resnet18 1 GPU batch 256" in said[0]


def test_report_sets_each_measured_point_on_its_own_series_only(tmp_path):
    """Measured points and errors join their prediction by hardware, model, strategy, knobs,
    precision and batch: the 2- and 4-GPU errors land on resnet18-small's fused-SGD DDP row at
    1024, none on another GPU's copy of the same predictions; files that cannot be read are
    left out in one line, in the report and in the answer."""
    import shutil

    from bench.predict import store
    from bench.report.predicted import said_in_answer, section

    shutil.copy(H200_BASES / "h200-bases-best-small.json", tmp_path / "run.json")
    doc = store.load(H200_BASES / "validation-2-4.predictions.json")
    keep = [p for p in doc["predictions"] if p["model"] == "resnet18-small" and p["batch_per_gpu"] == 1024]
    other_gpu = [{**p, "hardware": "NVIDIA H100 80GB HBM3"} for p in keep]
    store.write(tmp_path / "v.predictions.json", store.document(keep + other_gpu, doc["validation"], doc["settings"]))
    (tmp_path / "broken.predictions.json").write_text('{"schema": "something else"}')
    text = "\n".join(section([tmp_path / "run.json"], tmp_path))

    def table_rows(part):  # the cells of one GPU's table
        return [[c.strip() for c in line.split("|")[1:-1]] for line in part.split("**")[0].splitlines()
                if line.startswith("| `")]

    h200 = table_rows(text.split("**resnet18-small on NVIDIA H200**")[1])
    h100 = table_rows(text.split("**resnet18-small on NVIDIA H100 80GB HBM3**")[1])
    fused = [r for r in h200 if r[0] == "`ddp`, channels_last, sgd=fused" and r[1] == "amp-bf16"]
    assert len(fused) == 1 and fused[0][-1].startswith("2: +") and "; 4: +" in fused[0][-1], fused
    assert sum(bool(r[-1]) for r in h200) == 3  # DDP with channels_last, with fused SGD, and the fastest settings
    assert h100 and not any(r[-1] for r in h100)
    assert "`broken.predictions.json` left out: " in text
    assert any("broken.predictions.json left out" in line for line in said_in_answer([tmp_path / "run.json"]))


# --- end to end on the CPU ---------------------------------------------------------------------
def bench_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`python -m bench probe-comm|predict ...`."""
    return run_cli(*args, env=env)


def test_bad_input_gets_one_line(tmp_path):
    for args, says in ((["probe-comm", "--gpus", "", "--devices", "1"], "2 or more devices"),
                       (["probe-comm", "--gpus", "", "--sizes", "4K,lots"], "--sizes takes sizes"),
                       (["predict", "--results-dir", str(tmp_path), "--probe", str(tmp_path / "none.json")],
                        "cannot read probe"),
                       (["predict", "--results-dir", str(tmp_path), "--strategies", "dp"], "cannot predict 'dp'"),
                       (["predict", "--results-dir", str(tmp_path), "--probe", "x.comm.json", "--intra-host-busbw", "250"],
                        "give --probe or --intra-host-busbw, not both")):
        proc = bench_cli(*args)
        assert proc.returncode == 2 and says in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_link_figures_and_process_counts_are_refused_before_anything_starts(tmp_path, capsys):
    """A link figure that is not a positive finite number (NaN, infinite, negative) would make
    every prediction NaN; a device count past what predictions cover, or more CPU ranks for
    probe-comm than this host's cores (without --oversubscribe) or memory (at one probe rank's
    measured peak) hold, would start what the host cannot run. Each is one line and exit 2,
    before anything is read or started."""
    from bench.cli import main
    from bench.predict import probe
    from bench.run import limits

    stated = ["predict", "--results-dir", str(tmp_path), "--intra-host-busbw"]
    for args, says in ((stated + ["nan"], "--intra-host-busbw must be a finite number above 0, got nan"),
                       (stated + ["-1"], "--intra-host-busbw must be a finite number above 0, got -1"),
                       (stated + ["inf"], "--intra-host-busbw must be a finite number above 0, got inf"),
                       (stated + ["250", "--inter-host-gbps", "nan"], "--inter-host-gbps must be a finite number"),
                       (stated + ["250", "--intra-host-latency-us", "-5"], "--intra-host-latency-us must be a finite "
                                                                           "number of 0 or more"),
                       (stated + ["250", "--devices", "1,100000"], "predictions go up to 65,536 devices"),
                       (["probe-comm", "--gpus", "", "--sizes", "4K", "--devices", str(limits.usable_cores() + 1),
                         "--out", str(tmp_path / "x.comm.json")], "--oversubscribe")):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert says in err and len(err.strip().splitlines()) == 1, (args, err)
    assert not (tmp_path / "x.comm.json").exists()
    # The memory rule, on a host of 8 cores and 4 GiB available: 8 ranks of 480 MiB fit, 9 do not
    # (whatever the cores); larger messages make each rank larger.
    probe.check_cpu_ranks(8, probe.RESNET18_GRAD_BYTES, False, cores=8, available_bytes=4 << 30)
    with pytest.raises(probe.ProbeError, match="use at most 8"):
        probe.check_cpu_ranks(9, probe.RESNET18_GRAD_BYTES, True, cores=64, available_bytes=4 << 30)
    with pytest.raises(probe.ProbeError, match="use at most 4"):
        probe.check_cpu_ranks(8, probe.RESNET18_GRAD_BYTES + (200 << 20), False, cores=8, available_bytes=4 << 30)


def test_probe_comm_ranks_die_with_a_killed_probe(tmp_path):
    """SIGKILL of `probe-comm` (no handler runs) takes its spawned ranks along, also while they
    are still starting (importing torch, before torch's own spawn asks for a signal at its
    parent's death): each rank asks the kernel to kill it when its parent dies and checks, once
    started, that its parent is still the probe. The probe is killed as soon as its ranks exist."""
    import signal
    import time

    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "bench", "probe-comm", "--gpus", "", "--devices", "2",
                             "--sizes", "4K,8K", "--reps", "100000", "--out", str(tmp_path / "x.comm.json")],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    ranks: list = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)
                     if "spawn_main" in " ".join(c.cmdline())]
            time.sleep(0.02)
        assert len(ranks) == 2, "the probe's ranks did not start"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        gone, alive = psutil.wait_procs(ranks, timeout=30)  # time to import torch and look
        assert not alive, [p.pid for p in alive]
    finally:
        for rank in ranks:
            try:
                rank.kill()
            except psutil.NoSuchProcess:
                pass


FIT_MODELS = REPO / "tests" / "fixtures" / "fit"  # tinynets: small networks a CPU step takes milliseconds for
CPU_RUN = ["--gpus", "", "--strategies", "ddp,zero1,fsdp2", "--models", "tinynets:widenet", "--batch-sizes", "4",
           "--warmup", "1", "--steps", "2", "--trials", "1"]


@pytest.mark.slow
def test_cpu_x2_predictions_carry_the_communication_the_measured_run_issued(tmp_path, monkeypatch):
    """DDP, ZeRO-1 and FSDP2 on 2 CPU processes (gloo), each predicted from its own 1-process run
    with its traces and a 2-process gloo probe, and validated against the measured 2-process run.

    How fast the step is on this shared 2-core machine is not judged (other jobs move it by more
    than any model's error); what is judged does not depend on the machine's load. Each
    prediction's collectives carry exactly the elements the measured run's profiler counted
    (DDP's bucket and the buffers' broadcasts, ZeRO-1's per-parameter broadcasts, FSDP2's padded
    shards); the time it gives them is the probe's cost of each, worked out here independently
    (every collective once); and the validation prints the model beside both baselines. A
    predictor that drops communication fails the first two."""
    from bench.predict import params, probe

    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(REPO), str(FIT_MODELS)])}
    monkeypatch.syspath_prepend(str(FIT_MODELS))  # the model's facts, here as in the command
    x1, x2, comm_file, out = (tmp_path / n for n in ("x1.json", "x2.json", "cpu.comm.json", "p.json"))
    for args in (("run", *CPU_RUN, "--cpu-replicas", "1", "--anatomy", "--out", str(x1)),
                 ("run", *CPU_RUN, "--cpu-replicas", "2", "--out", str(x2)),
                 ("probe-comm", "--gpus", "", "--devices", "2", "--sizes", "4K,64K,1M,4M", "--reps", "3",
                  "--out", str(comm_file))):
        proc = run_cli(*args, env=env)
        assert proc.returncode == 0, proc.stderr
    proc = run_cli("predict", str(x1), str(x2), "--probe", str(comm_file), "--devices", "1,2", "--validate",
                   "--json", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    assert "linear" in proc.stdout and "serial" in proc.stdout and "the simulated collectives carry" in proc.stdout
    doc = json.loads(out.read_text())
    pairs = [v for v in doc["validation"] if v["devices"] == 2]
    assert sorted(v["strategy"] for v in pairs) == ["ddp", "fsdp2", "zero1"]
    assert_collectives_counted(pairs)
    comm = probe.comm_model(probe.load(comm_file))
    facts = params.facts("tinynets:widenet")
    for row in (r for r in doc["predictions"] if r["devices"] == 2):
        assert row["base"]["label"].startswith(row["strategy"] + " ")  # its own 1-process case
        assert row["comm_ms"] == pytest.approx(communication_bounds(row["strategy"], facts, comm, 2)[1], abs=1e-3)
        print(f"CPU x2 {row['strategy']}: predicted {row['img_per_s']:.1f} img/s, communication {row['comm_ms']:.2f} ms "
              f"of a {row['step_ms']:.1f} ms step; measured "
              + ", ".join(f"{v['measured_img_per_s']:.1f} img/s (error {v['error_pct']:+.1f}%, linear "
                          f"{v['linear_error_pct']:+.1f}%)" for v in pairs if v["strategy"] == row["strategy"]))
