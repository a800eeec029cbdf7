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
from bench.core.protocol import LOWER_BACKWARD_ENV
from bench.run import precompile
from bench.run.precompile import SideCompiles
from tests.conftest import rows_of, run_cli


@pytest.mark.slow
def test_a_side_compile_leaves_every_graph_its_worker_then_loads(tmp_path):
    """DDP on 2 CPU ranks, its graph split at bucket boundaries (resnet18-small's 45 MB in 25 MB buckets), built in a
    fake world of 2: the side process compiles every graph afresh into an empty cache without
    running the step, and the real worker's row then says every graph came from that cache. A side
    process that left the backward to the first backward (which it never runs) would compile the
    forwards alone, and a worker whose compile differed from the side's (another mode: a different
    cache key) would compile afresh: either assertion fails. (A worker that lowers its backwards
    lazily, as PyTorch does by default, found 4 of these 6 graphs and compiled 2: a search's
    workers lower them with the forward while side compiles run, LOWER_BACKWARD_ENV.)"""
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
    assert said["compiled"] % 2 == 0, said

    out = tmp_path / "run.json"
    done = run_cli("run", "--gpus", "", "--cpu-replicas", "2", "--strategies", "ddp", "--models", "resnet18-small",
                   "--precisions", "fp32", "--execution", "compile", "--compile-mode", "reduce-overhead",
                   "--batch-sizes", "2", "--warmup", "1", "--steps", "2",
                   "--trials", "1", "--out", str(out),
                   env={"TORCHINDUCTOR_CACHE_DIR": str(cache), LOWER_BACKWARD_ENV: "1"})  # as a search's worker
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
        lowered.add(os.environ.get(LOWER_BACKWARD_ENV))
        return original(cases, again)

    lowered = set()

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
    # Every worker of the search lowered its backwards as the side processes do; the setting ends with the search.
    assert lowered == {"1"} and LOWER_BACKWARD_ENV not in os.environ


def sleeper(side: SideCompiles, seconds: float):
    """Side processes that sleep instead of compiling, then report as a side compile does."""
    from bench.run.procs import Worker

    def start(item):
        script = f"import time; time.sleep({seconds}); print({precompile.REPORT!r} + '{{}}')"
        item.worker = Worker([sys.executable, "-c", script], dict(os.environ), ".")
        item.state, item.started = "running", side.clock()

    side._start = start


