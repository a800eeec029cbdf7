"""Does a side compile (bench/run/precompile.py) disturb what is measured beside it? A host-bound
cell (one strategy, eager, a small batch) measured by `bench run` alone and with the search's side
compiles running beside it, in turns (alone, beside, alone, beside, ...), every figure in one file:

  python scripts/side_compile_check.py --out FILE.json [--gpus 0] [--turns 3] [--strategies single]
      [--model resnet18-small] [--batch 256] [--side-gpus 0,1]

Each measurement is one `bench run --no-search` of --strategies at --batch per GPU on all of --gpus.

The side compiles are those a search's survey has beside it: compile reduce-overhead and compile
of the reference strategy on --side-gpus and of the baseline on the first of them, at 256, 1024 and
2048 per GPU, each turn into an empty cache folder of its own (so that they compile, not load).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

FIGURES = ("items_per_s", "items_per_s_p10", "items_per_s_p90", "step_ms_p50", "step_ms_p10", "step_ms_p90")


def measure(args, out: Path) -> dict:
    cmd = [sys.executable, "-m", "bench", "run", "--no-search", "--gpus", args.gpus, "--gpu-counts",
           str(len(args.gpus.split(","))), "--strategies", args.strategies, "--models", args.model, "--precisions",
           "amp-bf16", "--batch-sizes", str(args.batch), "--out", str(out)]
    started = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    rows = json.loads(out.read_text())["rows"] if out.exists() else []
    return {"exit": done.returncode, "wall_s": round(time.monotonic() - started, 1),
            "rows": {r["strategy"]: {"status": r["status"], **{k: r.get(k) for k in FIGURES}} for r in rows},
            "tail": done.stdout[-300:] if done.returncode else ""}


def side_cases(args):
    import strategies
    from bench.cases.case import Case, settings
    from bench.cases.levers import levers
    from bench.core.placement import Placement

    gpus = tuple(int(g) for g in args.side_gpus.split(","))
    reference = next(n for n in strategies.names() if strategies.info(n).reference)
    baseline = strategies.baseline()
    out = []
    for strategy, placement in ((reference, Placement(gpus, len(gpus))), (baseline, Placement(gpus[:1], 1))):
        for batch in (256, 1024, 2048):
            case = Case.make(strategy, "amp-bf16", args.model, placement, batch, "eager", settings())
            out += [lever.case for lever in levers(case, "execution") if lever.case.execution == "compile"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpus", default="0")
    parser.add_argument("--side-gpus", default="0,1")
    parser.add_argument("--turns", type=int, default=3)
    parser.add_argument("--strategies", default="single")
    parser.add_argument("--model", default="resnet18-small")
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    from bench.run.precompile import SideCompiles

    work = Path(tempfile.mkdtemp(prefix="side-check-"))
    turns = []
    for turn in range(args.turns):
        alone = measure(args, work / f"alone-{turn}.json")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(work / f"cache-{turn}")
        side = SideCompiles()
        side.submit(side_cases(args))
        time.sleep(5)  # past their imports: compiling
        beside = measure(args, work / f"beside-{turn}.json")
        running = sum(i.state == "running" for i in side.items)
        side.close()
        os.environ.pop("TORCHINDUCTOR_CACHE_DIR")
        turns.append({"alone": alone, "beside": beside, "side_running_at_end": running, "side": side.summary()})
        # Written after every turn: a call cut short keeps the turns it finished.
        Path(args.out).write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "turns": turns}, indent=1))
        for how in ("alone", "beside"):
            print(f"turn {turn + 1} {how}: " + ", ".join(
                f"{name} {r.get('items_per_s') or 0:.0f} ({r.get('items_per_s_p10') or 0:.0f}-"
                f"{r.get('items_per_s_p90') or 0:.0f})" for name, r in turns[-1][how]["rows"].items()), flush=True)


if __name__ == "__main__":
    main()
