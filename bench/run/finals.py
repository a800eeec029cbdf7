"""The search's last phase, the finals (bench/run/search.py): where a group's order is open, its
candidates measured again side by side, interleaved A, B, A."""
from __future__ import annotations

from bench.cases import ranking
from bench.cases.case import Case
from bench.run.runner import named
from bench.run.search_state import MAX_FINALISTS, SearchState, group_dict, label, unique


def finals(state: SearchState, leaders: dict) -> None:
    """Measure the candidates of each group whose order is open again, interleaved A, B, A."""
    plans = []
    for key in leaders:
        rows = state.group_rows(key)
        chosen, tied, left_out = ranking.pick(rows, state.asked)
        open_ = ranking.unjudged(chosen, tied, left_out)
        if not open_:
            why = ("only one configuration was measured" if len(rows) < 2 else
                   "the pick beats the rest beyond their intervals" if not tied else
                   f"what ties with the pick lies within {100 * ranking.MATTERS:g}% of it: the simpler is named")
            state.log["finals"].append({"group": group_dict(key), "verdict": f"settled: {why}"})
            continue
        candidates = unique([chosen] + sorted(open_, key=lambda r: -r["items_per_s"]))
        if len(candidates) < 2:  # nothing stable: the fastest ones measured again side by side
            candidates = unique(candidates + sorted(rows, key=lambda r: -r["items_per_s"]))
        plans.append((key, [Case.from_row(r) for r in candidates[:MAX_FINALISTS]]))
    for key, cases in sorted(plans, key=lambda p: state.serve(p[0])):
        order = cases + cases[:1]  # A, B(, C), A
        cost = sum(state.budget.cost(c) for c in order)
        if cost > state.budget.left():
            state.log["finals"].append({"group": group_dict(key), "candidates": [named(c) for c in cases],
                                       "verdict": f"not measured again: the budget ({state.budget.minutes:g} min) "
                                                  "was spent"})
            continue
        state.runner.measure("finals", cases, again=True)  # one call: cases of one launcher share a worker
        state.runner.measure("finals", cases[:1], again=True)
        state.log["finals"].append({"group": group_dict(key),
                                   "candidates": [label(state.runner.row(c)) for c in cases],
                                   "verdict": "measured again, interleaved", "order": [named(c) for c in order]})