def until(condition, seconds: float = 60.0) -> None:
    """Wait for `condition()`, failing after `seconds` rather than hanging."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def cases_at(*batches) -> list[Case]:
    return [Case.make("single", "fp32", "resnet18-small", Placement((), 1), b, "compile", settings()) for b in batches]


def test_settling_drops_a_queued_side_compile_waits_for_a_running_one_and_stops_one_past_its_limit():
    side, slow = SideCompiles(slots=1), SideCompiles(slots=1)
    try:
        sleeper(side, 2)  # long enough that the second is still queued when the first is settled
        first, second = cases_at(2, 4)
        side.submit([first, second])
        until(lambda: side.items[0].state != "queued")
        side.settle([first, second], limit_s=30)  # the first runs (waited for); the second is still queued (dropped)
        assert [i.state for i in side.items] == ["done", "dropped"]
        assert side.items[0].seconds >= 2

        sleeper(slow, 60)
        [third] = cases_at(8)
        slow.submit([third])
        until(lambda: slow.items[0].state != "queued")
        began = time.monotonic()
        slow.settle([third], limit_s=0.5)
        assert slow.items[0].state == "stopped" and time.monotonic() - began < 30
    finally:
        slow.close()
        side.close()
    assert slow.summary()["stopped"] == 1 and side.summary()["dropped"] == 1


def test_once_the_survey_is_over_a_measurement_waits_for_every_side_compile_and_close_stops_them_all():
    side, more = SideCompiles(slots=2), SideCompiles(slots=1)
    try:
        sleeper(side, 0.2)
        quick, slow_case, other = cases_at(2, 4, 8)
        side.submit([quick])
        until(lambda: side.items[0].state == "done")  # the side's own thread ends it
        sleeper(side, 60)
        side.submit([slow_case])
        until(lambda: side.items[1].state != "queued")
        side.survey_over = True
        began = time.monotonic()
        side.settle([other], limit_s=60)  # not its own, but the survey is over: 1.5 times the 0.2 s that finished
        assert side.items[1].state == "stopped" and time.monotonic() - began < 20

        sleeper(more, 60)
        more.submit(cases_at(16, 32))
        until(lambda: more.items[0].state != "queued")
        pid = more.items[0].worker.proc.pid
    finally:
        more.close()
        side.close()
    assert [i.state for i in more.items] == ["stopped", "dropped"]
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_case_that_cannot_be_prepared_is_a_failed_side_compile_and_the_rest_go_on(monkeypatch):
    from bench.run import workers

    side = SideCompiles(slots=1)
    try:
        sleeper(side, 0.1)
        broken, fine = cases_at(2, 4)
        real = workers.worker_spec
        monkeypatch.setattr(workers, "worker_spec", lambda cases, folder: (
            (None, [(cases[0], OSError("disk full"))]) if cases[0] == broken else real(cases, folder)))
        side.submit([broken, fine])
        until(lambda: side.items[1].state == "done")
    finally:
        side.close()
    assert (side.items[0].state, side.items[0].said) == ("failed", "OSError: disk full")
    assert side.summary()["failures"][0]["said"] == "OSError: disk full"


def test_side_processes_run_on_whole_cores_of_the_last_half_of_the_cpus(monkeypatch):
    """A measured worker the kernel places on the first half of the CPUs shares no core with a
    compile (adjacent CPUs are one core's on the lent machines: bench/run/affinity.py); a side
    process pins itself before torch starts a thread, so every thread it starts stays there."""
    from bench.run import affinity

    hidden = lambda path: (_ for _ in ()).throw(OSError("no topology"))  # noqa: E731 - as on the lent VMs
    monkeypatch.setattr(affinity.Path, "read_text", hidden)
    assert affinity.side_cpus(list(range(32))) == list(range(16, 32))  # adjacent pairs: cores 8-15
    assert affinity.side_cpus(list(range(7))) == [4, 5, 6]  # cores (0,1) (2,3) | (4,5) (6)
    assert affinity.side_cpus(list(range(1, 9))) == [5, 6, 7, 8]  # an offset set: its own pairs
    assert affinity.side_cpus([0, 1]) == [0, 1]  # one core: nothing to split
    # Where sysfs shows the siblings (CPU i and i+8 one core's), the last half of the cores, both threads.
    core_of = lambda path: int(path.parts[-3][len("cpu"):]) % 8  # noqa: E731
    monkeypatch.setattr(affinity.Path, "read_text", lambda path: f"{core_of(path)},{core_of(path) + 8}")
    assert affinity.side_cpus(list(range(16))) == [4, 5, 6, 7, 12, 13, 14, 15]
    monkeypatch.undo()
    monkeypatch.setattr(affinity, "cores", lambda cpus: [cpus[i:i + 2] for i in range(0, len(cpus), 2)])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(32)), raising=False)
    assert SideCompiles(slots=1, pinned=False).cpus is None
    side = SideCompiles(slots=1)
    pinned = []
    try:
        (item,) = side._prepare(cases_at(2)[0])
        assert item.env[precompile.CPUS_ENV] == "16-31"
        monkeypatch.setattr(os, "nice", lambda n: None)
        monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.append(sorted(cpus)), raising=False)
        monkeypatch.setattr(precompile, "compile_case", lambda spec, rank: {"graphs": 0})
        monkeypatch.setenv(precompile.CPUS_ENV, item.env[precompile.CPUS_ENV])
        precompile.main([item.spec_path, "0"])
    finally:
        side.close()
    assert pinned == [list(range(16, 32))]
    assert side.summary()["cpus"] == "16-31"


def test_the_answer_says_what_ran_beside_the_survey():
    from bench.report.answer_text import search_lines

    path = "tests/fixtures/timings/h200x2-search-5min-side.json"
    said = [line for line in search_lines(path) if line.startswith("Side compiles:")]
    assert said == ["Side compiles: 18 of 18 finished beside the survey (645 s of their processes' wall time); "
                    "the survey's rows were measured beside them."]


def test_the_side_backend_compiles_with_the_modes_settings_and_stops_a_real_call():
    """The backend is inductor's own wrapper with the mode's settings (they are in the cache key:
    reduce-overhead's CUDA graphs among them), and a compiled graph called on real tensors stops.
    (DDP's graph splitting calls each piece on fake tensors, which go through: the slow test above.)"""
    import torch

    assert precompile.compile_only("reduce-overhead").config["triton.cudagraphs"] is True
    assert "triton.cudagraphs" not in precompile.compile_only(None).config
    compiled = torch.compile(torch.nn.Linear(3, 2), backend=precompile.compile_only(None))
    with pytest.raises(precompile.Compiled):
        compiled(torch.ones(4, 3))


def test_side_compiles_are_a_gpu_searchs_and_are_refused_elsewhere_in_one_line():
    for flags, said in ((["--no-search"], "--side-compile compiles a search's levers beside its survey: drop it, "
                                          "or add --search"),
                        (["--search"], "--side-compile compiles beside GPU measurements; on the CPU it would take "
                                       "the cores being measured: drop it")):
        done = run_cli("run", "--gpus", "", *flags, "--side-compile", "--strategies", "single", "--batch-sizes", "2")
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
