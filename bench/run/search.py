"""`bench run --search`: the best configuration within a time budget, every lever's gain measured.

Three phases, every case an ordinary row of the results file:
1. **Survey**: the sweep the user asked for (every strategy at its defaults across the batch ladder).
2. **Levers**: at each model, precision, device count and batch, on the leaders (the simplest
   configuration the fastest does not beat, and the fastest where it is another), one dimension
   after another (bench/cases/levers.py: execution, SGD kernels, memory format, the strategy's own
   options): every lever of the dimension is measured on the leader's current configuration, and
   the best is kept only where it beats the current one beyond both spreads. The next dimension
   starts from what was kept.
3. **Finals**: where the fastest does not beat the others beyond their spreads, or a candidate's
   trials were disturbed, the candidates are measured again side by side, interleaved (A, B, A),
   which also measures the run's own noise: a difference within it is a tie.

The budget bounds phases 2 and 3: each case's cost is estimated from the rows this run already
measured (by execution; compiling costs the most), the finals are reserved their share first, and
what the budget cannot hold is recorded as not tried, with why. The plan, every measurement, what
was kept, dropped or not tried and why are the results file's "search" section (SCHEMA), written
after every case with the rows; `bench answer` and `bench report` read it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.cases import ranking
from bench.cases.case import Case, identity
from bench.cases.levers import DIMENSIONS, Lever, levers

SCHEMA = "parabench-search/1"
# A first guess of one case's seconds by execution, before this run has measured one (an H100:
# eager resnet18-small cases took 4-6 s with the worker's start shared, compiled ones 12-25 s).
PRIOR_COST_S = {"eager": 6.0, "cuda-graph": 8.0, "compile": 25.0}
MAX_LEADERS = 2  # configurations per group that levers are tried on
MAX_FINALISTS = 3  # configurations per group measured again side by side
# The finals' share of what the budget has left after the survey: held back while levers are tried.
FINALS_SHARE = 0.2
# Configurations closer than this are not measured again: the simpler one is named either way.
MIN_GAIN = 0.01
# The share of the budget kept free: a case's cost is an estimate, and the command must end in time.
SAFETY = 0.04


def group_of(case: Case) -> tuple:
    """What configurations compete within: model, precision, devices and batch."""
    return (case.model, case.precision, case.n_replicas, case.nnodes, case.batch_per_gpu)


def group_dict(key: tuple) -> dict:
    return dict(zip(("model", "precision", "devices", "nnodes", "batch_per_gpu"), key))


@dataclass
class Leader:
    row: dict  # the configuration levers are tried on, as last measured
    lineage: list = field(default_factory=list)  # the settings kept so far


class Search:
    def __init__(self, sweep, settings, budget_s: float, asked: dict, reporter, clock=time.monotonic,
                 started: float | None = None):
        self.sweep = sweep
        self.settings = settings
        self.reporter = reporter
        self.clock = clock
        self.started = clock() if started is None else started  # the command's start: the budget is its wall time
        self.reserve_s = 0.0  # held back for the finals while levers are planned
        self.budget_s = budget_s
        self.asked = asked
        self.log = {"schema": SCHEMA, "budget_s": budget_s, "asked": asked, "phases": [], "measurements": [],
                    "levers": [], "not_tried": [], "finals": []}
        sweep.document["search"] = self.log

    # --- time ----------------------------------------------------------------------
    def left(self) -> float:
        """Seconds the budget has left, less a margin for writing the file and leaving."""
        return self.budget_s - SAFETY * self.budget_s - (self.clock() - self.started)

    def cost(self, case: Case) -> float:
        """Seconds the case will take: the mean of this run's ok rows of the same execution, else
        the prior scaled by how this run's eager cases compare with it."""
        def mean(execution):
            spent = [float(r.get("elapsed_s") or 0) + float(r.get("worker_start_s") or 0)
                     for r in self.sweep.rows.values() if r.get("status") == "ok" and r.get("execution") == execution
                     and r.get("elapsed_s")]
            return sum(spent) / len(spent) if spent else None

        measured = mean(case.execution)
        if measured is not None:
            return measured
        eager = mean("eager")
        scale = eager / PRIOR_COST_S["eager"] if eager else 1.0
        return PRIOR_COST_S.get(case.execution, PRIOR_COST_S["compile"]) * max(scale, 1.0)

    # --- measuring -----------------------------------------------------------------
    def _row(self, case: Case) -> dict | None:
        return self.sweep.rows.get(identity(self.sweep._row(case)))

    def _measure(self, phase: str, cases: list[Case], again: bool = False) -> None:
        if not cases:
            return
        began = self.clock()
        self.sweep.run(cases, again=again)
        for case in cases:
            row = self._row(case)
            if row is None:
                continue
            entry = {"phase": phase, "case": _named(case), "key": list(map(str, case.key())),
                     "batch_per_gpu": case.batch_per_gpu, "devices": case.n_replicas, "status": row["status"],
                     "date": row.get("date")}
            if row["status"] == "ok":
                entry.update({k: row[k] for k in ("img_per_s", "img_per_s_p10", "img_per_s_p90")})
            else:
                entry["reason"] = row.get("reason")
            self.log["measurements"].append(entry)
        phases = self.log["phases"]
        if phases and phases[-1]["phase"] == phase:  # a phase measured a case at a time is one entry
            phases[-1].update(cases=phases[-1]["cases"] + len(cases),
                              seconds=round(phases[-1]["seconds"] + self.clock() - began, 1))
        else:
            phases.append({"phase": phase, "cases": len(cases), "seconds": round(self.clock() - began, 1)})

    def _ok_rows(self, cases: list[Case]) -> dict[tuple, list[dict]]:
        groups: dict[tuple, list[dict]] = {}
        for case in cases:
            row = self._row(case)
            if row is not None and row["status"] == "ok":
                groups.setdefault(group_of(case), []).append(row)
        return groups

    def _say(self, text: str) -> None:
        self.reporter.say(f"search: {text}")

    # --- the phases ------------------------------------------------------------------
    def run(self, cases: list[Case]) -> list[dict]:
        self._measure("survey", cases)
        self._again("survey, again", self._contenders_disturbed(self._ok_rows(cases)))
        groups = self._ok_rows(cases)
        leaders = {key: self._leaders(rows) for key, rows in groups.items()}
        self.reserve_s = self._finals_reserve(leaders)
        known = {identity(r) for rows in groups.values() for r in rows}
        for dimension in DIMENSIONS:
            self._levers(dimension, leaders, known)
        self._finals(leaders)
        self.log["spent_s"] = round(self.clock() - self.started, 1)
        self.sweep.save()  # the file with the finished log
        return list(self.sweep.rows.values())

    def _contenders_disturbed(self, groups: dict) -> list[Case]:
        """The disturbed rows that would lead their group if their figures held."""
        out = []
        for rows in groups.values():
            chosen, _, left_out = ranking.pick(rows, self.asked)
            out += [Case.from_row(r) for r, _ in left_out if chosen is None or r["img_per_s"] > chosen["img_per_s"]]
        return out

    def _again(self, phase: str, cases: list[Case]) -> None:
        """A disturbed measurement cannot be judged: measure it once more (the log keeps both)."""
        if cases and sum(self.cost(c) for c in cases) <= self.left() - self.reserve_s:
            self._measure(phase, cases, again=True)

    def _leaders(self, rows: list[dict]) -> list[Leader]:
        chosen, tied, left_out = ranking.pick(rows, self.asked)
        out = [chosen] if chosen is not None else []
        faster = [r for r in tied + [r for r, _ in left_out] if chosen is None or r["img_per_s"] > chosen["img_per_s"]]
        if faster:
            out.append(max(faster, key=lambda r: r["img_per_s"]))
        return [Leader(row) for row in out[:MAX_LEADERS]]

    def _finals_reserve(self, leaders: dict, capped: bool = True) -> float:
        """What the finals may need: three measurements per group (A, B, A), priced as the
        costliest execution a lever may bring; `capped`: at most FINALS_SHARE of what is left now
        (the levers come first: on one H100 they moved the answer 1.4-3x, a final a few percent)."""
        dearest = max((self.cost(lever.case) for ls in leaders.values() for l in ls[:1]
                       for lever in levers(Case.from_row(dict(l.row)), "execution")), default=0.0)
        per_group = [3 * max(dearest, self.cost(Case.from_row(dict(ls[0].row)))) for ls in leaders.values() if ls]
        return min(sum(per_group), FINALS_SHARE * max(self.left(), 0.0)) if capped else sum(per_group)

    def _levers(self, dimension: str, leaders: dict, known: set) -> None:
        ranked = []  # (leader rank, lever priority, group order, item): what the budget takes first
        for order, (key, group_leaders) in enumerate(leaders.items()):
            for rank, leader in enumerate(group_leaders):
                for priority, lever in enumerate(levers(Case.from_row(dict(leader.row)), dimension)):
                    reason = _unavailable(lever.case)
                    if reason:
                        self._record_lever(key, leader, lever, None, f"declined: {reason}")
                    else:
                        ranked.append((rank, priority, order, (key, leader, lever)))
        # Every group's first leader before any second one; each lever at every batch before the next.
        plan = [item for *_, item in sorted(ranked, key=lambda r: r[:3])]
        # One case at a time, each priced with what this run's cases of its execution cost so far
        # (a first guess of a compiled case can be twice what it takes). A group's first leader may
        # draw on the budget down to the finals' reserve; a second leader only on what is left
        # once the finals are priced in full.
        chosen, phase = [], f"levers: {dimension}"
        for item in plan:
            case = item[2].case
            measured = identity(self.sweep._row(case)) in known
            floor = self.reserve_s if leaders[item[0]].index(item[1]) == 0 else self._finals_reserve(leaders, capped=False)
            if measured or self.cost(case) <= self.left() - floor:
                if not measured:
                    self._measure(phase, [case])
                    known.add(identity(self.sweep._row(case)))
                chosen.append(item)
            else:
                self.log["not_tried"].append({"group": group_dict(item[0]), "on": _label(item[1].row),
                                              "lever": item[2].label(),
                                              "why": f"the budget ({self.budget_s / 60:g} min) was spent"})
        unique = list({identity(self.sweep._row(l.case)): l.case for _, _, l in chosen}.values())
        self._again(f"levers: {dimension}, again", [c for c in unique if (r := self._row(c)) is not None
                                                    and r["status"] == "ok" and ranking.disturbed(r)])
        for key, group_leaders in leaders.items():
            for leader in group_leaders:
                tried = [(lever, self._row(lever.case)) for k, l, lever in chosen if l is leader]
                self._settle(key, leader, tried)

    def _settle(self, key: tuple, leader: Leader, tried: list) -> None:
        """Keep the best lever of a dimension where it beats the leader beyond the spread."""
        base = leader.row
        best = None
        for lever, row in tried:
            if row is None or row["status"] != "ok":
                why = f"{row['status']}: {row.get('reason') or ''}".strip() if row else "no row"
                self._record_lever(key, leader, lever, None, f"dropped: {why}")
                continue
            gain = row["img_per_s"] / base["img_per_s"]
            if ranking.disturbed(row):
                verdict = f"dropped: {ranking.disturbed(row)}"
            elif ranking.beats(row, base):
                verdict = "beats the spread"
            else:
                verdict = "dropped: within the spread" if gain >= 1 else "dropped: slower"
            self._record_lever(key, leader, lever, row, verdict)
            if verdict == "beats the spread" and (best is None or row["img_per_s"] > best[1]["img_per_s"]):
                best = (lever, row)
        if best is not None:
            leader.row = best[1]
            leader.lineage.append(best[0].setting)
            for entry in self.log["levers"]:
                if entry["on"] != _label(base) or entry["group"] != group_dict(key):
                    continue
                if entry["lever"] == best[0].label():
                    entry["kept"] = True
                elif entry["verdict"] == "beats the spread":
                    entry["verdict"] = f"dropped: beats the spread, below {best[0].setting}"
            self._say(f"{_label(base)}: {best[0].label()} kept (x{best[1]['img_per_s'] / base['img_per_s']:.2f})")

    def _record_lever(self, key, leader: Leader, lever: Lever, row: dict | None, verdict: str) -> None:
        entry = {"group": group_dict(key), "on": _label(leader.row), "dimension": lever.dimension,
                 "lever": lever.label(), "verdict": verdict, "kept": False}
        if row is not None:
            entry.update({"case": _label(row), "img_per_s": row["img_per_s"], "base_img_per_s": leader.row["img_per_s"],
                          "gain": round(row["img_per_s"] / leader.row["img_per_s"], 4)})
        self.log["levers"].append(entry)

    def _finals(self, leaders: dict) -> None:
        """Measure the candidates of each unsettled group again, interleaved A, B, A."""
        plans = []
        for key in leaders:
            rows = [r for r in self.sweep.rows.values() if r["status"] == "ok"
                    and group_of(Case.from_row(r)) == key]
            chosen, tied, left_out = ranking.pick(rows, self.asked)
            fastest = max(rows, key=lambda r: r["img_per_s"]) if rows else None
            faster_disturbed = [r for r, _ in left_out if chosen is None or r["img_per_s"] > chosen["img_per_s"]]
            close = chosen is not None and fastest["img_per_s"] <= chosen["img_per_s"] * (1 + MIN_GAIN)
            candidates = _unique([fastest, chosen] + tied + faster_disturbed)
            if not faster_disturbed and (len(candidates) < 2 or close):
                why = ("the fastest beats the rest beyond their spreads" if len(candidates) < 2 else
                       f"the fastest is within {100 * MIN_GAIN:g}% of the simplest, which is named")
                self.log["finals"].append({"group": group_dict(key), "verdict": f"settled: {why}"})
                continue
            plans.append((key, [Case.from_row(r) for r in candidates[:MAX_FINALISTS]]))
        for key, cases in plans:
            order = cases + cases[:1]  # A, B(, C), A
            cost = sum(self.cost(c) for c in order)
            if cost > self.left():
                self.log["finals"].append({"group": group_dict(key), "candidates": [_named(c) for c in cases],
                                           "verdict": f"not measured again: the budget ({self.budget_s / 60:g} min) "
                                                      "was spent"})
                continue
            self._measure("finals", cases, again=True)
            self._measure("finals", cases[:1], again=True)
            self.log["finals"].append({"group": group_dict(key), "candidates": [_label(self._row(c)) for c in cases],
                                       "verdict": "measured again, interleaved", "order": [_named(c) for c in order]})


def _unavailable(case: Case) -> str | None:
    from bench.run.sweep import unavailable_reason

    return unavailable_reason(case)


def _named(case: Case) -> str:
    """The configuration as the answer names it: strategy (knobs away from the defaults)."""
    return case.strategy + (f" ({case.variant()})" if case.variant() else "")


def _label(row) -> str:
    return _named(Case.from_row(dict(row)))


def _unique(rows: list) -> list:
    seen, out = set(), []
    for row in rows:
        if row is None:
            continue
        key = identity(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out
