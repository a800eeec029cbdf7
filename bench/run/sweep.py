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

import json
import os
import signal
import tempfile

import strategies
from bench.measure import anatomy, envinfo
from bench.core.launch_spec import RaceRule
from bench.core.step import FIRST_LOOK, AnatomyRequest
from bench.cases import caveats, ranking, results
from bench.cases.case import Case, Settings, identity
from bench.engine.launchers import worker_environment
from bench.run.attempt import Attempt
from bench.run.procs import Scratch
from bench.run.signals import signals_held, stop_on_signals, stopping_on_signal
from bench.run.workers import launcher_of, unavailable_reason, worker_env, worker_key
from bench import workloads
from bench.workloads.resolve import source_of

class WriteFailed(Exception):
    """The results file could not be written (disk full, folder gone): the message says
    where the measured rows were saved instead."""


class Sweep:
    def __init__(self, cases: list[Case], settings: Settings, out: str, reporter, existing: list[dict] | None = None,
                 leader=None):
        self.cases = cases
        self.leader = leader  # bench.run.node_launches.Leader of a multi-node sweep (node 0), else None
        self.settings = settings
        self.out = out
        self.reporter = reporter  # object with begin(total), preparing(label), case_started(label), case_done(row)
        self.rows: dict[tuple, dict] = {}
        self.scratch: Scratch | None = None  # the workers' folder, made with the first worker
        # Written beside the rows in the results file after every case (a search's plan and log).
        self.document: dict = {}
        # A search's survey races its cases: each runs a first trial of `race_steps` steps and
        # stops there where it lies below its group's leader (its row's `screened` says so); the
        # identities in `race_full` run every trial, those in `race_short` the short trial alone.
        # None: every case runs every trial.
        self.race_steps: int | None = None
        self.race_full: set = set()
        self.race_short: set = set()
        self.recorded: list[dict] = []  # every row this sweep recorded, those later measured again too
        self.load_at_start = envinfo.load_average()
        for row in results.latest(existing or []):
            self.rows[identity(row)] = row

    def row_of(self, case: Case, **figures) -> dict:
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
        """Already in the file as ok or oom (resume does not measure it again); a survey's first
        look (its short trial alone, the budget spent) is not: a resumed run measures it in full."""
        row = self.rows.get(identity(self.row_of(case)))
        return row is not None and row["status"] in ("ok", "oom") and FIRST_LOOK not in str(row.get("screened") or "")

    def record_skipped(self, case: Case, reason: str) -> None:
        """The case's row says it was not measured, and why (a search's budget, say)."""
        self.reporter.begin(1)
        self.record(case, status="skipped", reason=reason)

    def race_rule(self, cases: list[Case]) -> RaceRule | None:
        """For a racing worker: the short trial's steps, and the leader this run measured in each of
        the cases' groups so far, by items/s with its interval (the worker adds what it measures)."""
        if self.race_steps is None:
            return None
        leaders: dict[str, dict] = {}
        for case in cases:
            group = case.group_key()
            for row in self.rows.values():
                other = Case.from_row(dict(row))
                if row.get("status") == "ok" and other.group_key() == group and \
                        (other.execution, other.compile_mode) == (case.execution, case.compile_mode):
                    name = json.dumps(list(map(str, group)))
                    if float(row["items_per_s"]) > leaders.get(name, {}).get("items_per_s", 0.0):
                        lo, hi = ranking.interval(row)
                        leaders[name] = {"items_per_s": float(row["items_per_s"]), "lo": lo, "hi": hi}
        return RaceRule(short_steps=self.race_steps, leaders=leaders)

    def race_of(self, case: Case) -> str:
        """How the case's trials run (bench/core/step.py RACES)."""
        key = identity(self.row_of(case))
        return "full" if key in self.race_full else "short" if key in self.race_short else "race"

    def record(self, case: Case, **figures) -> None:
        if figures.get("output_tail"):
            figures["output_tail"] = envinfo.portable_output(figures["output_tail"])
        row = self.row_of(case, **figures)
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
                    self.record(case, status="skipped", reason=reason)
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
                        if self.rows.get(identity(self.row_of(case)), {}).get("status") == "oom":
                            self.skip_larger(remaining, case)
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

    def anatomy_request(self, case: Case) -> AnatomyRequest:
        """Where the case's traces go: <results folder>/traces/<results name>/<case>/, recorded
        in the row relative to the results folder (no machine's path in a result)."""
        out = results.json_path(self.out)
        record = os.path.join("traces", out.stem, anatomy.case_folder(case.label(), case.variant()))
        return AnatomyRequest(steps=self.settings.anatomy_steps, folder=str(out.parent.resolve() / record),
                              record=record)

    def skip_larger(self, pending: list[Case], oom: Case) -> None:
        for case in [c for c in pending if c.series_key() == oom.series_key() and c.batch_per_gpu > oom.batch_per_gpu]:
            self.record(case, status="skipped",
                         reason=f"not attempted: batch {oom.batch_per_gpu} per GPU already ran out of memory")
            pending.remove(case)

    def _run_worker(self, cases: list[Case]) -> None:
        """Run `cases` in workers of their launcher (bench/run/attempt.py), a fresh worker after
        any failure, until every case has its row."""
        pending = list(cases)
        launcher = launcher_of(cases[0])
        env = worker_environment(launcher, cases[0].placement, worker_env())
        while pending:
            if self.scratch is None:
                self.scratch = Scratch()
            attempt = Attempt(self, pending, launcher, dict(env), self.scratch.folder("worker-"))
            try:
                if not attempt.launch():
                    return
                attempt.follow()
            finally:
                with signals_held(stopping=stopping_on_signal()):  # a second Ctrl-C waits until it is done
                    attempt.close()
            attempt.settle()
