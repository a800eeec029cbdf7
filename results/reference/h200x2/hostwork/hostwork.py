"""Per rank of each traced case: operators and host time per profiled step (labelled trace)."""
import gzip, json, sys
from pathlib import Path
for folder in sorted(Path(sys.argv[1]).glob("*/*")):
    for trace in sorted(folder.glob("rank*.pt.trace.json.gz")):
        if "timeline" in trace.name:
            continue
        ev = json.load(gzip.open(trace))["traceEvents"]
        steps = [e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
        tid = steps[0]["tid"]
        ops = sum(1 for e in ev if e.get("cat") == "cpu_op" and e.get("tid") == tid)
        rt = sum(1 for e in ev if e.get("cat") == "cuda_runtime" and e.get("tid") == tid)
        def ms(name): return [round(e["dur"] / 1e3, 2) for e in ev if e.get("name") == name and e.get("cat") == "user_annotation"]
        print(f"{folder.name} {trace.name.split('.')[0]}: {len(steps)} steps, {ops // len(steps)} operators and "
              f"{rt // len(steps)} runtime calls a step on the main thread; host ms forward {ms('parabench.forward')} "
              f"backward {ms('parabench.backward')} optimizer {ms('parabench.optimizer')}; steps {[round(s['dur'] / 1e3, 2) for s in steps]}")
