"""The search's first phase, the survey (bench/run/search.py): the sweep asked for, every strategy at
every batch, raced (a short first trial; every trial only for a case that may lead its group) within
SURVEY_SHARE of the budget, a short trial alone beyond it; then the groups whose order it left open,
measured again side by side."""
from __future__ import annotations

import strategies
from bench.cases import ranking
from bench.cases.case import Case, identity
from bench.cases.levers import execution_of
from bench.run.budget import Budget
from bench.run.runner import group_of, named
from bench.run.search_state import (FIRST_LOOK_SHARE, RACE_MIN_STEPS, RACE_STEPS_SHARE, SURVEY_SHARE, SearchState,
                                     group_dict, unavailable, unique, worker_of)


def survey(state: SearchState, cases: list[Case]) -> None:
    """The sweep asked for, raced within SURVEY_SHARE of the budget, a worker's cases at a time."""
    # The bar: the reference strategy at the largest device count; on one device, the baseline (a
    # process group of one is no bar, and races like the rest).
    role = "reference" if state.counts[0] > 1 else "baseline"
    reference = [c for c in cases if c.n_replicas == state.counts[0]
                 and (d := strategies.info(c.strategy)) is not None and getattr(d, role)]
    bar = {worker_of(c) for c in reference}
    always = set(reference) | {c for c in cases if (d := strategies.info(c.strategy)) is not None and d.baseline}

    def place(case):
        # The reference strategy's worker at the largest count sets the bar (the strategies that
        # share it come along: one start); one device's cases (the baseline's) come next, the
        # rest after: a survey cut short keeps the answer's cells.
        declared = strategies.info(case.strategy)
        first = (0 if case.n_replicas == state.counts[0] and worker_of(case) in bar
                 else 1 if case.n_replicas == 1 else 2)
        return (first, state.counts.index(case.n_replicas), not (declared and declared.reference),
                declared.order if declared else 99, case.strategy)

    ordered = sorted(cases, key=place)
    chunks: list[list[Case]] = []
    for case in ordered:
        if chunks and (chunks[-1][0].n_replicas, worker_of(chunks[-1][0])) == (case.n_replicas, worker_of(case)):
            chunks[-1].append(case)
        else:
            chunks.append([case])
    share = SURVEY_SHARE * state.budget.budget_s
    settings = state.settings
    state.sweep.race_steps = min(settings.steps, max(RACE_MIN_STEPS, round(RACE_STEPS_SHARE * settings.steps)))
    fraction = state.sweep.race_steps / (settings.steps * settings.trials)
    state.sweep.race_full = {identity(state.sweep.row_of(c)) for c in always}  # the bar and divisor in full
    try:
        for chunk in chunks:
            todo = [c for c in chunk if not state.sweep.measured(c)]
            # What the host cannot run says why, whatever the budget (mxnet-gluon on Hopper).
            cannot = [c for c in todo if unavailable(c)]
            todo = [c for c in todo if c not in cannot]
            state.sweep.run(cannot)
            # The bar (the reference strategy at the largest count) and the divisor of every
            # speed-up (the baseline at one device) are always measured; the rest race within the share.
            held = [c for c in todo if c in always]
            # A kind of worker not yet measured at this count: on several devices its cases are
            # priced at twice the run's mean (on 4 H200s a one-process strategy's case cost several
            # times a torchrun one's); on one device every strategy runs the same step on one GPU,
            # so the kind costs its worker's start more (the dearest this run has paid), not twice.
            kind = (worker_of(chunk[0]), chunk[0].n_replicas)
            known_kind = bool(held) or any((worker_of(c := Case.from_row(dict(r))), c.n_replicas) == kind
                                           for r in state.budget.ok())  # the bar's chunk pays its start anyway
            one_device = chunk[0].n_replicas == 1
            unknown = 1 if known_kind or one_device else 2
            total = sum(state.budget.cost(c) for c in held)
            if not known_kind and one_device:
                total += max((float(r.get("worker_start_s") or 0) for r in state.budget.ok()), default=0.0)
            for case in todo:
                if case in held:
                    continue
                cost = racing_cost(state, case) * unknown
                if state.budget.spent() + total + cost > share:
                    break
                total += cost
                held.append(case)
            # Beyond the share, the short trial alone, while FIRST_LOOK_SHARE of the budget holds it.
            short = []
            for case in todo:
                if case not in held:
                    cost = first_look_cost(state, case, fraction) * unknown
                    if state.budget.spent() + total + cost > FIRST_LOOK_SHARE * state.budget.budget_s:
                        break
                    total += cost
                    short.append(case)
            state.sweep.race_short |= {identity(state.sweep.row_of(c)) for c in short}
            measured = [c for c in todo if c in held or c in short]  # in the chunk's order
            for case in [c for c in todo if c not in measured]:
                state.sweep.record_skipped(case, f"not measured: the search's survey may take {FIRST_LOOK_SHARE:.0%} "
                                                 f"of the budget ({state.budget.minutes:g} min) with its short trials, "
                                                 "and it was spent; a larger --budget (make bench BUDGET=) measures it")
                state.log["not_tried"].append({"group": group_dict(group_of(case)), "on": named(case),
                                              "lever": "survey",
                                              "why": "the survey's share of the budget was spent"})
            state.runner.measure("survey", measured)
    finally:
        state.sweep.race_steps, state.sweep.race_full, state.sweep.race_short = None, set(), set()


def racing_cost(state: SearchState, case: Case) -> float:
    """Seconds a racing case will take: the mean of this run's cases of its execution and device
    count that raced (those that stopped after their short trial and those that ran on), not of
    the bar's and the baseline's, which run every trial, nor of first looks; the budget's estimate
    before any raced."""
    racing = state.sweep.race_full | state.sweep.race_short  # full trials, or a first look: not a race
    raced = [r for r in state.budget.ok(execution_of(case), case.n_replicas) if identity(r) not in racing]
    return Budget.mean_cost(raced) if raced else state.budget.cost(case)


def first_look_cost(state: SearchState, case: Case, fraction: float) -> float:
    """Seconds a case will take as its short trial alone: the mean of this run's cases of its
    execution and device count that stopped after their short trial (raced out, settled or first
    looks: a short trial each, as this one); the budget's estimate before any stopped."""
    stopped = [r for r in state.budget.ok(execution_of(case), case.n_replicas) if r.get("screened")]
    return Budget.mean_cost(stopped) if stopped else state.budget.short_cost(case, fraction)


def survey_again(state: SearchState, cases: list[Case]) -> None:
    """Where the survey left a group's order open (a row too wide to rank by, or stopped, that
    may lead, bench/cases/ranking.py `unjudged`), the pick and those rows are measured again
    side by side before the levers go to one of them, within the survey's share."""
    todo = []
    for rows in state.runner.ok_rows(cases).values():
        chosen, tied, left_out = ranking.pick(rows, state.asked)
        open_ = ranking.unjudged(chosen, tied, left_out)
        if open_:
            todo += [Case.from_row(dict(r)) for r in unique([chosen] + open_)]
    if todo and state.budget.spent() + sum(state.budget.cost(c) for c in todo) <= SURVEY_SHARE * state.budget.budget_s:
        state.runner.measure("survey, again", todo, again=True)
