"""Compiles off the clock (bench/run/precompile.py): a side process compiles a case's graphs without
running them and its worker then loads every one from inductor's cache; the search hands the side
processes the compiled levers it will most likely measure, in the levers' order, and settles a
case's side compiles before measuring it; the side processes are dropped, waited for or stopped as
the search needs; the flag is refused without a search."""
from __future__ import annotations

import json
import os
import sys
import time

import pytest

from bench.cases.case import Case, settings
from bench.cases.grid import build_cases
from bench.cases.levers import execution_of
from bench.cases.ranking import asked_of
from bench.core.placement import Placement
from bench.run import precompile
from bench.run.precompile import SideCompiles
from tests.conftest import rows_of, run_cli


@pytest.mark.slow
def test_a_side_compile_leaves_every_graph_its_worker_then_loads(tmp_path):
    """DDP on 2 CPU ranks, its graph split at bucket boundaries (resnet18-small's 45 MB in 25 MB buckets), built in a
    fake world of 2: the side process compiles every graph afresh into an empty cache without
    running the step, and the real worker's row then says every graph came from that cache. A
    worker whose compile differed from the side's (another mode, the backward lowered lazily: a
    different cache key) would compile afresh, and the last assertion fails."""
    cache = tmp_path / "cache"
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache)  # the side processes take the workers' environment
    try:
        case = Case.make("ddp", "fp32", "resnet18-small", Placement((), 2), 2, "compile",
                         settings(warmup=1, steps=2, trials=1, compile_mode="reduce-overhead"))
        side = SideCompiles(slots=1)
        side.submit([case])
        deadline = time.monotonic() + 400
        while any(i.state in ("queued", "running") for i in side.items) and time.monotonic() < deadline:
            time.sleep(0.5)
        side.close()
    finally:
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
    [item] = side.items  # on the CPU every rank compiles the same graphs: one side process
    assert item.state == "done", item.said
    said = json.loads(item.said)
    assert said["from_cache"] == 0 and said["compiled"] >= 4, said  # a forward and a backward per piece, >= 2 pieces

    out = tmp_path / "run.json"
    done = run_cli("run", "--gpus", "", "--cpu-replicas", "2", "--strategies", "ddp", "--models", "resnet18-small",
                   "--precisions", "fp32", "--execution", "compile", "--compile-mode", "reduce-overhead",
                   "--batch-sizes", "2", "--warmup", "1", "--steps", "2",
                   "--trials", "1", "--out", str(out), env={"TORCHINDUCTOR_CACHE_DIR": str(cache)})
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = rows_of(out)
    assert row["status"] == "ok", row.get("reason")
    assert (row["graphs_from_cache"], row["graphs_compiled"]) == (said["compiled"], 0), row["compile_cache"]


def test_the_search_compiles_its_likely_levers_beside_the_survey_and_settles_each_before_it_is_measured(
        tmp_path, monkeypatch):
    """On a simulated 2-GPU host: the side compiles are the compiled execution levers of the
    reference strategy at 2 GPUs and of the baseline at one, compile reduce-overhead at every
    batch (2 GPUs first) before plain compile; every compiled case the search measures was
    settled first, and the log says what the side processes did."""
    from bench.run import search as search_module
    from tests.test_search import H200X2, Clock, DeviceSweep, Quiet

    calls = []

    class Recorded:
        def __init__(self):
            self.submitted, self.closed = [], False

        def submit(self, cases):
            self.submitted += cases

        def settle(self, cases):
            calls.append(("settle", [c.key() for c in cases]))

        def close(self):
            self.closed = True

        def summary(self):
            return {"processes": len(self.submitted), "done": len(self.submitted)}

    side = Recorded()
    monkeypatch.setattr(search_module, "SideCompiles", lambda: side)
    s = settings(channels_last=True, warmup=10, steps=20, trials=3)
    names = sorted({name for name, _, _ in H200X2})
    cases = build_cases(names, ["amp-bf16"], ["resnet18-small"], ["eager"], [0, 1], [2], 1, [256, 1024, 2048], s)
    clock = Clock()
    sweep = DeviceSweep(tmp_path / "run.json", clock, None, H200X2, None)
    original = sweep.run

    def run(cases=None, again=False):
        calls.append(("measure", [c.key() for c in cases or []]))
        return original(cases, again)

    sweep.run = run
    search_module.Search(sweep, s, 300, asked_of(s, "eager"), Quiet(), clock=clock, side_compiles=True).run(cases)

    said = [(c.strategy, c.n_replicas, execution_of(c), c.batch_per_gpu) for c in side.submitted]
    assert said == ([("ddp", 2, "compile:reduce-overhead", b) for b in (256, 1024, 2048)]
                    + [("single", 1, "compile:reduce-overhead", b) for b in (256, 1024, 2048)]
                    + [("ddp", 2, "compile", b) for b in (256, 1024, 2048)]
                    + [("single", 1, "compile", b) for b in (256, 1024, 2048)])
    compiled = {c.key() for c in side.submitted}
    measured = [(i, k) for i, (what, keys) in enumerate(calls) if what == "measure" for k in keys if k in compiled]
    assert measured, "the search measured none of the cases compiled beside it"
    for index, key in measured:
        assert calls[index - 1][0] == "settle" and key in calls[index - 1][1], key
    doc = json.loads((tmp_path / "run.json").read_text())
    assert side.closed and doc["search"]["side_compiles"] == {"processes": 12, "done": 12}


