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
