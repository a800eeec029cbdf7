"""The search's second phase, the levers (bench/run/search.py): on each group's leaders, one
dimension after another (bench/cases/levers.py), the first tier of executions before the rest,
each lever kept where it beats the leader beyond both intervals."""
from __future__ import annotations

from dataclasses import dataclass

from bench.cases import ranking
from bench.cases.case import Case, identity
from bench.cases.levers import EXECUTION_LEVERS, Lever, execution_name, execution_of, levers
from bench.run.search_state import BEATS, FIRST_TIER, Leader, SearchState, group_dict, label, unavailable, where


@dataclass
class _Item:
    """One lever on one leader of one group: a case the plan may measure."""
    key: tuple
    leader: Leader
    lever: Lever
    rank: tuple  # the plan's order
    late: bool  # not of the first tier on the group's first leader: after every first-tier lever


def regime_at(state: SearchState, key: tuple, groups: dict) -> str:
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


def ordered_levers(state: SearchState, key, leader: Leader, dimension: str, groups: dict) -> list[tuple[Lever, bool]]:
    """The dimension's levers, each with whether it is of the first tier (FIRST_TIER: the
    executions the regime at this count and batch calls for, tried before every other lever)."""
    found = levers(Case.from_row(dict(leader.row)), dimension)
    if dimension != "execution":
        return [(lever, False) for lever in found]
    regime = regime_at(state, key, groups)
    first = {execution for execution, only in FIRST_TIER.items()
             if only is None or regime in (only, ranking.UNKNOWN)}
    order = list(FIRST_TIER)
    found.sort(key=lambda lever: (execution_of(lever.case) not in first,
                                  order.index(execution_of(lever.case))
                                  if execution_of(lever.case) in order else len(order)))
    return [(lever, execution_of(lever.case) in first) for lever in found]


def likely_compiles(state: SearchState, cases: list[Case]) -> list[Case]:
    """The compiled cases the levers will most likely measure, to compile beside the survey
    (bench/run/precompile.py): the execution levers that compile, on the configurations that
    most often lead as the survey measures them (the reference strategy at each device count of
    several, the baseline at one), in the order the levers come: the first tier's execution at
    every count and batch (the largest count first), then the others."""
    import strategies

    def likely_leader(case: Case) -> bool:
        declared = strategies.info(case.strategy)
        return declared is not None and bool(declared.reference if case.n_replicas > 1 else declared.baseline)

    order = [execution_name(execution, mode) for execution, mode in EXECUTION_LEVERS]
    found = {}
    for case in cases:
        # One host's cache: a run across hosts would warm only node 0's.
        if case.n_replicas not in state.counts or case.nnodes > 1 or not likely_leader(case) or unavailable(case):
            continue
        for lever in levers(case, "execution"):
            execution = execution_of(lever.case)
            if lever.case.execution == "compile" and not unavailable(lever.case):
                rank = (execution not in FIRST_TIER, order.index(execution), state.counts.index(case.n_replicas),
                        case.batch_per_gpu)
                found[lever.case.key()] = (rank, lever.case)
    return [case for _, case in sorted(found.values(), key=lambda v: v[0])]


def try_levers(state: SearchState, dimension: str, leaders: dict, known: set, groups: dict) -> None:
    items = []
    for order, (key, group_leaders) in enumerate(leaders.items()):
        for rank, leader in enumerate(group_leaders):
            for priority, (lever, first) in enumerate(ordered_levers(state, key, leader, dimension, groups)):
                reason = unavailable(lever.case)
                if reason:
                    record_lever(state, key, leader, lever, None, f"declined: {reason}")
                    continue
                # The first tier on every group's first leader before anything else: the largest
                # device count first, one execution at every batch of a count in one call. The
                # rest after, where they cost least first, which buys the most cells.
                late = not first or rank > 0
                if not late:
                    where = (state.serve(key)[0], priority, key[4])
                else:
                    where = (priority, round(state.budget.cost(lever.case), 1), order)
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
        todo = [i for i in call if identity(state.sweep.row_of(i.lever.case)) not in known]
        chosen += [i for i in call if i not in todo]
        while todo:
            fits = fitting(state, todo, leaders)
            probe_case = fits[0].lever.case if fits else None
            guessed = probe_case is not None and not state.budget.ok(execution_of(probe_case), probe_case.n_replicas)
            if (guessed and 2 * sum(state.budget.cost(i.lever.case) for i in fits)
                    > state.budget.left() - floor(state, fits[0], leaders)):
                # An execution not yet measured at this count is priced on a guess (a compiled
                # case's cost is a guess until one is measured): where twice the guess would not
                # fit, measure one, and price the rest with what it cost.
                fits = fits[:1]
            state.runner.measure(phase, [i.lever.case for i in fits])
            for item in fits:
                known.add(identity(state.sweep.row_of(item.lever.case)))
                chosen.append(item)
            todo = [i for i in todo if i not in fits]
            # A disturbed row is judged once its group's first-tier levers are all in: on 2 H200s
            # ddp's compile reduce-overhead at 256/GPU was measured again (24 s) just before the CUDA
            # graph beat it by 1.7x, and the budget then missed one GPU's 2048/GPU.
            coming = {i.key for i in todo} | {i.key for c in calls[index + 1:] for i in c if not i.late}
            waiting += fits
            again_winners(state, phase, [i for i in waiting if i.key not in coming])
            waiting = [i for i in waiting if i.key in coming]
            if not guessed or not fits:
                for item in todo:
                    state.log["not_tried"].append({"group": group_dict(item.key), "on": label(item.leader.row),
                                                  "lever": item.lever.label(),
                                                  "why": f"the budget ({state.budget.minutes:g} min) was spent"})
                break
    again_winners(state, phase, waiting)
    # A stopped lever row that may lead its group is measured once more before it is judged
    # (one whose interval is merely wide is ranked by it; the finals settle an open order).
    unique = {identity(state.sweep.row_of(i.lever.case)): i for i in chosen}.values()
    state.again(f"levers: {dimension}, again", [i.lever.case for i in unique if (r := state.runner.row(i.lever.case))
                                                is not None and r["status"] == "ok" and ranking.stopped(r)
                                                and r["items_per_s"] > ranking.interval(i.leader.row)[1]
                                                and not state.beaten(i.key, r)])
    for key, group_leaders in leaders.items():
        for leader in group_leaders:
            tried = [(i.lever, state.runner.row(i.lever.case)) for i in chosen if i.leader is leader]
            settle(state, key, leader, tried)


