"""One worker's run through the cases left (bench/run/sweep.py starts one after another until every
case has its row): write its launch spec and start it, follow its events within the time limits,
and after it ends give each case it left without a row the reason why."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time

from bench.cases import results
from bench.cases.case import Case
from bench.core import imports, protocol
from bench.engine.launchers import Launcher
from bench.run import hostmemory
from bench.run.procs import Worker
from bench.run.workers import inductor_cache_dir, worker_spec, write_spec


class NodeGone(Exception):
    """A node of a multi-node sweep stopped answering: the sweep cannot go on."""


@dataclasses.dataclass
class Attempt:
    """One worker: what was started, and how it ended."""

    sweep: object  # bench.run.sweep.Sweep: the rows, the settings, the reporter
    pending: list  # the cases left, in order; each leaves it as it gets its row
    launcher: Launcher
    env: dict
    workdir: str
    before: int = 0  # cases left when it started
    by_key: dict = dataclasses.field(default_factory=dict)
    reader: object = None
    worker: Worker | None = None
    rendezvous: list | None = None
    launch_id: object = None
    inflight: Case | None = None
    timed_out: bool = False
    worker_error: dict | None = None
    oom_kills: dict = dataclasses.field(default_factory=dict)  # the kernel's OOM-kill counts at the start
    gone: list = dataclasses.field(default_factory=list)  # followers found silent while it ran (multi-node)

    def __post_init__(self):
        self.before = len(self.pending)

    def launch(self) -> bool:
        """Write the worker's spec and start it; False when no case is left to run."""
        self.sweep.reporter.preparing(f"{self.launcher.name} worker, {self.pending[0].where()}: "
                                      f"{len(self.pending)} case(s)")
        spec, failed = worker_spec(self.pending, self.workdir)
        for case, exc in failed:
            self.sweep.record(case, status="error", reason=f"preparing the worker failed: {type(exc).__name__}: {exc}")
            self.pending.remove(case)
        if not self.pending:
            return False
        self.by_key = {json.dumps(list(c.spec().key)): c for c in self.pending}
        race = self.sweep.race_rule(self.pending)
        case_specs = []
        for case_spec in spec.cases:
            case = self.by_key[json.dumps(list(case_spec.key))]
            if race is not None:
                case_spec = dataclasses.replace(case_spec, group=json.dumps(list(map(str, case.group_key()))),
                                                race=self.sweep.race_of(case))
            if self.sweep.settings.anatomy_steps:
                case_spec = dataclasses.replace(case_spec, anatomy=self.sweep.anatomy_request(case))
            case_specs.append(case_spec)
        spec = dataclasses.replace(spec, cases=tuple(case_specs), race=race)
        spec_path = os.path.join(self.workdir, "spec.json")
        write_spec(spec, spec_path)
        self.env[protocol.ENV] = os.path.join(self.workdir, "events.jsonl")
        # What the worker's processes leave in the temp folder (torchrun's torchelastic_* run
        # folders) goes with the worker's own folder; the compile caches stay where they were.
        self.env.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir())
        self.env["TMPDIR"] = self.workdir
        self.reader = protocol.EventReader(self.env[protocol.ENV])
        if self.sweep.leader is not None and self.pending[0].nnodes > 1:
            self.launch_id = self.sweep.leader.begin(spec, self.pending[0].options_dict)
            self.rendezvous = self.sweep.leader.store.nodes.rendezvous(self.launch_id)
        self.oom_kills = hostmemory.oom_kills()
        self.worker = Worker(self.launcher.command(spec_path, self.pending[0].placement, self.pending[0].options_dict,
                                                 self.rendezvous), self.env, str(imports.ROOT))
        return True

    def follow(self) -> None:
        """Record the worker's results as they come, until it exits, every case is done or a
        time limit passes (the start-up limit first, then the case limit from each event)."""
        s = self.sweep.settings
        spawned = deadline = next_beat_check = time.monotonic()
        deadline += s.startup_timeout_s
        first_case, worker_start_s = None, None  # spawn to the first case's start, in that case's row
        while True:
            if self.rendezvous is not None and time.monotonic() >= next_beat_check:
                # A follower that is gone never joins nor answers: stop now, not at a time limit.
                next_beat_check = time.monotonic() + 1.0
                self.gone = self.sweep.leader.silent()
                if self.gone:
                    return
            exited = not self.worker.alive()
            for event in self.reader.poll():
                case = self.by_key.get(json.dumps(event.get("key")))
                if event["event"] == "worker_error":
                    self.worker_error = self.worker_error or event
                elif event["event"] == "start" and case in self.pending:
                    if first_case is None:
                        first_case, worker_start_s = case, round(time.monotonic() - spawned, 3)
                    self.inflight = case
                    deadline = time.monotonic() + s.case_timeout_s
                    self.sweep.reporter.case_started(case.label())
                elif event["event"] == "result" and case in self.pending:
                    self.result(case, event, worker_start_s if case == first_case else None)
                    self.pending.remove(case)
                    self.inflight = None if self.inflight == case else self.inflight
                    if event["status"] == "oom":
                        self.sweep.skip_larger(self.pending, case)
                    deadline = time.monotonic() + s.case_timeout_s
            if exited or not self.pending:
                return
            if time.monotonic() >= deadline:
                self.timed_out = True
                return
            time.sleep(0.1)

    def result(self, case: Case, event: dict, worker_start_s: float | None) -> None:
        figures = {k: v for k, v in event.items() if k in results.COLUMNS and k not in Case.__dataclass_fields__}
        if worker_start_s is not None:
            figures["worker_start_s"] = worker_start_s
        if event["status"] != "ok":
            figures["output_tail"] = event.get("traceback", "")
            if self.rendezvous is not None and (elsewhere := self.sweep.leader.follower_reasons(self.launch_id)):
                figures["reason"] = f"{figures.get('reason', '')}; {elsewhere}"
        self.sweep.record(case, **figures)

    def settle(self) -> None:
        """After a worker ended: the cases it left without a row get the reason why."""
        s, worker, inflight = self.sweep.settings, self.worker, self.inflight
        tail = worker.output_tail()
        cause = ""
        broke = self.timed_out or inflight is not None or (self.pending and len(self.pending) == self.before)
        gone = self.gone or (self.sweep.leader.gone() if self.rendezvous is not None and broke else [])
        if gone:
            cause = f"; node(s) {', '.join(map(str, gone))} stopped answering"
        if self.rendezvous is not None and (elsewhere := self.sweep.leader.follower_reasons(self.launch_id)):
            cause += f"; {elsewhere}"
        if self.worker_error:
            cause = f"; {self.worker_error['reason']}{cause}"
            tail = self.worker_error.get("traceback", "") + "\n--- worker output ---\n" + tail
        if self.timed_out:
            victims = [inflight] if inflight is not None else list(self.pending)
            what = f"no result within {s.case_timeout_s:g} s" if inflight is not None else \
                f"worker did not start a case within {s.startup_timeout_s:g} s"
            for case in victims:
                self.sweep.record(case, status="timeout", reason=f"{what}; worker killed{cause}", output_tail=tail)
                self.pending.remove(case)
        elif inflight is not None and self.gone:
            self.sweep.record(inflight, status="error", output_tail=tail, reason=f"worker killed{cause}")
            self.pending.remove(inflight)
        elif inflight is not None:
            # The kernel's OOM killer sends SIGKILL (torchrun then exits 1): its count says it was memory.
            killed = hostmemory.oom_kills_since(self.oom_kills)
            if killed:
                self.sweep.record(inflight, status="oom", output_tail=tail,
                                  reason=f"host out of memory: the kernel's out-of-memory killer ended the worker "
                                         f"({worker.exit_description()}; OOM kills in {killed}){cause}")
                self.pending.remove(inflight)
                self.sweep.skip_larger(self.pending, inflight)
            else:
                self.sweep.record(inflight, status="error", output_tail=tail,
                                  reason=f"worker died during the case ({worker.exit_description()}){cause}")
                self.pending.remove(inflight)
        if self.pending and gone:
            raise NodeGone(f"node(s) {', '.join(map(str, gone))} stopped answering; {len(self.pending)} case(s) of "
                           f"this worker and the ones after it did not run")
        if self.pending and len(self.pending) == self.before:
            # The worker ended without finishing a case (import error, bad launcher...):
            # record it rather than start the same failure again.
            for case in list(self.pending):
                self.sweep.record(case, status="error", output_tail=tail,
                                  reason=f"worker ended before measuring ({worker.exit_description()}){cause}")
            self.pending.clear()

    def close(self) -> None:
        """The worker and every process it started, whatever happened."""
        if self.worker is not None:
            # Every case has its result, or a failure is handled by settle: the worker's own
            # teardown (process groups, CUDA contexts) is not waited for.
            self.worker.kill()
        if self.rendezvous is not None:
            self.sweep.leader.end(self.launch_id)  # the followers end their part of the worker
        shutil.rmtree(self.workdir, ignore_errors=True)
