"""The sweep: run every case of the grid in long-lived workers and record each outcome.

Cases whose strategy names the same launcher on the same devices (with the same launcher
options) share one worker: one local process per GPU set, one torchrun per GPU count for
all DDP-style strategies, one MXNet interpreter. Inside a worker the cases of one series
(one line of a figure) run in ascending batch order; `--worker-scope series` or `case`
gives each series or each case a fresh worker instead. The parent enforces time limits,
turns crashes, hangs and out-of-memory into that case's status, starts a fresh worker
for the cases left after any failure, and writes the results file after every case.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import tempfile
import time

import strategies
from bench.core import imports
from bench.measure import anatomy, envinfo
from bench.core import protocol
from bench.core.launch_spec import LaunchSpec, ScreenRule
from bench.core.step import AnatomyRequest
from bench.cases import caveats, results
from bench.cases.case import Case, Settings, execution_unavailable_reason, identity
from bench.engine.launchers import Launcher, worker_environment
from bench.core.precision import get_precision
from bench.run import hostmemory
from bench.run.procs import Scratch, Worker
from bench.run.signals import (TERMINATING, Terminated, ignore_further_signals, signals_held,  # noqa: F401
                               stop_on_signals, stopping_on_signal)
from bench import workloads
from bench.workloads.resolve import source_of

class NodeGone(Exception):
    """A node of a multi-node sweep stopped answering: the sweep cannot go on."""


class WriteFailed(Exception):
    """The results file could not be written (disk full, folder gone): the message says
    where the measured rows were saved instead."""


def inductor_cache_dir() -> str:
    """torch.compile's default cache folder, as inductor names it from the temp folder and the user."""
    import getpass
    import re

    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = f"uid_{os.getuid()}"
    return os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))


def worker_env(node_rank: int = 0) -> dict:
    """The environment every worker starts with."""
    env = dict(os.environ)
    env["PYTHONPATH"] = imports.pythonpath(env)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off unless asked for
    env[protocol.NODE_RANK_ENV] = str(node_rank)
    return env


def unavailable_reason(case: Case) -> str | None:
    strategy = strategies.get(case.strategy)
    return (strategy.unavailable_reason(case.placement, get_precision(case.precision), case.execution,
                                        case.options_dict)
            or strategy.workload_unavailable_reason(case.model) or strategy.knobs_unavailable_reason(dict(case.knobs))
            or execution_unavailable_reason(case))


def worker_key(case: Case) -> tuple:
    return launcher_of(case).key(case.placement, case.options_dict, case.execution)


def launcher_of(case) -> Launcher:
    """The launcher that the case's strategy names."""
    return strategies.get(case.strategy).launcher(case.options_dict)


def worker_spec(cases: list, workdir: str) -> tuple[LaunchSpec, list]:
    """The spec of one worker: its launcher and device set (the first case's), and each
    case's own spec as its strategy prepared it (files under `workdir`). Returns the spec and
    the (case, exception) pairs whose preparation failed, which the spec leaves out."""
    first = cases[0]
    launcher = launcher_of(first)
    prepared, failed = [], []
    for case in cases:
        case_spec = case.spec()
        try:
            extra = strategies.get(case.strategy).prepare_launch(case_spec, workdir) or {}
        except Exception as exc:  # noqa: BLE001 - the caller records it as the case's outcome
            failed.append((case, exc))
            continue
        prepared.append(dataclasses.replace(case_spec, extra=extra))
    spec = LaunchSpec(launcher=launcher.name, gpus=tuple(first.gpus), n_replicas=first.n_replicas, nnodes=first.nnodes,
                      launcher_options={k: first.options_dict.get(k) for k in launcher.options}, cases=tuple(prepared))
    return spec, failed


def write_spec(spec: LaunchSpec, path: str) -> None:
    with open(path, "w") as fh:
        json.dump(spec.to_json(), fh)


