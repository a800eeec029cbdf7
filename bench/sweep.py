"""The sweep: expand the case grid, run each group in fresh workers, record every case.

A group is one (strategy, precision, model, GPU set); its worker sweeps the batch
sizes in ascending order. The parent enforces time limits, turns crashes, hangs and
out-of-memory into that case's status, restarts a worker for the cases left, and
writes the results file after every case.
"""
from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from dataclasses import dataclass, field

import strategies
from bench import envinfo, results
from bench.precision import get_precision
from bench.procs import Worker
from strategies.base import Placement, Strategy


@dataclass
class Settings:
    warmup: int = 2
    steps: int = 5
    trials: int = 2
    seed: int = 0
    data: str = "device"  # "device": resident batch; "host": copied from pinned memory every step
    channels_last: bool = False
    compile: bool = False
    cudnn_benchmark: str = "auto"  # auto: on, except for strategies whose replicas run in threads
    tf32: str = "default"  # default | on | off (PyTorch's default: TF32 convolutions, fp32 matmuls)
    sgd_impl: str = "auto"  # auto (PyTorch's choice: foreach on GPUs) | for-loop | foreach | fused
    options: dict = field(default_factory=dict)  # option name -> value, for strategies that declare it
    case_timeout_s: float = 600.0
    startup_timeout_s: float = 300.0


@dataclass
class Group:
    strategy: Strategy
    precision: str
    model: str
    placement: Placement
    batch_sizes: list[int]
    settings: Settings

    @property
    def options(self) -> dict:
        return {**self.strategy.options, **{k: v for k, v in self.settings.options.items() if k in self.strategy.options}}

    @property
    def cudnn_benchmark(self) -> bool:
        if self.settings.cudnn_benchmark == "auto":
            return self.strategy.default_cudnn_benchmark()
        return self.settings.cudnn_benchmark == "on"

    @property
    def sgd_impl(self) -> str:
        return self.strategy.sgd_impl(self.settings.sgd_impl, bool(self.placement.gpus))

    def label(self) -> str:
        return f"{self.strategy.name} {self.precision} {self.model} {self.placement.label()}"

    def row(self, batch: int, **figures) -> dict:
        s = self.settings
        row = {
            "strategy": self.strategy.name, "precision": self.precision, "model": self.model,
            "device": self.placement.device_type, "gpus": ",".join(map(str, self.placement.gpus)),
            "n_gpus": len(self.placement.gpus), "n_replicas": self.placement.n_replicas, "batch_per_gpu": batch,
            "global_batch": batch * self.placement.n_replicas,
            "data": s.data, "channels_last": s.channels_last, "compile": s.compile,
            "cudnn_benchmark": self.cudnn_benchmark if self.placement.gpus else None, "tf32": s.tf32,
            "sgd_impl": self.sgd_impl,
            "options": json.dumps(self.options, sort_keys=True), "warmup": s.warmup, "steps": s.steps,
            "trials": s.trials, "seed": s.seed,
        }
        row.update(envinfo.collect())
        row.update(envinfo.for_gpus(self.placement.gpus))
        row.update(figures)
        return row

    def spec(self, batch_sizes: list[int]) -> dict:
        s = self.settings
        return {
            "strategy": self.strategy.name, "precision": self.precision, "model": self.model,
            "gpus": list(self.placement.gpus), "n_replicas": self.placement.n_replicas,
            "batch_sizes": batch_sizes, "warmup": s.warmup, "steps": s.steps, "trials": s.trials, "seed": s.seed,
            "data": s.data, "channels_last": s.channels_last, "compile": s.compile,
            "cudnn_benchmark": self.cudnn_benchmark, "tf32": s.tf32, "sgd_impl": self.sgd_impl,
            "options": self.options,
        }

    def unavailable_reason(self, cuda_available: bool) -> str | None:
        reason = self.strategy.unavailable_reason(self.placement, get_precision(self.precision), cuda_available)
        if reason is None and self.settings.compile and not self.strategy.supports_compile:
            reason = "torch.compile is not wired into this strategy"
        return reason


def placements(strategy: Strategy, gpus: list[int], gpu_counts: list[int], cpu_replicas: int) -> list[Placement]:
    """The GPU sets a strategy runs on: `single` on the first GPU, the others on each count."""
    if not gpus:
        n = 1 if strategy.max_replicas == 1 else cpu_replicas
        return [Placement((), n)]
    if strategy.max_replicas == 1:
        return [Placement((gpus[0],), 1)]
    return [Placement(tuple(gpus[:k]), k) for k in gpu_counts]


def build_groups(strategy_names, precisions, models, gpus, gpu_counts, cpu_replicas, batch_sizes, settings):
    groups = []
    for model in models:
        for precision in precisions:
            for name in strategy_names:
                strategy = strategies.get(name)
                for placement in placements(strategy, gpus, gpu_counts, cpu_replicas):
                    groups.append(Group(strategy, precision, model, placement, sorted(set(batch_sizes)), settings))
    return groups


class Terminated(Exception):
    """SIGTERM arrived: the sweep stops as on Ctrl-C."""


