"""Where the counting step's time goes on this machine (bench/counters.py): the profiler's
start, the profiled step, its stop and the parse, for a few strategies; the raw records'
parse beside it for comparison. `PYTHONPATH=. python scripts/probe_counting.py [OUT.json]` on a GPU host."""
import gc
import json
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile

from bench.case import Case, Settings
from bench.worker import Job, build_step, configure_backends, reset_between_cases
from strategies.base import Placement

out = []
on_gpu = torch.cuda.is_available()
plan = (("single", (0,)), ("allreduce-scratch", (0, 1)), ("dp-manual", (0, 1))) if on_gpu else (("single", ()),)
for strategy, gpus in plan:
    case = Case.make(strategy, "fp32", "resnet18-small", Placement(gpus, max(len(gpus), 1)), 256 if on_gpu else 4, "eager",
                     Settings(warmup=3, steps=3, trials=1)).spec()
    configure_backends(case)
    step, run = build_step(Job({"launcher": "local", "gpus": list(gpus)}, 0, 1, 0), case)
    for _ in range(5):
        run()
    if on_gpu:
        torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    for attempt in range(3):
        gc.disable()
        t0 = time.perf_counter()
        prof = profile(activities=activities, profile_memory=True, record_shapes=True)
        prof.__enter__()
        t1 = time.perf_counter()
        run()
        t2 = time.perf_counter()
        prof.__exit__(None, None, None)
        t3 = time.perf_counter()
        events = prof.events()
        t4 = time.perf_counter()
        raw = prof.profiler.kineto_results.events()
        n_raw = sum(1 for e in raw if e.name().startswith("aten::"))
        t5 = time.perf_counter()
        gc.enable()
        row = {"strategy": strategy, "attempt": attempt, "enter_s": t1 - t0, "step_s": t2 - t1, "exit_s": t3 - t2,
               "parse_s": t4 - t3, "raw_parse_s": t5 - t4, "events": len(events), "raw_events": len(raw),
               "raw_aten": n_raw}
        out.append(row)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}), flush=True)
    del step, run
    reset_between_cases(case)
json.dump(out, open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout)