def fitting(state: SearchState, todo: list[_Item], leaders: dict) -> list[_Item]:
    """The items of one call the budget holds, in order. A group's first leader may draw on
    the budget down to the finals' reserve; a second leader only on what is left once the
    finals are priced in full. Cases measured together share one worker start, which the
    estimate (the mean of rows that each paid a share of one) counts once per case: a bound
    from above."""
    fits, total = [], 0.0
    for item in todo:
        if total + state.budget.cost(item.lever.case) <= state.budget.left() - floor(state, item, leaders):
            total += state.budget.cost(item.lever.case)
            fits.append(item)
    return fits


def floor(state: SearchState, item: _Item, leaders: dict) -> float:
    """What the budget must keep after the item. The first execution levers on a first leader
    move the answer most (1.4-3x): they may use the finals' reserve too, which settles ties of
    a few percent; a group's other levers stop at the reserve; a second leader's levers at what
    the finals need in full."""
    first = leaders[item.key].index(item.leader) == 0
    late = item.rank[0]
    if first:
        return 0.0 if not late else state.budget.reserve_s
    return state.finals_reserve(leaders, capped=False)


def again_winners(state: SearchState, phase: str, measured: list[_Item]) -> None:
    """A lever row that may lead its group but was disturbed (stopped between steps, or an
    interval too wide to rank by: a compiled step re-recording its graphs in a timed trial,
    say) is measured again as soon as the first-tier levers on its group's first leader are
    in, before the budget goes elsewhere: the answer cannot rank it until then. One that a
    steady row of its group beats beyond both intervals cannot lead, and is not measured again;
    one the budget cannot hold is logged as not tried."""
    shaky = [i for i in measured
             if (r := state.runner.row(i.lever.case)) is not None and r["status"] == "ok"
             and ranking.disturbed(r) and r["items_per_s"] > ranking.interval(i.leader.row)[1]
             and not state.beaten(i.key, r)]
    if not shaky:
        return
    if sum(state.budget.cost(i.lever.case) for i in shaky) <= state.budget.left():
        state.runner.measure(f"{phase}, again", [i.lever.case for i in shaky], again=True)
        return
    for item in shaky:
        state.log["not_tried"].append({"group": group_dict(item.key), "on": label(item.leader.row),
                                      "lever": f"{item.lever.label()}, again",
                                      "why": f"the budget ({state.budget.minutes:g} min) was spent"})


def settle(state: SearchState, key: tuple, leader: Leader, tried: list) -> None:
    """Keep the best lever of a dimension where it beats the leader beyond both intervals."""
    base = leader.row
    best = None
    for lever, row in tried:
        if row is None or row["status"] != "ok":
            why = f"{row['status']}: {row.get('reason') or ''}".strip() if row else "no row"
            record_lever(state, key, leader, lever, None, f"dropped: {why}")
            continue
        gain = row["items_per_s"] / base["items_per_s"]
        if ranking.stopped(row) and not ranking.clear_of(row, base):
            verdict = f"dropped: {ranking.stopped(row)}"
        elif ranking.beats(row, base):
            verdict = BEATS
        else:
            verdict = "dropped: within the intervals" if gain >= 1 else "dropped: slower"
        record_lever(state, key, leader, lever, row, verdict)
        # Of the levers that beat the leader, the one whose interval's low end is highest: the
        # surest gain (a wide row's median may be its noise).
        if verdict == BEATS and (best is None or ranking.low_end(row) > ranking.low_end(best[1])):
            best = (lever, row)
    if best is not None:
        leader.row = best[1]
        leader.lineage.append(best[0].setting)
        for entry in state.log["levers"]:
            if entry["on"] != label(base) or entry["group"] != group_dict(key):
                continue
            if entry["lever"] == best[0].label():
                entry["kept"] = True
            elif entry["verdict"] == BEATS:
                entry["verdict"] = f"dropped: {BEATS}, below {best[0].setting}"
        state.say(f"{label(base)} at {key[4]}/GPU, {where(key)}: {best[0].label()} kept "
                  f"(x{best[1]['items_per_s'] / base['items_per_s']:.2f})")


def record_lever(state: SearchState, key, leader: Leader, lever: Lever, row: dict | None, verdict: str) -> None:
    entry = {"group": group_dict(key), "on": label(leader.row), "dimension": lever.dimension,
             "lever": lever.label(), "verdict": verdict, "kept": False}
    if row is not None:
        entry.update({"case": label(row), "items_per_s": row["items_per_s"],
                      "base_items_per_s": leader.row["items_per_s"],
                      "gain": round(row["items_per_s"] / leader.row["items_per_s"], 4)})
    state.log["levers"].append(entry)
