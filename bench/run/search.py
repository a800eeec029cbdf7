"""`bench run --search`: the best configuration within a time budget, every lever's gain measured.

The question is asked at the GPUs the user has: the largest device count of the run comes first
in every phase, one device next. Three phases, every case an ordinary row of the results file:
1. **Survey**: the sweep the user asked for, every strategy the host can run at every batch of the
   ladder at its defaults: the comparison the suite exists for. The reference strategy at the
   largest device count comes first, so that the bar is set early, one device's cases next, the
   rest after; a case whose first trial runs below SCREEN of the best measured at its batch is far
   behind and is measured once, not `--trials` times (its row says so). A strategy the host cannot
   run is a `skipped` row that says why; only a budget smaller than the survey (SURVEY_SHARE of it)
   leaves cases out, and their rows name the budget.
2. **Levers**: at each model, precision, device count and batch, on the leaders (the configuration
   the ranking names, and the fastest where it is another), one dimension after another
   (bench/cases/levers.py: execution, the optimiser's kernels, memory format, the strategy's own options).
   Before any other lever anywhere, every device count gets the executions its regime calls for
   at every batch: compile reduce-overhead everywhere, and a whole-step CUDA graph where the GPU
   idles (the batch ladder of the fastest eager step any strategy reached at each batch there).
   One lever at every batch of a device count is measured in one call, so its batches share a
   worker's start. The best lever of a dimension is kept where it beats the current configuration
   beyond both intervals; the next dimension starts from it.
3. **Finals**: where the order is open (a configuration whose median is ahead by what matters, but
   whose interval overlaps the pick's), the candidates are measured again side by side,
   interleaved (A, B, A), which also measures the run's own noise: a difference within it is a
   tie (bench/cases/ranking.py `pick`).

The budget is the whole command's wall time. Each case's cost is estimated from the rows this
run already measured (by execution and device count; compiling costs the most), the finals are
reserved their share, and what the budget cannot hold is recorded as not tried, with why. The
plan, every measurement, what was kept, dropped or not tried and why are the results file's
"search" section (SCHEMA), written after every case with the rows; `bench answer` and `bench
report` read it.

In four parts: the plan (this module: the phases and their order), the budget (bench/run/budget.py:
the time left and each case's estimated cost), the runner (bench/run/runner.py: measuring through
the sweep and logging) and the ranking (bench/cases/ranking.py: what beats what).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import strategies
from bench.cases import ranking
from bench.cases.case import Case, identity
from bench.cases.levers import DIMENSIONS, Lever, execution_of, levers
from bench.run.budget import Budget
from bench.run.runner import Runner, group_of, named

SCHEMA = "parabench-search/1"
# The default budget, minutes: what the whole job takes on 2 H200s (docs/search.md): every strategy
# surveyed at every batch, then each regime's executions at every batch of both device counts, with
# room to measure a two-mode compiled row again. Replayed at the seconds each case took there
# (tests/test_search.py), 7 minutes leave a first-tier execution out, as the real run did, and 9 hold it all.
DEFAULT_BUDGET_MIN = 9.0
MAX_LEADERS = 2  # configurations per group that levers are tried on
MAX_FINALISTS = 3  # configurations per group measured again side by side
# The most of the budget the survey may take. The default budget holds the whole survey and the
# levers each regime calls for (docs/search.md: what they cost on 2 H200s); a smaller one keeps
# the bar, the baseline and as much of the comparison as this share holds.
SURVEY_SHARE = 0.6
# A survey case whose first trial runs below this share of the best measured at its batch is far
# behind: one trial tells that; measuring it in full would not change the answer.
SCREEN = 0.5
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


@dataclass
class _Item:
    """One lever on one leader of one group: a case the plan may measure."""
    key: tuple
    leader: Leader
    lever: Lever
    rank: tuple  # the plan's order
    late: bool  # not of the first tier on the group's first leader: after every first-tier lever


class Search:
    """The plan: which cases to measure, phase by phase, within the budget (bench/run/budget.py),
    measured by the runner (bench/run/runner.py) and ranked by bench/cases/ranking.py."""

    def __init__(self, sweep, settings, budget_s: float, asked: dict, reporter, clock=time.monotonic,
                 started: float | None = None):
        self.sweep = sweep
        self.settings = settings
        self.reporter = reporter
        self.budget = Budget(budget_s, lambda: sweep.rows.values(), clock, started)
        self.asked = asked
        self.counts: list[int] = []  # device counts, in the order they are served
        self.log = {"schema": SCHEMA, "budget_s": budget_s, "asked": asked, "phases": [], "measurements": [],
                    "levers": [], "not_tried": [], "finals": []}
        self.runner = Runner(sweep, self.log, clock)
        sweep.document["search"] = self.log

    def _say(self, text: str) -> None:
        self.reporter.say(f"search: {text}")

    # --- the phases ------------------------------------------------------------------
    def run(self, cases: list[Case]) -> list[dict]:
        self.counts = sorted({c.n_replicas for c in cases}, key=lambda n: (n == 1, -n))
        self.log["device_order"] = self.counts
        self._survey(cases)
        self._survey_again(cases)
        groups = self.runner.ok_rows(cases)
        leaders = {key: self._leaders(rows) for key, rows in sorted(groups.items(), key=lambda kv: self._serve(kv[0]))}
        self.budget.reserve_s = self._finals_reserve(leaders)
        # Every ok row of the file counts as measured (a resumed search keeps its levers).
        known = {identity(r) for r in self.sweep.rows.values() if r.get("status") == "ok"}
        for dimension in DIMENSIONS:
            self._levers(dimension, leaders, known, groups)
        self._finals(leaders)
        self.log["spent_s"] = round(self.budget.spent(), 1)
        self.sweep.save()  # the file with the finished log
        return list(self.sweep.rows.values())

    def _serve(self, key: tuple) -> tuple:
        """A group's place in line: the largest device count first, one device next."""
        return (self.counts.index(key[2]) if key[2] in self.counts else len(self.counts), key[4])

    def _survey(self, cases: list[Case]) -> None:
        """The sweep asked for, within SURVEY_SHARE of the budget, a worker's cases at a time."""
        reference = [c for c in cases if c.n_replicas == self.counts[0]
                     and (d := strategies.info(c.strategy)) is not None and d.reference]
        bar = {_worker(c) for c in reference}
        always = set(reference) | {c for c in cases if (d := strategies.info(c.strategy)) is not None and d.baseline}

        def place(case):
            # The reference strategy's worker at the largest count sets the bar (the strategies that
            # share it come along: one start); one device's cases (the baseline's) come next, the
            # rest after: a survey cut short keeps the answer's cells.
            declared = strategies.info(case.strategy)
            first = (0 if case.n_replicas == self.counts[0] and _worker(case) in bar
                     else 1 if case.n_replicas == 1 else 2)
            return (first, self.counts.index(case.n_replicas), not (declared and declared.reference),
                    declared.order if declared else 99, case.strategy)

        ordered = sorted(cases, key=place)
        chunks: list[list[Case]] = []
        for case in ordered:
            if chunks and (chunks[-1][0].n_replicas, _worker(chunks[-1][0])) == (case.n_replicas, _worker(case)):
                chunks[-1].append(case)
            else:
                chunks.append([case])
        share = SURVEY_SHARE * self.budget.budget_s
        self.sweep.screen = SCREEN
        self.sweep.screen_exempt = {identity(self.sweep._row(c)) for c in always}  # the bar and divisor in full
        try:
            for chunk in chunks:
                todo = [c for c in chunk if not self.sweep.measured(c)]
                # What the host cannot run says why, whatever the budget (mxnet-gluon on Hopper).
                cannot = [c for c in todo if _unavailable(c)]
                todo = [c for c in todo if c not in cannot]
                self.sweep.run(cannot)
                # The bar (the reference strategy at the largest count) and the divisor of every
                # speed-up (the baseline at one device) are always measured; the rest within the share.
                held = [c for c in todo if c in always]
                # A kind of worker not yet measured at this count is priced at twice the run's
                # mean: on 4 H200s a one-process strategy's case cost several times a torchrun one's.
                kind = (_worker(chunk[0]), chunk[0].n_replicas)
                known_kind = bool(held) or any((_worker(c := Case.from_row(dict(r))), c.n_replicas) == kind
                                               for r in self.budget.ok())  # the bar's chunk pays its start anyway
                total = sum(self.budget.cost(c) for c in held)
                for case in todo:
                    if case in held:
                        continue
                    total += self.budget.cost(case) * (1 if known_kind else 2)
                    if self.budget.spent() + total > share:
                        break
                    held.append(case)
                held = [c for c in todo if c in held]  # in the chunk's order
                skipped = [c for c in todo if c not in held]
                for case in skipped:
                    self.sweep.record_skipped(case, f"not measured: the search's survey may take {SURVEY_SHARE:.0%} of "
                                                    f"the budget ({self.budget.minutes:g} min), and it was spent; a "
                                                    "larger --budget (make bench BUDGET=) measures it")
                    self.log["not_tried"].append({"group": group_dict(group_of(case)), "on": named(case),
                                                  "lever": "survey",
                                                  "why": "the survey's share of the budget was spent"})
                self.runner.measure("survey", held)
        finally:
            self.sweep.screen, self.sweep.screen_exempt = None, set()

    def _survey_again(self, cases: list[Case]) -> None:
        """Where the survey left a group's order open (a row too wide to rank by, or stopped, that
        may lead, bench/cases/ranking.py `unjudged`), the pick and those rows are measured again
        side by side before the levers go to one of them, within the survey's share."""
        todo = []
        for rows in self.runner.ok_rows(cases).values():
            chosen, tied, left_out = ranking.pick(rows, self.asked)
            open_ = ranking.unjudged(chosen, tied, left_out)
            if open_:
                todo += [Case.from_row(dict(r)) for r in _unique([chosen] + open_)]
        if todo and self.budget.spent() + sum(self.budget.cost(c) for c in todo) <= SURVEY_SHARE * self.budget.budget_s:
            self.runner.measure("survey, again", todo, again=True)

    def _leaders(self, rows: list[dict]) -> list[Leader]:
        """The configuration the rules name first, then the fastest measured where it is another
        (disturbed or not: levers measure it again in a new configuration)."""
        chosen, tied, left_out = ranking.pick(rows, self.asked)
        out = [chosen] if chosen is not None else []
        faster = [r for r in rows if r is not chosen and (chosen is None or r["items_per_s"] > chosen["items_per_s"])]
        if faster:
            out.append(max(faster, key=lambda r: r["items_per_s"]))
        return [Leader(row) for row in out[:MAX_LEADERS]]

    def _finals_reserve(self, leaders: dict, capped: bool = True) -> float:
        """What the finals may need: three measurements per group (A, B, A), priced as the
        costliest execution a lever may bring; `capped`: at most FINALS_SHARE of what is left now
        (the levers come first: on one H100 they moved the answer 1.4-3x, a final a few percent)."""
        dearest = max((self.budget.cost(lever.case) for ls in leaders.values() for leader in ls[:1]
                       for lever in levers(Case.from_row(dict(leader.row)), "execution")), default=0.0)
        per_group = [3 * max(dearest, self.budget.cost(Case.from_row(dict(ls[0].row))))
                     for ls in leaders.values() if ls]
        return min(sum(per_group), FINALS_SHARE * max(self.budget.left(), 0.0)) if capped else sum(per_group)

    def _regime(self, key: tuple, groups: dict) -> str:
        """The regime at the group's batch: the batch ladder (bench/cases/ranking.py `ladder`) of
        the fastest eager step the survey measured at each batch of this model, precision and
        device count, every strategy's rows and the fast end of their steps together, so that one
        noisy row (a 31% spread at 1024/GPU on 4 H200s) decides nothing alone."""
        fastest: dict[int, float] = {}
        for k, rows in groups.items():
            if k[:4] != key[:4]:
                continue
            for r in rows:
                if Case.from_row(dict(r)).execution == "eager" and r.get("step_ms_p10"):
                    batch = int(r["batch_per_gpu"])
                    fastest[batch] = min(fastest.get(batch, float("inf")), float(r["step_ms_p10"]))
        batches = sorted(fastest)
        return dict(zip(batches, ranking.ladder(batches, [fastest[b] for b in batches]))).get(
            int(key[4]), ranking.UNKNOWN)

    def _ordered_levers(self, key, leader: Leader, dimension: str, groups: dict) -> list[tuple[Lever, bool]]:
        """The dimension's levers, each with whether it is of the first tier (FIRST_TIER: the
        executions the regime at this count and batch calls for, tried before every other lever)."""
        found = levers(Case.from_row(dict(leader.row)), dimension)
        if dimension != "execution":
            return [(lever, False) for lever in found]
        regime = self._regime(key, groups)
        first = {execution for execution, only in FIRST_TIER.items()
                 if only is None or regime in (only, ranking.UNKNOWN)}
        order = list(FIRST_TIER)
        found.sort(key=lambda lever: (execution_of(lever.case) not in first,
                                      order.index(execution_of(lever.case))
                                      if execution_of(lever.case) in order else len(order)))
        return [(lever, execution_of(lever.case) in first) for lever in found]

    def _levers(self, dimension: str, leaders: dict, known: set, groups: dict) -> None:
        items = []
        for order, (key, group_leaders) in enumerate(leaders.items()):
            for rank, leader in enumerate(group_leaders):
                for priority, (lever, first) in enumerate(self._ordered_levers(key, leader, dimension, groups)):
                    reason = _unavailable(lever.case)
                    if reason:
                        self._record_lever(key, leader, lever, None, f"declined: {reason}")
                        continue
                    # The first tier on every group's first leader before anything else: the largest
                    # device count first, one execution at every batch of a count in one call. The
                    # rest after, where they cost least first, which buys the most cells.
                    late = not first or rank > 0
                    if not late:
                        where = (self._serve(key)[0], priority, key[4])
                    else:
                        where = (priority, round(self.budget.cost(lever.case), 1), order)
                    items.append(_Item(key, leader, lever, (late, rank) + where, late))
        items.sort(key=lambda i: i.rank)
        chosen, phase = [], f"levers: {dimension}"
        # One lever at every batch of a device count in one call: its cases share a worker's start.
        calls: list[list[_Item]] = []
        for item in items:
            same = calls and calls[-1][0].rank[:4] == item.rank[:4] and (
                calls[-1][0].lever.setting, calls[-1][0].lever.case.n_replicas) == (
                item.lever.setting, item.lever.case.n_replicas)
            if same:
                calls[-1].append(item)
            else:
                calls.append([item])
        waiting: list[_Item] = []  # measured, their group's other first-tier levers still to come
        for index, call in enumerate(calls):
            todo = [i for i in call if identity(self.sweep._row(i.lever.case)) not in known]
            chosen += [i for i in call if i not in todo]
            while todo:
                fits = self._fitting(todo, leaders)
                probe_case = fits[0].lever.case if fits else None
                guessed = probe_case is not None and not self.budget.ok(execution_of(probe_case), probe_case.n_replicas)
                if (guessed and 2 * sum(self.budget.cost(i.lever.case) for i in fits)
                        > self.budget.left() - self._floor(fits[0], leaders)):
                    # An execution not yet measured at this count is priced on a guess (a compiled
                    # case's cost is a guess until one is measured): where twice the guess would not
                    # fit, measure one, and price the rest with what it cost.
                    fits = fits[:1]
                self.runner.measure(phase, [i.lever.case for i in fits])
                for item in fits:
                    known.add(identity(self.sweep._row(item.lever.case)))
                    chosen.append(item)
                todo = [i for i in todo if i not in fits]
                # A disturbed row is judged once its group's first-tier levers are all in: on 2 H200s
                # ddp's compile reduce-overhead at 256/GPU was measured again (24 s) just before the CUDA
                # graph beat it by 1.7x, and the budget then missed one GPU's 2048/GPU.
                coming = {i.key for i in todo} | {i.key for c in calls[index + 1:] for i in c if not i.late}
                waiting += fits
                self._again_winners(phase, [i for i in waiting if i.key not in coming])
                waiting = [i for i in waiting if i.key in coming]
                if not guessed or not fits:
                    for item in todo:
                        self.log["not_tried"].append({"group": group_dict(item.key), "on": _label(item.leader.row),
                                                      "lever": item.lever.label(),
                                                      "why": f"the budget ({self.budget.minutes:g} min) was spent"})
                    break
        self._again_winners(phase, waiting)
        # A stopped lever row that may lead its group is measured once more before it is judged
        # (one whose interval is merely wide is ranked by it; the finals settle an open order).
        unique = {identity(self.sweep._row(i.lever.case)): i for i in chosen}.values()
        self._again(f"levers: {dimension}, again", [i.lever.case for i in unique if (r := self.runner.row(i.lever.case))
                                                    is not None and r["status"] == "ok" and ranking.stopped(r)
                                                    and r["items_per_s"] > ranking.interval(i.leader.row)[1]
                                                    and not self._beaten(i.key, r)])
        for key, group_leaders in leaders.items():
            for leader in group_leaders:
                tried = [(i.lever, self.runner.row(i.lever.case)) for i in chosen if i.leader is leader]
                self._settle(key, leader, tried)

    def _fitting(self, todo: list[_Item], leaders: dict) -> list[_Item]:
        """The items of one call the budget holds, in order. A group's first leader may draw on
        the budget down to the finals' reserve; a second leader only on what is left once the
        finals are priced in full. Cases measured together share one worker start, which the
        estimate (the mean of rows that each paid a share of one) counts once per case: a bound
        from above."""
        fits, total = [], 0.0
        for item in todo:
            if total + self.budget.cost(item.lever.case) <= self.budget.left() - self._floor(item, leaders):
                total += self.budget.cost(item.lever.case)
                fits.append(item)
        return fits

    def _floor(self, item: _Item, leaders: dict) -> float:
        """What the budget must keep after the item. The first execution levers on a first leader
        move the answer most (1.4-3x): they may use the finals' reserve too, which settles ties of
        a few percent; a group's other levers stop at the reserve; a second leader's levers at what
        the finals need in full."""
        first = leaders[item.key].index(item.leader) == 0
        late = item.rank[0]
        if first:
            return 0.0 if not late else self.budget.reserve_s
        return self._finals_reserve(leaders, capped=False)

    def _again_winners(self, phase: str, measured: list[_Item]) -> None:
        """A lever row that may lead its group but was disturbed (stopped between steps, or an
        interval too wide to rank by: a compiled step re-recording its graphs in a timed trial,
        say) is measured again as soon as the first-tier levers on its group's first leader are
        in, before the budget goes elsewhere: the answer cannot rank it until then. One that a
        steady row of its group beats beyond both intervals cannot lead, and is not measured again;
        one the budget cannot hold is logged as not tried."""
        shaky = [i for i in measured
                 if (r := self.runner.row(i.lever.case)) is not None and r["status"] == "ok"
                 and ranking.disturbed(r) and r["items_per_s"] > ranking.interval(i.leader.row)[1]
                 and not self._beaten(i.key, r)]
        if not shaky:
            return
        if sum(self.budget.cost(i.lever.case) for i in shaky) <= self.budget.left():
            self.runner.measure(f"{phase}, again", [i.lever.case for i in shaky], again=True)
            return
        for item in shaky:
            self.log["not_tried"].append({"group": group_dict(item.key), "on": _label(item.leader.row),
                                          "lever": f"{item.lever.label()}, again",
                                          "why": f"the budget ({self.budget.minutes:g} min) was spent"})

    def _beaten(self, key: tuple, row: dict) -> bool:
        """Whether a steady row of the group lies beyond both intervals above `row`: it cannot lead."""
        return any(ranking.beats(other, row) for other in self._group_rows(key) if not ranking.disturbed(other))

    def _group_rows(self, key: tuple) -> list[dict]:
        """The ok rows this run measured in a group."""
        return [r for r in self.sweep.rows.values() if r["status"] == "ok" and group_of(Case.from_row(dict(r))) == key]

    def _again(self, phase: str, cases: list[Case]) -> None:
        """A disturbed measurement cannot be judged: measure it once more (the log keeps both)."""
        if cases and sum(self.budget.cost(c) for c in cases) <= self.budget.left() - self.budget.reserve_s:
            self.runner.measure(phase, cases, again=True)

    def _settle(self, key: tuple, leader: Leader, tried: list) -> None:
        """Keep the best lever of a dimension where it beats the leader beyond both intervals."""
        base = leader.row
        best = None
        for lever, row in tried:
            if row is None or row["status"] != "ok":
                why = f"{row['status']}: {row.get('reason') or ''}".strip() if row else "no row"
                self._record_lever(key, leader, lever, None, f"dropped: {why}")
                continue
            gain = row["items_per_s"] / base["items_per_s"]
            if ranking.stopped(row) and not ranking.clear_of(row, base):
                verdict = f"dropped: {ranking.stopped(row)}"
            elif ranking.beats(row, base):
                verdict = BEATS
            else:
                verdict = "dropped: within the intervals" if gain >= 1 else "dropped: slower"
            self._record_lever(key, leader, lever, row, verdict)
            # Of the levers that beat the leader, the one whose interval's low end is highest: the
            # surest gain (a wide row's median may be its noise).
            if verdict == BEATS and (best is None or ranking.low_end(row) > ranking.low_end(best[1])):
                best = (lever, row)
        if best is not None:
            leader.row = best[1]
            leader.lineage.append(best[0].setting)
            for entry in self.log["levers"]:
                if entry["on"] != _label(base) or entry["group"] != group_dict(key):
                    continue
                if entry["lever"] == best[0].label():
                    entry["kept"] = True
                elif entry["verdict"] == BEATS:
                    entry["verdict"] = f"dropped: {BEATS}, below {best[0].setting}"
            self._say(f"{_label(base)} at {key[4]}/GPU, {_where(key)}: {best[0].label()} kept "
                      f"(x{best[1]['items_per_s'] / base['items_per_s']:.2f})")

    def _record_lever(self, key, leader: Leader, lever: Lever, row: dict | None, verdict: str) -> None:
        entry = {"group": group_dict(key), "on": _label(leader.row), "dimension": lever.dimension,
                 "lever": lever.label(), "verdict": verdict, "kept": False}
        if row is not None:
            entry.update({"case": _label(row), "items_per_s": row["items_per_s"],
                          "base_items_per_s": leader.row["items_per_s"],
                          "gain": round(row["items_per_s"] / leader.row["items_per_s"], 4)})
        self.log["levers"].append(entry)

    def _finals(self, leaders: dict) -> None:
        """Measure the candidates of each group whose order is open again, interleaved A, B, A."""
        plans = []
        for key in leaders:
            rows = self._group_rows(key)
            chosen, tied, left_out = ranking.pick(rows, self.asked)
            open_ = ranking.unjudged(chosen, tied, left_out)
            if not open_:
                why = ("only one configuration was measured" if len(rows) < 2 else
                       "the pick beats the rest beyond their intervals" if not tied else
                       f"what ties with the pick lies within {100 * ranking.MATTERS:g}% of it: the simpler is named")
                self.log["finals"].append({"group": group_dict(key), "verdict": f"settled: {why}"})
                continue
            candidates = _unique([chosen] + sorted(open_, key=lambda r: -r["items_per_s"]))
            if len(candidates) < 2:  # nothing stable: the fastest ones measured again side by side
                candidates = _unique(candidates + sorted(rows, key=lambda r: -r["items_per_s"]))
            plans.append((key, [Case.from_row(r) for r in candidates[:MAX_FINALISTS]]))
        for key, cases in sorted(plans, key=lambda p: self._serve(p[0])):
            order = cases + cases[:1]  # A, B(, C), A
            cost = sum(self.budget.cost(c) for c in order)
            if cost > self.budget.left():
                self.log["finals"].append({"group": group_dict(key), "candidates": [named(c) for c in cases],
                                           "verdict": f"not measured again: the budget ({self.budget.minutes:g} min) "
                                                      "was spent"})
                continue
            self.runner.measure("finals", cases, again=True)  # one call: cases of one launcher share a worker
            self.runner.measure("finals", cases[:1], again=True)
            self.log["finals"].append({"group": group_dict(key),
                                       "candidates": [_label(self.runner.row(c)) for c in cases],
                                       "verdict": "measured again, interleaved", "order": [named(c) for c in order]})


def _unavailable(case: Case) -> str | None:
    from bench.run.sweep import unavailable_reason

    return unavailable_reason(case)


def _worker(case: Case) -> tuple:
    from bench.run.sweep import worker_key

    return worker_key(case)


def _where(key: tuple) -> str:
    return f"{key[2]} device{'s' if key[2] > 1 else ''}"


def _label(row) -> str:
    return named(Case.from_row(dict(row)))


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
