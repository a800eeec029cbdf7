"""The search's runner (bench/run/search.py): measures cases through the sweep, and writes each
measurement and phase into the search's log."""
from __future__ import annotations

from bench.cases import ranking
from bench.cases.case import Case, identity


def named(case: Case) -> str:
    """The configuration as the answer names it: strategy (knobs away from the defaults)."""
    variant = case.variant()
    return case.strategy + (f" ({variant})" if variant else "")


def group_of(case: Case) -> tuple:
    """What configurations compete within: model, precision, devices and batch."""
    return case.group_key()


class Runner:
    def __init__(self, sweep, log: dict, clock):
        self.sweep = sweep
        self.log = log
        self.clock = clock
        self.side = None  # the search's side compiles (bench/run/precompile.py), settled before a measurement

    def row(self, case: Case) -> dict | None:
        return self.sweep.rows.get(identity(self.sweep.row_of(case)))

    def measure(self, phase: str, cases: list[Case], again: bool = False) -> None:
        if not cases:
            return
        began = self.clock()
        if self.side is not None:
            self.side.settle(cases)  # on the clock: a wait for a running side compile is part of the phase
        self.sweep.run(cases, again=again)
        for case in cases:
            row = self.row(case)
            if row is None:
                continue
            entry = {"phase": phase, "case": named(case), "key": list(map(str, case.key())),
                     "batch_per_gpu": case.batch_per_gpu, "devices": case.n_replicas, "status": row["status"],
                     "date": row.get("date")}
            if row["status"] == "ok":
                entry.update({k: row[k] for k in ("items_per_s", "items_per_s_p10", "items_per_s_p90",
                                                  "items_per_s_ci_lo",
                                                  "items_per_s_ci_hi") if row.get(k) is not None})
                if row.get("screened"):
                    entry["screened"] = row["screened"]
                if ranking.disturbed(row):
                    entry["disturbed"] = ranking.disturbed(row)
            else:
                entry["reason"] = row.get("reason")
            self.log["measurements"].append(entry)
        phases = self.log["phases"]
        if phases and phases[-1]["phase"] == phase:  # a phase measured a call at a time is one entry
            phases[-1].update(cases=phases[-1]["cases"] + len(cases),
                              seconds=round(phases[-1]["seconds"] + self.clock() - began, 1))
        else:
            phases.append({"phase": phase, "cases": len(cases), "seconds": round(self.clock() - began, 1)})

    def ok_rows(self, cases: list[Case]) -> dict[tuple, list[dict]]:
        """The ok rows of `cases`, by group."""
        groups: dict[tuple, list[dict]] = {}
        for case in cases:
            row = self.row(case)
            if row is not None and row["status"] == "ok":
                groups.setdefault(group_of(case), []).append(row)
        return groups
