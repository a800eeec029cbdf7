"""The search's time (bench/run/search.py): the budget is the whole command's wall time; a case's
cost is estimated from the rows this run already measured, by execution and device count."""
from __future__ import annotations

import time
from typing import Callable, Iterable

from bench.cases.case import Case
from bench.cases.levers import execution_of

# A first guess of one case's seconds by execution, before this run has measured one (an H100:
# eager resnet18-small cases took 4-6 s with the worker's start shared, compiled ones 12-25 s).
PRIOR_COST_S = {"eager": 6.0, "cuda-graph": 8.0, "compile": 25.0}
# The share of the budget kept free: a case's cost is an estimate, and the command must end in time.
SAFETY = 0.06


class Budget:
    def __init__(self, budget_s: float, rows: Callable[[], Iterable[dict]], clock=time.monotonic,
                 started: float | None = None):
        self.budget_s = budget_s
        self.rows = rows  # the run's rows so far, what costs are estimated from
        self.clock = clock
        self.started = clock() if started is None else started  # the command's start
        self.reserve_s = 0.0  # held back for the finals while levers are planned

    @property
    def minutes(self) -> float:
        return self.budget_s / 60

    def spent(self) -> float:
        return self.clock() - self.started

    def left(self) -> float:
        """Seconds the budget has left, less a margin for writing the file and leaving."""
        return self.budget_s - SAFETY * self.budget_s - self.spent()

    def ok(self, execution: str | None = None, devices: int | None = None, full: bool = False) -> list[dict]:
        """The run's ok rows so far that carry their time, of an execution and device count;
        `full`: only those that ran every trial (not stopped after a survey's short trial)."""
        return [r for r in self.rows() if r.get("status") == "ok" and r.get("elapsed_s")
                and (execution is None or execution_of(Case.from_row(dict(r))) == execution)
                and (devices is None or int(r.get("n_replicas") or 1) == devices)
                and not (full and r.get("screened"))]

    @staticmethod
    def mean_cost(rows: list[dict]) -> float | None:
        spent = [float(r.get("elapsed_s") or 0) + float(r.get("worker_start_s") or 0) for r in rows]
        return sum(spent) / len(spent) if spent else None

    def short_cost(self, case: Case, fraction: float) -> float:
        """Seconds the case will take as its short first trial alone, `fraction` of its timed steps:
        its cost with the timed part cut to that share (the share of a case its timed steps took,
        from this run's rows of its execution that ran every trial; a half where none say)."""
        rows = [r for r in self.ok(execution_of(case), full=True) if r.get("timed_s")]
        timed = [float(r["timed_s"]) / (float(r["elapsed_s"]) + float(r.get("worker_start_s") or 0)) for r in rows]
        share = min(sum(timed) / len(timed), 1.0) if timed else 0.5
        return self.cost(case) * (1 - share * (1 - fraction))

    def cost(self, case: Case) -> float:
        """Seconds the case will take with every trial: the mean of this run's ok rows of its
        execution at its device count that ran every trial; else of its execution at other counts,
        scaled by how eager cases at the two compare; else the prior, scaled by how this run's eager
        cases compare with it."""
        execution, devices = execution_of(case), case.n_replicas
        here = self.mean_cost(self.ok(execution, devices, full=True))
        if here is not None:
            return here
        eager_here = self.mean_cost(self.ok("eager", devices, full=True)) or self.mean_cost(self.ok("eager", full=True))
        elsewhere = self.ok(execution, full=True)
        if elsewhere and eager_here:
            counts = {int(r.get("n_replicas") or 1) for r in elsewhere}
            eager_there = self.mean_cost([r for r in self.ok("eager", full=True)
                                          if int(r.get("n_replicas") or 1) in counts])
            scale = eager_here / eager_there if eager_there else 1.0
            return self.mean_cost(elsewhere) * max(scale, 0.5)
        scale = eager_here / PRIOR_COST_S["eager"] if eager_here else 1.0
        return PRIOR_COST_S.get(case.execution, PRIOR_COST_S["compile"]) * max(scale, 1.0)
