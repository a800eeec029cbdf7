"""The step clock against a simulated GPU: a host that issues each step in `host_ms` and a GPU
that runs it in `gpu_ms`, in order, with CUDA events that complete when the work queued before
them has. What a trial reports must be the step time training sees (the queue full), whatever
the synchronisation that starts every trial does to the first steps after it."""
from __future__ import annotations

import types

import pytest
import torch

from bench.measure import timing


class SimulatedGPU:
    def __init__(self, host_ms: float, gpu_ms: float):
        self.host_s, self.gpu_s = host_ms / 1000, gpu_ms / 1000
        self.now = 100.0  # the host's clock
        self.free_at = self.now  # when the work queued so far completes
        self.steps_run = 0

    def step(self) -> None:
        self.now += self.host_s  # the host issues the step's work...
        self.free_at = max(self.free_at, self.now) + self.gpu_s  # ...which runs once the GPU is free
        self.steps_run += 1

    def event(self, enable_timing: bool = False):
        gpu = self

        class Event:
            def record(self, stream=None):
                self.at = max(gpu.free_at, gpu.now)

            def elapsed_time(self, later) -> float:
                return (later.at - self.at) * 1000

        return Event()

    def synchronize(self, device=None) -> None:
        self.now = max(self.now, self.free_at)


@pytest.fixture
def simulated(monkeypatch):
    def make(host_ms: float, gpu_ms: float) -> SimulatedGPU:
        gpu = SimulatedGPU(host_ms, gpu_ms)
        monkeypatch.setattr(torch.cuda, "Event", gpu.event)
        monkeypatch.setattr(torch.cuda, "synchronize", gpu.synchronize)
        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: None)
        monkeypatch.setattr(timing, "time", types.SimpleNamespace(perf_counter=lambda: gpu.now))
        return gpu
    return make


def test_a_trial_times_the_gpu_step_not_the_hosts_launch_after_its_synchronisation(simulated):
    # torch.compile's reduce-overhead at 256/GPU on an H200: 3.2 ms on the GPU, the host close
    # behind. Timed from the synchronisation, the first step read host + GPU (6.2 ms here; 4.3-5.6 ms
    # in results/reference/h200x2/answer/search-1.json at commit b327837) and the row read as two speeds.
    gpu = simulated(host_ms=3.0, gpu_ms=3.2)
    clock = timing.StepClock([torch.device("cuda", 0)])
    for _ in range(3):
        steps, wall = clock.time_trial(gpu.step, 20)
        assert len(steps) == 20
        assert steps == pytest.approx([3.2] * 20, abs=1e-6)
        # The wall clock covers the timed steps only: it agrees with them, no stop is read into it.
        assert wall * 1000 == pytest.approx(sum(steps), abs=1e-6)
    assert gpu.steps_run == 3 * (20 + timing.LEAD_IN)


def test_a_host_bound_step_still_reads_the_hosts_time(simulated):
    # The lead-in hides only the drained queue: a host slower than its GPU sets every step's time.
    gpu = simulated(host_ms=5.0, gpu_ms=3.2)
    steps, wall = timing.StepClock([torch.device("cuda", 0)]).time_trial(gpu.step, 20)
    assert steps == pytest.approx([5.0] * 20, abs=1e-6)
    assert wall * 1000 == pytest.approx(sum(steps), abs=1e-6)


def test_the_cpu_clock_times_every_step_it_runs(monkeypatch):
    runs = []
    steps, wall = timing.StepClock([torch.device("cpu")]).time_trial(lambda: runs.append(1), 7)
    assert len(steps) == 7 and len(runs) == 7 and wall >= 0


def test_a_gpu_held_below_its_clocks_during_the_trials_is_read_from_nvml_with_its_power_limit(monkeypatch):
    """On 2 H200s the default search's 2048/GPU compiled cases ran into the 700 W power cap (nvidia-smi:
    SM clocks down to 1365 MHz from 1980: results/reference/h200x2/answer/smi-search-1.csv), and no
    row said so. NVML's violation counters, read before and after the trials: the share of the
    trials' time the most capped GPU spent capped, and the lowest power limit it ran under. The
    answer says the power share beside the figure; only a temperature cap is a caveat."""
    from bench.cases.caveats import caveat
    from bench.measure import throttle
    from bench.report.answer_text import _case

    counters = {0: {0: 0, 1: 0}, 1: {0: 0, 1: 0}}  # handle -> policy -> ns
    clock = {"now": 50.0}
    fake = types.SimpleNamespace(
        NVML_PERF_POLICY_POWER=0, NVML_PERF_POLICY_THERMAL=1,
        nvmlDeviceGetViolationStatus=lambda h, policy: types.SimpleNamespace(violationTime=counters[h][policy]),
        nvmlDeviceGetEnforcedPowerLimit=lambda h: (700_000, 650_000)[h])  # milliwatts
    monkeypatch.setitem(__import__("sys").modules, "pynvml", fake)
    monkeypatch.setattr(torch.cuda, "_get_pynvml_handler", lambda device: device.index, raising=False)
    monkeypatch.setattr(throttle, "time", types.SimpleNamespace(perf_counter=lambda: clock["now"]))

    limits = throttle.ClockLimits([torch.device("cuda", 0), torch.device("cuda", 1)])
    limits.start()
    clock["now"] += 2.0  # two seconds of trials: GPU 1 capped for power 0.5 s, GPU 0 for 0.1 s
    counters[0][0], counters[1][0] = 100_000_000, 500_000_000
    assert limits.columns() == {"power_capped_pct": 25.0, "thermal_capped_pct": 0.0, "power_limit_w": 650.0}

    # The power cap is a fact beside the figure, not a caveat: NVML counts its time, not its depth
    # (on H200s, 93% of a run's time "capped" at 1905-1980 MHz of 1980: results/reference/h200x4/throttle).
    row = {"status": "ok", "warmup": 10, "n_timed_steps": 60, "power_capped_pct": 93.0, "thermal_capped_pct": 0.0}
    assert caveat(row) == ""
    cell = {"label": "ddp", "precision": "fp32", "where": "2 GPUs", "batch_per_gpu": 256, "devices": 2,
            "items_per_s": 1000.0, "items_per_s_p10": 990.0, "items_per_s_p90": 1010.0, "speedup": None,
            "peak_alloc_mib": None, "regime": "", "power_capped_pct": 93.0, "power_limit_w": 700.0}
    assert _case(cell).endswith(", at its power limit of 700 W during 93% of its trials")
    assert _case({**cell, "power_capped_pct": 100.8}).endswith("at its power limit of 700 W throughout its trials")
    assert "power limit" not in _case({**cell, "power_capped_pct": 2.0})  # a brief cap says nothing
    # Held down by its temperature: the cooling set part of the speed, and the row says so.
    hot = {**row, "thermal_capped_pct": 25.0}
    assert "below its asked clocks for its temperature during 25% of the timed trials" in caveat(hot)
    assert caveat({**hot, "thermal_capped_pct": 2.0}) == ""  # a brief cap says nothing
    # The CPU, or no NVML: nothing read, nothing said.
    nothing = {"power_capped_pct": None, "thermal_capped_pct": None, "power_limit_w": None}
    assert throttle.ClockLimits([torch.device("cpu")]).columns() == nothing
    assert caveat({**hot, "thermal_capped_pct": None}) == ""
    assert "power limit" not in _case({**cell, "power_capped_pct": None})
