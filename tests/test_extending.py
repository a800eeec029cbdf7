"""The recipes of docs/extending.md, tried from the tests themselves: a strategy added in a
file of its own runs in a sweep and shows in `list`, with nothing else edited."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TOY_STRATEGY = textwrap.dedent('''
    """A toy strategy: one device, its own optimiser step written out."""
    from strategies import register
    from strategies.base import Strategy, TrainStep


    @register
    class Toy(Strategy):
        name = "toy"
        summary = "one device, forward/backward/update written out (docs/extending.md)"
        order, colour = 90, "tab:pink"
        max_replicas = 1

        def build(self, model, ctx):
            from bench.engine import training

            device = ctx.device()
            model = training.model_to(model, device, ctx)
            optimizer = training.make_optimizer(model.parameters(), ctx)
            runtime = ctx.precision.runtime(device.type)

            def place(inputs, targets):
                return training.inputs_to(inputs, device, ctx), targets.to(device)

            return TrainStep(model, [device], place, training.standard_step(model, optimizer, runtime, ctx.criterion), optimizer)
''')


def test_a_strategy_added_in_its_own_file_runs_in_a_sweep(tmp_path):
    folder = tmp_path / "my_strategies"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_STRATEGY)
    env = {**os.environ, "PARABENCH_STRATEGY_PATH": str(folder)}
    listing = subprocess.run([sys.executable, "-m", "bench", "list", "--gpus", ""], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0, listing.stderr
    assert "toy" in listing.stdout and "written out (docs/extending.md)" in listing.stdout
    out = tmp_path / "toy.json"
    run = subprocess.run([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "single,toy",
                          "--batch-sizes", "2", "--warmup", "1", "--steps", "2", "--trials", "1", "--out", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    rows = json.loads(out.read_text())["rows"]
    by_strategy = {r["strategy"]: r for r in rows}
    assert by_strategy["toy"]["status"] == "ok" and by_strategy["toy"]["img_per_s"] > 0
    assert by_strategy["single"]["status"] == "ok"