def _raise_terminated(signum, frame):
    raise Terminated(signal.Signals(signum).name)


class Sweep:
    def __init__(self, groups: list[Group], out: str, resume: bool, reporter, existing: list[dict] | None = None):
        self.groups = groups
        self.out = out
        self.reporter = reporter  # object with begin(total), case_started(label), case_done(row)
        self.rows: dict[tuple, dict] = {}
        self.done: set[tuple] = set()
        for row in existing or []:
            key = results.case_key(row)
            self.rows[key] = row
            if resume and row["status"] in ("ok", "oom"):
                self.done.add(key)

    def _record(self, row: dict) -> None:
        key = results.case_key(row)
        self.rows.pop(key, None)
        self.rows[key] = row
        results.write(self.out, list(self.rows.values()))
        self.reporter.case_done(row)

    def _todo(self, group: Group) -> list[int]:
        return [b for b in group.batch_sizes if results.case_key(group.row(b)) not in self.done]

    def run(self, cuda_available: bool) -> list[dict]:
        work = [(g, self._todo(g)) for g in self.groups]
        self.reporter.begin(sum(len(todo) for _, todo in work))
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            for group, todo in work:
                if not todo:
                    continue
                reason = group.unavailable_reason(cuda_available)
                if reason:
                    for batch in todo:
                        self._record(group.row(batch, status="skipped", reason=reason))
                else:
                    self._run_group(group, todo)
        finally:
            signal.signal(signal.SIGTERM, previous)
        return list(self.rows.values())

    def _run_group(self, group: Group, pending: list[int]) -> None:
        s = group.settings
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(envinfo.REPO), env.get("PYTHONPATH")]))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off unless asked for
        pending = list(pending)
        while pending:
            before = len(pending)
            spec = group.spec(pending)
            fd, spec_path = tempfile.mkstemp(suffix=".json", prefix="parabench-spec-")
            try:
                group.strategy.prepare_launch(spec, spec_path)
            except Exception as exc:  # noqa: BLE001 - a failed preparation is these cases' outcome
                os.close(fd)
                group.strategy.cleanup_launch(spec, spec_path)
                os.unlink(spec_path)
                for batch in pending:
                    self._record(group.row(batch, status="error", reason=f"preparing the worker failed: "
                                                                           f"{type(exc).__name__}: {exc}"))
                return
            with os.fdopen(fd, "w") as fh:
                json.dump(spec, fh)
            worker = Worker(group.strategy.launch_command(spec_path, group.placement, group.options), env,
                            str(envinfo.REPO))
            inflight, oom_at, timed_out, ended = None, None, False, False
            deadline = time.monotonic() + s.startup_timeout_s
            try:
                while True:
                    try:
                        event = worker.next_event(min(1.0, deadline - time.monotonic()))
                    except EOFError:
                        ended = True
                        break
                    if event is None:
                        if time.monotonic() >= deadline:
                            timed_out = True
                            break
                        continue
                    batch = event.get("batch_per_gpu")
                    if event["event"] == "start":
                        inflight = batch
                        deadline = time.monotonic() + s.case_timeout_s
                        self.reporter.case_started(f"{group.label()} batch {batch}")
                    elif event["event"] == "result" and batch in pending:
                        figures = {k: v for k, v in event.items() if k in results.COLUMNS}
                        if event["status"] == "error":
                            figures["output_tail"] = event.get("traceback", "")
                        self._record(group.row(batch, **figures))
                        pending.remove(batch)
                        inflight = None if inflight == batch else inflight
                        if event["status"] == "oom":
                            oom_at = batch
                        deadline = time.monotonic() + s.case_timeout_s
            finally:
                # The worker and every process it started, whatever happened.
                worker.kill(grace_s=10.0 if ended else 0.0)
                group.strategy.cleanup_launch(spec, spec_path)
                os.unlink(spec_path)

            tail = worker.output_tail()
            if timed_out:
                victims = [inflight] if inflight is not None else list(pending)
                what = f"no result within {s.case_timeout_s:g} s" if inflight is not None else \
                    f"worker did not start a case within {s.startup_timeout_s:g} s"
                for batch in victims:
                    self._record(group.row(batch, status="timeout", reason=f"{what}; worker killed", output_tail=tail))
                    pending.remove(batch)
            elif inflight is not None:
                self._record(group.row(inflight, status="error", output_tail=tail,
                                       reason=f"worker died during the case ({worker.exit_description()})"))
                pending.remove(inflight)
            if oom_at is not None:
                for batch in [b for b in pending if b > oom_at]:
                    self._record(group.row(batch, status="skipped",
                                           reason=f"not attempted: batch {oom_at} per GPU already ran out of memory"))
                    pending.remove(batch)
            if len(pending) == before:
                # The worker ended without finishing a case (import error, bad launcher...):
                # record it rather than start the same failure again.
                for batch in list(pending):
                    self._record(group.row(batch, status="error", output_tail=tail,
                                           reason=f"worker ended before measuring ({worker.exit_description()})"))
                pending.clear()