def sleeper(side: SideCompiles, seconds: float):
    """Side processes that sleep instead of compiling: `_start` runs `sleep` for each."""
    from bench.run.procs import Worker

    def start(item):
        item.worker = Worker([sys.executable, "-c", f"import time; time.sleep({seconds})"], dict(os.environ), ".")
        item.state, item.started = "running", side.clock()

    side._start = start


def cases_at(*batches) -> list[Case]:
    return [Case.make("single", "fp32", "resnet18-small", Placement((), 1), b, "compile", settings()) for b in batches]


def test_settling_drops_a_queued_side_compile_waits_for_a_running_one_and_stops_one_past_its_limit():
    side = SideCompiles(slots=1)
    sleeper(side, 0.3)
    first, second = cases_at(2, 4)
    side.submit([first, second])
    deadline = time.monotonic() + 10
    while side.items[0].state == "queued" and time.monotonic() < deadline:
        time.sleep(0.05)
    side.settle([first, second], limit_s=30)  # the first runs (waited for); the second is still queued (dropped)
    assert [i.state for i in side.items] == ["done", "dropped"]
    assert side.items[0].seconds >= 0.3

    slow = SideCompiles(slots=1)
    sleeper(slow, 60)
    [third] = cases_at(8)
    slow.submit([third])
    while slow.items[0].state == "queued":
        time.sleep(0.05)
    began = time.monotonic()
    slow.settle([third], limit_s=0.5)
    assert slow.items[0].state == "stopped" and time.monotonic() - began < 30
    slow.close()
    side.close()
    assert slow.summary()["stopped"] == 1 and side.summary()["dropped"] == 1


def test_close_stops_every_side_process_and_a_finished_one_bounds_the_wait_for_the_next():
    side = SideCompiles(slots=2)
    sleeper(side, 0.2)
    quick, slow_case = cases_at(2, 4)
    side.submit([quick])
    deadline = time.monotonic() + 10
    while side.items[0].state != "done" and time.monotonic() < deadline:  # the side's own thread ends it
        time.sleep(0.05)
    assert side.items[0].state == "done"
    sleeper(side, 60)
    side.submit([slow_case])
    while side.items[1].state == "queued":
        time.sleep(0.05)
    began = time.monotonic()
    side.settle([slow_case], limit_s=60)  # 1.5 times the 0.2 s that finished, not 60 s
    assert side.items[1].state == "stopped" and time.monotonic() - began < 20

    more = SideCompiles(slots=1)
    sleeper(more, 60)
    more.submit(cases_at(16, 32))
    while more.items[0].state == "queued":
        time.sleep(0.05)
    pid = more.items[0].worker.proc.pid
    more.close()
    assert [i.state for i in more.items] == ["stopped", "dropped"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_the_side_backend_compiles_with_the_modes_settings_and_stops_a_real_call():
    """The backend is inductor's own wrapper for the mode (its settings are in the cache key), and
    a call on real tensors stops while one on fake tensors (DDP's graph splitting) goes through."""
    import torch

    backend = precompile.compile_only("reduce-overhead")
    assert isinstance(backend, torch._TorchCompileInductorWrapper)
    assert backend.config == torch._TorchCompileInductorWrapper("reduce-overhead", None, None).config
    model = torch.nn.Linear(3, 2)
    compiled = torch.compile(model, backend=precompile.compile_only(None))
    with pytest.raises(precompile.Compiled):
        compiled(torch.ones(4, 3))


def test_side_compiles_are_a_searchs_and_the_flag_alone_is_refused():
    done = run_cli("run", "--gpus", "", "--no-search", "--side-compile", "--strategies", "single", "--batch-sizes", "2")
    assert done.returncode == 2
    assert "--side-compile compiles a search's levers beside its survey: drop it, or add --search" in done.stderr
    assert "Traceback" not in done.stderr