@dataclasses.dataclass
class _Attempt:
    """One worker's run through the cases left: what was started, and how it ended."""

    before: int  # cases left when it started
    workdir: str
    by_key: dict = dataclasses.field(default_factory=dict)
    reader: object = None
    worker: Worker | None = None
    rendezvous: list | None = None
    launch: object = None
    inflight: Case | None = None
    timed_out: bool = False
    worker_error: dict | None = None
    oom_kills: dict = dataclasses.field(default_factory=dict)  # the kernel's OOM-kill counts at the start
    gone: list = dataclasses.field(default_factory=list)  # followers found silent while it ran (multi-node)


class Sweep:
    def __init__(self, cases: list[Case], settings: Settings, out: str, reporter, existing: list[dict] | None = None,
                 leader=None):
        self.cases = cases
        self.leader = leader  # bench.run.nodes.Leader of a multi-node sweep (node 0), else None
        self.settings = settings
        self.out = out
        self.reporter = reporter  # object with begin(total), preparing(label), case_started(label), case_done(row)
        self.rows: dict[tuple, dict] = {}
        self.scratch: Scratch | None = None  # the workers' folder, made with the first worker
        # Written beside the rows in the results file after every case (a search's plan and log).
        self.document: dict = {}
        # A search's survey sets this share: a case whose first trial runs below it of the best
        # measured at its group is measured once (its row's `screened` says so); None: never.
        self.screen: float | None = None
        self.screen_exempt: set = set()  # identities measured in full whatever the screen says
        self.recorded: list[dict] = []  # every row this sweep recorded, those later measured again too
        self.load_at_start = envinfo.load_average()
        for row in results.latest(existing or []):
            self.rows[identity(row)] = row

    def _row(self, case: Case, **figures) -> dict:
        row = case.row()
        row.update(envinfo.collect())
        row.update(envinfo.for_gpus(case.gpus))
        # The variables the worker ran with: this process's, and the launcher's where unset.
        variables = worker_environment(launcher_of(case), case.placement, json.loads(row["environment"]))
        row["environment"] = json.dumps(variables, sort_keys=True)
        row["worker_scope"] = self.settings.worker_scope
        row["workload_source"] = source_of(case.model)  # torch-free; the worker adds parameters
        data = workloads.data_of(case.model)  # what throughput counts, on every row (a skipped one too)
        if data is not None:
            row.update(unit=data.unit.name, items_per_sample=data.items_per_sample)
        row["notes"] = strategies.get(case.strategy).notes(case)
        # host_cpus: the CPUs the load average is over (all of the host's, not this process's share).
        row.update(load_avg_start=self.load_at_start, load_avg_end=envinfo.load_average(),
                   host_cpus=os.cpu_count() or 1)
        row.update(figures)
        return row

    def measured(self, case: Case) -> bool:
        """Already in the file as ok or oom (resume does not measure it again)."""
        row = self.rows.get(identity(self._row(case)))
        return row is not None and row["status"] in ("ok", "oom")

    def record_skipped(self, case: Case, reason: str) -> None:
        """The case's row says it was not measured, and why (a search's budget, say)."""
        self.reporter.begin(1)
        self._record(case, status="skipped", reason=reason)

    def _screen_rule(self, cases: list[Case]) -> ScreenRule | None:
        """For a screening worker: the share, and the best items/s this run measured in each of
        the cases' groups so far (the worker also screens against what it measures itself)."""
        if self.screen is None:
            return None
        best: dict[str, float] = {}
        for case in cases:
            group = case.group_key()
            for row in self.rows.values():
                other = Case.from_row(dict(row))
                if row.get("status") == "ok" and other.group_key() == group and \
                        (other.execution, other.compile_mode) == (case.execution, case.compile_mode):
                    name = json.dumps(list(map(str, group)))
                    best[name] = max(best.get(name, 0.0), float(row["items_per_s"]))
        return ScreenRule(share=self.screen, best=best)

    def _record(self, case: Case, **figures) -> None:
        if figures.get("output_tail"):
            figures["output_tail"] = envinfo.portable_output(figures["output_tail"])
        row = self._row(case, **figures)
        row["caveat"] = caveats.caveat(row)
        key = identity(row)
        self.rows.pop(key, None)
        self.rows[key] = row
        self.recorded.append(row)
        self.save()
        self.reporter.case_done(row)

    def save(self) -> None:
        """Write every row and the document's sections; WriteFailed says where they went instead."""
        try:
            results.write(self.out, list(self.rows.values()), self.document)
        except OSError as exc:
            fallback = os.path.join(tempfile.gettempdir(), f"parabench-rescued-{os.getpid()}.json")
            try:
                results.write(fallback, list(self.rows.values()), self.document)
                saved = f"the {len(self.rows)} rows measured so far were saved to {fallback}"
            except OSError:
                saved = "the rows could not be saved anywhere else either"
            raise WriteFailed(f"cannot write {results.json_path(self.out)} ({exc.strerror or exc}); {saved}; "
                              f"free space or fix the folder, then resume with --resume --out {fallback}") from None

    def run(self, cases: list[Case] | None = None, again: bool = False) -> list[dict]:
        """Measure `cases` (default: the sweep's own), skipping those the file already has unless
        `again` (a search measures its finalists once more); every row of the file is returned."""
        todo = [c for c in (self.cases if cases is None else cases) if again or not self.measured(c)]
        self.reporter.begin(len(todo))
        previous = stop_on_signals()
        try:
            runnable = []
            for case in todo:
                reason = unavailable_reason(case)
                if reason:
                    self._record(case, status="skipped", reason=reason)
                else:
                    runnable.append(case)
            by_worker: dict[tuple, list[Case]] = {}
            for case in runnable:
                by_worker.setdefault(worker_key(case), []).append(case)
            for cases in by_worker.values():
                # One series after another, each in ascending batch order (the OOM ladder).
                series = {}
                for case in cases:
                    series.setdefault(case.series_key(), []).append(case)
                remaining = [c for s in series.values() for c in sorted(s, key=lambda c: c.batch_per_gpu)]
                while remaining:
                    chunk = self._next_worker_cases(remaining)
                    remaining = remaining[len(chunk):]
                    self._run_worker(chunk)
                    # A worker skips its own larger batches after an out-of-memory; these
                    # come in later workers when fewer cases share one.
                    for case in chunk:
                        if self.rows.get(identity(self._row(case)), {}).get("status") == "oom":
                            self._skip_larger(remaining, case)
        finally:
            with signals_held(stopping=stopping_on_signal()):
                if self.scratch is not None:
                    self.scratch.close()
                    self.scratch = None
            if not stopping_on_signal():
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        return list(self.rows.values())

    def _next_worker_cases(self, ordered: list[Case]) -> list[Case]:
        """The leading cases of `ordered` that one worker runs, by --worker-scope; one compiled
        case at most where its launcher says compiled cases do not share a worker."""
        scope = self.settings.worker_scope
        if scope == "case":
            return ordered[:1]
        chunk = ([c for c in ordered if c.series_key() == ordered[0].series_key()] if scope == "series"
                 else list(ordered))
        if not launcher_of(ordered[0]).shares_compiled:
            compiled = [i for i, c in enumerate(chunk) if c.execution == "compile"]
            chunk = chunk[:compiled[1]] if len(compiled) > 1 else chunk
        return chunk

    def _anatomy_request(self, case: Case) -> AnatomyRequest:
        """Where the case's traces go: <results folder>/traces/<results name>/<case>/, recorded
        in the row relative to the results folder (no machine's path in a result)."""
        out = results.json_path(self.out)
        record = os.path.join("traces", out.stem, anatomy.case_folder(case.label(), case.variant()))
        return AnatomyRequest(steps=self.settings.anatomy_steps, folder=str(out.parent.resolve() / record),
                              record=record)

    def _skip_larger(self, pending: list[Case], oom: Case) -> None:
        for case in [c for c in pending if c.series_key() == oom.series_key() and c.batch_per_gpu > oom.batch_per_gpu]:
            self._record(case, status="skipped",
                         reason=f"not attempted: batch {oom.batch_per_gpu} per GPU already ran out of memory")
            pending.remove(case)

    def _run_worker(self, cases: list[Case]) -> None:
        """Run `cases` in workers of their launcher, a fresh worker after any failure, until
        every case has its row."""
        pending = list(cases)
        launcher = launcher_of(cases[0])
        env = worker_environment(launcher, cases[0].placement, worker_env())
        while pending:
            if self.scratch is None:
                self.scratch = Scratch()
            attempt = _Attempt(before=len(pending), workdir=self.scratch.folder("worker-"))
            try:
                if not self._launch(attempt, pending, launcher, env):
                    return
                self._follow(attempt, pending)
            finally:
                # The worker and every process it started, whatever happened; a second
                # Ctrl-C waits until this is done.
                with signals_held(stopping=stopping_on_signal()):
                    if attempt.worker is not None:
                        # Every case has its result, or a failure is handled below: the
                        # worker's own teardown (process groups, CUDA contexts) is not waited for.
                        attempt.worker.kill()
                    if attempt.rendezvous is not None:
                        self.leader.end(attempt.launch)  # the followers end their part of the worker
                    shutil.rmtree(attempt.workdir, ignore_errors=True)
            self._settle(attempt, pending)

    def _launch(self, attempt: "_Attempt", pending: list[Case], launcher: Launcher, env: dict) -> bool:
        """Write the worker's spec and start it; False when no case is left to run."""
        self.reporter.preparing(f"{launcher.name} worker, {pending[0].where()}: {len(pending)} case(s)")
        spec, failed = worker_spec(pending, attempt.workdir)
        for case, exc in failed:
            self._record(case, status="error", reason=f"preparing the worker failed: {type(exc).__name__}: {exc}")
            pending.remove(case)
        if not pending:
            return False
        attempt.by_key = {json.dumps(list(c.spec().key)): c for c in pending}
        screen = self._screen_rule(pending)
        case_specs = []
        for case_spec in spec.cases:
            case = attempt.by_key[json.dumps(list(case_spec.key))]
            if screen is not None:
                case_spec = dataclasses.replace(case_spec, group=json.dumps(list(map(str, case.group_key()))),
                                                screenable=identity(self._row(case)) not in self.screen_exempt)
            if self.settings.anatomy_steps:
                case_spec = dataclasses.replace(case_spec, anatomy=self._anatomy_request(case))
            case_specs.append(case_spec)
        spec = dataclasses.replace(spec, cases=tuple(case_specs), screen=screen)
        spec_path = os.path.join(attempt.workdir, "spec.json")
        write_spec(spec, spec_path)
        env[protocol.ENV] = os.path.join(attempt.workdir, "events.jsonl")
        # What the worker's processes leave in the temp folder (torchrun's torchelastic_* run
        # folders) goes with the worker's own folder; the compile caches stay where they were.
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", inductor_cache_dir())
        env["TMPDIR"] = attempt.workdir
        attempt.reader = protocol.EventReader(env[protocol.ENV])
        if self.leader is not None and pending[0].nnodes > 1:
            attempt.launch = self.leader.begin(spec, pending[0].options_dict)
            attempt.rendezvous = self.leader.store.nodes.rendezvous(attempt.launch)
        attempt.oom_kills = hostmemory.oom_kills()
        attempt.worker = Worker(launcher.command(spec_path, pending[0].placement, pending[0].options_dict,
                                                 attempt.rendezvous), env, str(imports.ROOT))
        return True

    def _follow(self, attempt: "_Attempt", pending: list[Case]) -> None:
        """Record the worker's results as they come, until it exits, every case is done or a
        time limit passes (the start-up limit first, then the case limit from each event)."""
        s = self.settings
        spawned = deadline = next_beat_check = time.monotonic()
        deadline += s.startup_timeout_s
        first_case, worker_start_s = None, None  # spawn to the first case's start, in that case's row
        while True:
            if attempt.rendezvous is not None and time.monotonic() >= next_beat_check:
                # A follower that is gone never joins nor answers: stop now, not at a time limit.
                next_beat_check = time.monotonic() + 1.0
                attempt.gone = self.leader.silent()
                if attempt.gone:
                    return
            exited = not attempt.worker.alive()
            for event in attempt.reader.poll():
                case = attempt.by_key.get(json.dumps(event.get("key")))
                if event["event"] == "worker_error":
                    attempt.worker_error = attempt.worker_error or event
                elif event["event"] == "start" and case in pending:
                    if first_case is None:
                        first_case, worker_start_s = case, round(time.monotonic() - spawned, 3)
                    attempt.inflight = case
                    deadline = time.monotonic() + s.case_timeout_s
                    self.reporter.case_started(case.label())
                elif event["event"] == "result" and case in pending:
                    self._result(attempt, case, event, worker_start_s if case == first_case else None)
                    pending.remove(case)
                    attempt.inflight = None if attempt.inflight == case else attempt.inflight
                    if event["status"] == "oom":
                        self._skip_larger(pending, case)
                    deadline = time.monotonic() + s.case_timeout_s
            if exited or not pending:
                return
            if time.monotonic() >= deadline:
                attempt.timed_out = True
                return
            time.sleep(0.1)

    def _result(self, attempt: "_Attempt", case: Case, event: dict, worker_start_s: float | None) -> None:
        figures = {k: v for k, v in event.items() if k in results.COLUMNS and k not in Case.__dataclass_fields__}
        if worker_start_s is not None:
            figures["worker_start_s"] = worker_start_s
        if event["status"] != "ok":
            figures["output_tail"] = event.get("traceback", "")
            if attempt.rendezvous is not None and (elsewhere := self.leader.follower_reasons(attempt.launch)):
                figures["reason"] = f"{figures.get('reason', '')}; {elsewhere}"
        self._record(case, **figures)

    def _settle(self, attempt: "_Attempt", pending: list[Case]) -> None:
        """After a worker ended: the cases it left without a row get the reason why."""
        s, worker, inflight = self.settings, attempt.worker, attempt.inflight
        tail = worker.output_tail()
        cause = ""
        broke = attempt.timed_out or inflight is not None or (pending and len(pending) == attempt.before)
        gone = attempt.gone or (self.leader.gone() if attempt.rendezvous is not None and broke else [])
        if gone:
            cause = f"; node(s) {', '.join(map(str, gone))} stopped answering"
        if attempt.rendezvous is not None and (elsewhere := self.leader.follower_reasons(attempt.launch)):
            cause += f"; {elsewhere}"
        if attempt.worker_error:
            cause = f"; {attempt.worker_error['reason']}{cause}"
            tail = attempt.worker_error.get("traceback", "") + "\n--- worker output ---\n" + tail
        if attempt.timed_out:
            victims = [inflight] if inflight is not None else list(pending)
            what = f"no result within {s.case_timeout_s:g} s" if inflight is not None else \
                f"worker did not start a case within {s.startup_timeout_s:g} s"
            for case in victims:
                self._record(case, status="timeout", reason=f"{what}; worker killed{cause}", output_tail=tail)
                pending.remove(case)
        elif inflight is not None and attempt.gone:
            self._record(inflight, status="error", output_tail=tail, reason=f"worker killed{cause}")
            pending.remove(inflight)
        elif inflight is not None:
            # The kernel's OOM killer sends SIGKILL (torchrun then exits 1): its count says it was memory.
            killed = hostmemory.oom_kills_since(attempt.oom_kills)
            if killed:
                self._record(inflight, status="oom", output_tail=tail,
                             reason=f"host out of memory: the kernel's out-of-memory killer ended the worker "
                                    f"({worker.exit_description()}; OOM kills in {killed}){cause}")
                pending.remove(inflight)
                self._skip_larger(pending, inflight)
            else:
                self._record(inflight, status="error", output_tail=tail,
                             reason=f"worker died during the case ({worker.exit_description()}){cause}")
                pending.remove(inflight)
        if pending and gone:
            raise NodeGone(f"node(s) {', '.join(map(str, gone))} stopped answering; {len(pending)} case(s) of this "
                           f"worker and the ones after it did not run")
        if pending and len(pending) == attempt.before:
            # The worker ended without finishing a case (import error, bad launcher...):
            # record it rather than start the same failure again.
            for case in list(pending):
                self._record(case, status="error", output_tail=tail,
                             reason=f"worker ended before measuring ({worker.exit_description()}){cause}")
            pending.clear()
