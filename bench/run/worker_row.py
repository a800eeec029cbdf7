"""A case's row figures, assembled in the worker from what every rank measured
(bench/run/worker.py `time_case`): throughput from the slowest rank's steps, then the memory of
every device, the counted work, the clock limits, the phases and the step anatomy."""
from __future__ import annotations

from bench.core.stats import summarize
from bench.core.step import CaseSpec
from bench.measure import anatomy, counters
from bench.measure.throttle import POLICIES, POWER_LIMIT
from bench.workloads import get_workload
from bench.workloads.facts import facts


def throughput(case: CaseSpec, per_rank: list[dict]) -> dict:
    """Step times and throughput: several processes take as long as their slowest rank, step by
    step; throughput counts the data's items (images, or tokens: a sequence of T tokens is T)."""
    step_ms = [max(col) for col in zip(*[sum(r["step_ms"], []) for r in per_rank])]
    trial_wall = [max(col) for col in zip(*[r["wall"] for r in per_rank])]
    data = get_workload(case.model).data
    # A case that stopped after its short first trial (worker.race) ran steps of that trial's length.
    figures = summarize(step_ms, trial_wall, per_rank[0]["steps"], case.global_batch * data.items_per_sample)
    figures["screened"] = per_rank[0]["screened"]  # every rank decides alike (worker.race)
    return figures


def assemble(case: CaseSpec, per_rank: list[dict], figures: dict) -> dict:
    """The row's figures: `figures` (throughput) with every rank's memory, work, limits and phases."""
    figures = dict(figures)
    memory = {(r["where"]["node"], k): v for r in per_rank for k, v in r["memory"].items()}
    figures["cpus_per_rank"] = ";".join(r["where"]["cpus"] for r in per_rank)
    figures.update(per_rank[0].get("compile_cache") or {})  # every rank compiles the same graphs
    figures.update({name: round(max(r["phases"][name] for r in per_rank), 3) for name in per_rank[0]["phases"]})
    # The most capped GPU of any rank (None where no rank could read its counters).
    figures.update({column: max((r["capped"][column] for r in per_rank if r["capped"][column] is not None),
                                default=None) for column in POLICIES})
    figures[POWER_LIMIT] = min((r["capped"][POWER_LIMIT] for r in per_rank if r["capped"][POWER_LIMIT] is not None),
                               default=None)
    if case.nnodes > 1:
        nodes = {r["where"]["node"]: r["where"] for r in per_rank}
        figures.update(hosts=";".join(nodes[n]["host"] for n in sorted(nodes)),
                       node_gpu_names=";".join(nodes[n]["gpu"] for n in sorted(nodes)))
    # Counters of the busiest rank (ranks of a data-parallel step do the same work); none where the
    # case was not counted (a survey's case raced out, or given a first look alone).
    if all(r["work"] is not None for r in per_rank):
        figures.update({k: max(r["work"][k] for r in per_rank) for k in counters.COUNTERS},
                       counters_scope=counters.SCOPE)
    data = get_workload(case.model).data
    model = facts(case.model)  # on the meta device: no memory, whatever the model's size
    figures.update(parameters=model["parameters"], flops_per_item=model["flops_per_item"], unit=data.unit.name,
                   items_per_sample=data.items_per_sample,
                   tflops=model["flops_per_item"] * figures["items_per_s"] / 1e12)
    if any(r["anatomy"] is not None for r in per_rank):
        figures.update(anatomy_row(case, per_rank, figures["step_ms_p50"], max(r["anatomy_s"] for r in per_rank)))
    if memory:
        ordinals = sorted(memory)
        figures.update(
            peak_alloc_mib=max(memory[o][0] for o in ordinals),
            peak_alloc_mib_min=min(memory[o][0] for o in ordinals),
            peak_reserved_mib=max(memory[o][1] for o in ordinals),
            peak_alloc_mib_per_device=";".join(f"{memory[o][0]:.1f}" for o in ordinals),
            peak_reserved_mib_per_device=";".join(f"{memory[o][1]:.1f}" for o in ordinals),
        )
    return figures


def anatomy_row(case: CaseSpec, per_rank: list[dict], timed_step_ms: float, wall_s: float) -> dict:
    failed = [r["anatomy"] for r in per_rank if isinstance(r["anatomy"], str)]
    if failed:
        return {"anatomy_note": "anatomy not taken: " + "; ".join(failed)}
    row = anatomy.summarise([r["anatomy"] for r in per_rank], timed_step_ms, on_gpu=bool(case.gpus))
    if case.execution == "cuda-graph":
        note = "one graph launch replays the whole step: its optimiser kernels count as compute"
        row["anatomy_note"] = "; ".join(filter(None, [row["anatomy_note"], note]))
    row.update(anatomy_traces=case.anatomy.record, anatomy_wall_s=round(wall_s, 3))
    return row
