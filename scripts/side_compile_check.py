"""Does a side compile (bench/run/precompile.py) disturb what is measured beside it? Host-bound
cells measured by the suite's own timing (bench/run/worker.py `measure_case`, in this process),
back to back, in phases: alone, with the search's side compiles running beside them, alone again,
with them pinned to whole cores of the last half of the CPUs (affinity.side_cpus), and so on for
--turns turns. Every measurement lands in one file, written after every phase:

  python scripts/side_compile_check.py --out FILE.json [--gpus 0,1] [--turns 2] [--phase-s 25]
      [--model resnet18-small] [--batch 256] [--measure-on-first-half]

--measure-on-first-half pins this process (the measured one) to the CPUs the side compiles leave
(the first half): a host-bound cell then runs on cores no compile shares, and on no others.

Measured: `single` on the first of --gpus, eager at --batch, amp-bf16 with channels_last, 10
warm-up steps and 3 trials of 20 steps each time (resnet18-small at 256 on one H200: host-bound).
The side compiles are those a search's survey has beside it: compile reduce-overhead and compile of
the reference strategy on --gpus and of the baseline on the first of them, at 256, 1024 and 2048
per GPU, each phase into an empty cache folder of its own (so that they compile, not load).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIGURES = ("items_per_s", "items_per_s_p10", "items_per_s_p90")
ARMS = ("alone", "beside", "alone", "beside-pinned")


def measure(args) -> dict:
    """The suite's own row of `single` on the first of --gpus (bench/checks/bareloop.py)."""
    from bench.checks.bareloop import suite_single

    gpus = [int(g) for g in args.gpus.split(",") if g]  # none: the CPU (a smoke test)
    row = suite_single(args.model, args.batch, "amp-bf16", True, 10, 20, "foreach", gpus[0] if gpus else None)
    return {k: row.get(k) for k in FIGURES}


def side_cases(args):
    import strategies
    from bench.cases.case import Case, settings
    from bench.cases.levers import levers
    from bench.core.placement import Placement

    gpus = tuple(int(g) for g in args.gpus.split(",") if g)
    reference = next(n for n in strategies.names() if strategies.info(n).reference)
    out = []
    pairs = ((reference, Placement(gpus, len(gpus))), (strategies.baseline(), Placement(gpus[:1], 1)))
    for strategy, placement in pairs:
        if strategy == reference and len(gpus) < 2:
            continue
        for batch in (256, 1024, 2048):
            case = Case.make(strategy, "amp-bf16", args.model, placement, batch, "eager", settings())
            out += [lever.case for lever in levers(case, "execution") if lever.case.execution == "compile"]
    return out


def summary(phases: list[dict]) -> dict:
    """Per measured case: the median of each arm's measurements, and each side arm's phases against
    the mean of the alone phases around them (the drift between phases cancels)."""
    out = {}
    names = sorted({m["case"] for p in phases for m in p["measurements"]})
    for name in names:
        def med(phase):
            xs = [m["items_per_s"] for m in phase["measurements"] if m["case"] == name and m["items_per_s"]]
            return statistics.median(xs) if xs else None

        arms = {}
        for i, phase in enumerate(phases):
            arms.setdefault(phase["arm"], []).append(med(phase))
            if phase["arm"] != "alone":
                around = [med(q) for q in (phases[i - 1] if i else None, phases[i + 1] if i + 1 < len(phases) else None)
                          if q is not None and q["arm"] == "alone" and med(q)]
                if around and med(phase):
                    arms.setdefault(phase["arm"] + " / alone around it", []).append(
                        round(med(phase) / statistics.mean(around), 4))
        out[name] = arms
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpus", default="0,1")
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--phase-s", type=float, default=25.0)
    parser.add_argument("--model", default="resnet18-small")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--measure-on-first-half", action="store_true")
    args = parser.parse_args()
    if args.measure_on_first_half:
        from bench.run.affinity import side_cpus

        every = sorted(os.sched_getaffinity(0))
        first_half = sorted(set(every) - set(side_cpus(every)))
        if not first_half:
            parser.error(f"--measure-on-first-half needs 2 cores or more; this process may use {len(every)} CPUs")
        os.sched_setaffinity(0, first_half)  # before torch's threads start
    from bench.run.precompile import SideCompiles

    work = Path(tempfile.mkdtemp(prefix="side-check-"))
    measure(args)  # cuDNN's choices and the allocator's pool made before any phase
    phases = []
    for turn in range(args.turns):
        for arm in ARMS:
            side = None
            if arm != "alone":
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / f"cache-{turn}-{arm}")
                side = SideCompiles(pinned=arm.endswith("pinned"))
                side.submit(side_cases(args))
                time.sleep(3)  # started: importing, then compiling
            measurements, started = [], time.monotonic()
            while time.monotonic() - started < args.phase_s:
                running = sum(i.state == "running" for i in side.items) if side else 0
                measurements.append({"case": "single 1 GPU", "side_running": running, **measure(args)})
            record = {"turn": turn, "arm": arm, "measurements": measurements}
            if side is not None:
                side.close()
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
                record["side"] = side.summary()
            phases.append(record)
            # Written after every phase: a call cut short keeps the phases it finished.
            Path(args.out).write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "phases": phases,
                                                 "summary": summary(phases)}, indent=1))
            meds = summary([record])
            print(f"turn {turn + 1} {arm}: " + "; ".join(
                f"{name} median {v[arm][0] or 0:.0f} of {len(record['measurements'])}"
                for name, v in meds.items()), flush=True)
    for name, arms in summary(phases).items():
        print(name, json.dumps(arms), flush=True)


if __name__ == "__main__":
    main()
