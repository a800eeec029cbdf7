"""The search's state and its rules (bench/run/search.py says what the search does): the budget,
the log, the rows measured so far, and the constants each phase reads (bench/run/survey.py,
bench/run/lever_trials.py, bench/run/finals.py are functions over this state)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from bench.cases import ranking
from bench.cases.case import Case, identity
from bench.cases.defaults import BUDGET_MIN as DEFAULT_BUDGET_MIN  # noqa: F401 - the search's default, read here
from bench.cases.levers import levers
from bench.run.budget import Budget
from bench.run.runner import Runner, group_of, named

SCHEMA = "parabench-search/1"
MAX_LEADERS = 2  # configurations per group that levers are tried on
MAX_FINALISTS = 3  # configurations per group measured again side by side
# The most of the budget the survey may take. The default budget holds the whole survey and the
# levers each regime calls for (docs/search.md: what they cost on 2 H200s); a smaller one keeps
# the bar, the baseline and as much of the comparison as this share holds.
SURVEY_SHARE = 0.6
# The survey races its cases (F-race, successive halving): each runs a short first trial of this
# share of --steps (at least RACE_MIN_STEPS), and stops there where its interval lies below its
# group's leader's; only contenders run every trial. Where the survey's share is spent, a case
# runs the short trial alone while the budget up to FIRST_LOOK_SHARE holds it: every strategy
# keeps a row at every batch, said to be a first look.
RACE_STEPS_SHARE = 0.25
RACE_MIN_STEPS = 5
FIRST_LOOK_SHARE = 0.8
# The finals' share of what the budget has left after the survey: held back while levers are tried.
FINALS_SHARE = 0.2
BEATS = "beats the intervals"  # a lever's verdict where its interval lies above the leader's
# The executions that come before every other lever, at every batch of every device count:
# compile reduce-overhead (it won at 1024-2048/GPU at every count and at every batch on one GPU,
# on H100 and H200), and a whole-step CUDA graph where the GPU idles (it won at 256/GPU on 2 and
# 4 H200s).
FIRST_TIER = {"compile:reduce-overhead": None, "cuda-graph": ranking.HOST}


def group_dict(key: tuple) -> dict:
    return dict(zip(("model", "precision", "devices", "nnodes", "batch_per_gpu"), key))


@dataclass
class Leader:
    row: dict  # the configuration levers are tried on, as last measured
    lineage: list = field(default_factory=list)  # the settings kept so far


class SearchState:
    """What the phases share: the sweep that measures, the budget, the log, the device counts in
    the order they are served, and the questions every phase asks of the rows so far."""

    def __init__(self, sweep, settings, budget_s: float, asked: dict, reporter, clock=time.monotonic,
                 started: float | None = None, side_compiles: bool = False):
        self.sweep = sweep
        # Compile the likely levers' graphs beside the survey (bench/run/precompile.py).
        self.side_compiles = side_compiles
        self.settings = settings
        self.reporter = reporter
        self.budget = Budget(budget_s, lambda: sweep.rows.values(), clock, started)
        self.asked = asked
        self.counts: list[int] = []  # device counts, in the order they are served
        self.log = {"schema": SCHEMA, "budget_s": budget_s, "asked": asked, "phases": [], "measurements": [],
                    "levers": [], "not_tried": [], "finals": []}
        self.runner = Runner(sweep, self.log, clock)
        sweep.document["search"] = self.log

    def say(self, text: str) -> None:
        self.reporter.say(f"search: {text}")

    def serve(self, key: tuple) -> tuple:
        """A group's place in line: the largest device count first, one device next."""
        return (self.counts.index(key[2]) if key[2] in self.counts else len(self.counts), key[4])

    def leaders_of(self, rows: list[dict]) -> list[Leader]:
        """The configuration the rules name first, then the fastest measured where it is another
        (disturbed or not: levers measure it again in a new configuration)."""
        chosen, tied, left_out = ranking.pick(rows, self.asked)
        out = [chosen] if chosen is not None else []
        faster = [r for r in rows if r is not chosen and (chosen is None or r["items_per_s"] > chosen["items_per_s"])]
        if faster:
            out.append(max(faster, key=lambda r: r["items_per_s"]))
        return [Leader(row) for row in out[:MAX_LEADERS]]

    def finals_reserve(self, leaders: dict, capped: bool = True) -> float:
        """What the finals may need: three measurements per group (A, B, A), priced as the
        costliest execution a lever may bring; `capped`: at most FINALS_SHARE of what is left now
        (the levers come first: on one H100 they moved the answer 1.4-3x, a final a few percent)."""
        dearest = max((self.budget.cost(lever.case) for ls in leaders.values() for leader in ls[:1]
                       for lever in levers(Case.from_row(dict(leader.row)), "execution")), default=0.0)
        per_group = [3 * max(dearest, self.budget.cost(Case.from_row(dict(ls[0].row))))
                     for ls in leaders.values() if ls]
        return min(sum(per_group), FINALS_SHARE * max(self.budget.left(), 0.0)) if capped else sum(per_group)

    def beaten(self, key: tuple, row: dict) -> bool:
        """Whether a steady row of the group lies beyond both intervals above `row`: it cannot lead."""
        return any(ranking.beats(other, row) for other in self.group_rows(key) if not ranking.disturbed(other))

    def group_rows(self, key: tuple) -> list[dict]:
        """The ok rows this run measured in a group."""
        return [r for r in self.sweep.rows.values() if r["status"] == "ok" and group_of(Case.from_row(dict(r))) == key]

    def again(self, phase: str, cases: list[Case]) -> None:
        """A disturbed measurement cannot be judged: measure it once more (the log keeps both)."""
        if cases and sum(self.budget.cost(c) for c in cases) <= self.budget.left() - self.budget.reserve_s:
            self.runner.measure(phase, cases, again=True)


def unavailable(case: Case) -> str | None:
    from bench.run.workers import unavailable_reason

    return unavailable_reason(case)


def worker_of(case: Case) -> tuple:
    from bench.run.workers import worker_key

    return worker_key(case)


def where(key: tuple) -> str:
    return f"{key[2]} device{'s' if key[2] > 1 else ''}"


def label(row) -> str:
    return named(Case.from_row(dict(row)))


def unique(rows: list) -> list:
    seen, out = set(), []
    for row in rows:
        if row is None:
            continue
        key = identity(row)
        if key not in seen:
            seen.add(key)
            out.append(row)
    return out
