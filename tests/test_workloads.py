"""A workload from outside the repository, end to end on the CPU: the recipe of
docs/extending.md ("Adding a workload") followed by a test, a factory in a file of its own
found through PYTHONPATH, trained by the sharded and unsharded strategies alike."""
import os
import sys

import pytest

from tests.conftest import REPO, rows_of, run_cli

TOY = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.linear(x))


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3, padding=1)
        self.blocks = nn.Sequential(Block(64 * 4), Block(64 * 4))
        self.head = nn.Linear(64 * 4, 5)

    def forward(self, x):
        return self.head(self.blocks(self.stem(x).flatten(1)))


def smoothed(output, targets):
    return nn.functional.cross_entropy(output, targets, label_smoothing=0.1)


def build():
    """A toy: a stem, two residual blocks and a head on 1x8x8 images, 5 classes."""
    return {"model": Toy(), "input_shape": (1, 8, 8), "num_classes": 5, "loss": smoothed}
'''

TINY = ["--gpus", "", "--batch-sizes", "2", "--warmup", "1", "--steps", "2", "--trials", "1"]


@pytest.fixture
def toy(tmp_path):
    folder = tmp_path / "own"
    folder.mkdir()
    (folder / "toymodels.py").write_text(TOY)
    return folder


def env_with(folder) -> dict:
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(folder)]), "PARABENCH_MXNET_PYTHON": sys.executable}


@pytest.mark.slow
def test_a_factory_outside_the_repository_runs_under_every_kind_of_strategy(toy, tmp_path):
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single,ddp,fsdp2,zero1,mxnet-gluon",
                   "--models", "toymodels:build,bench.workloads.vit:tiny", *TINY, "--out", str(out), env=env_with(toy))
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    by = {(r["model"], r["strategy"]): r for r in rows}
    assert len(rows) == 10
    toy_params = 4 * 9 + 4 + 2 * (256 * 256 + 256) + 256 * 5 + 5
    for (model, strategy), r in by.items():
        if strategy == "mxnet-gluon":  # skipped in the parent, with the reason, not an error
            assert r["status"] == "skipped" and r["reason"] == "MXNet has only the reference workload " \
                                                               "(resnet18-small, resnet18)"
            continue
        assert r["status"] == "ok", (model, strategy, r["reason"])
        assert r["flops_per_item"] > 0 and r["tflops"] > 0
        if model == "toymodels:build":
            assert r["parameters"] == toy_params and r["workload_source"] == "module toymodels"
            # Linear layers: 2 x (2 x 256x256 + 256x5) per image forward, x3 with backward; the stem's
            # convolution x2 (no gradient for the input images).
            assert r["flops_per_item"] == 3 * 2 * (2 * 256 * 256 + 256 * 5) + 2 * 2 * (64 * 4 * 9)
        else:
            assert r["parameters"] == 114_250 and r["workload_source"] == "module bench.workloads.vit"
    assert all(r["workload_source"] for r in rows)  # skipped rows too


@pytest.mark.slow  # two compiled sweeps on the CPU: make test-slow, which CI runs too
def test_a_compiled_row_says_whether_its_graphs_came_from_inductors_cache(toy, tmp_path):
    """Compiles are most of a cold run's time, and inductor's cache persists across runs: a compiled
    row names the cache and how many of its graphs came from it. The same sweep twice with one
    cache folder: the first compiles every graph afresh, the second takes every one from the cache."""
    cache = tmp_path / "inductor-cache"
    said = []
    for run in ("cold", "warm"):
        out = tmp_path / f"{run}.json"
        proc = run_cli("run", "--strategies", "single", "--models", "toymodels:build", "--execution", "eager,compile",
                       *TINY, "--out", str(out), env={**env_with(toy), "TORCHINDUCTOR_CACHE_DIR": str(cache)})
        assert proc.returncode == 0, proc.stderr
        rows = {r["execution"]: r for r in rows_of(out)}
        assert rows["eager"]["compile_cache"] in ("", None), rows["eager"]["compile_cache"]
        said.append(rows["compile"]["compile_cache"])
    graphs = int(said[0].split(" of ")[1].split()[0])
    assert graphs >= 2, said  # a forward and a backward graph at least
    assert said[0] == f"0 of {graphs} graphs from the cache in {cache}, {graphs} compiled afresh", said
    assert said[1] == f"{graphs} of {graphs} graphs from the cache in {cache}", said
    assert (rows["compile"]["graphs_from_cache"], rows["compile"]["graphs_compiled"]) == (graphs, 0)


def test_a_compiled_rows_graph_counts_say_what_inductors_cache_did():
    """Hits, graphs compiled into the cache and outside it (a graph it declines, or the cache off), and
    a case whose graphs dynamo made with no count at all: unknown, not 0."""
    from bench.engine.training import compile_cache_columns

    both = compile_cache_columns(1, 1, 2, traced=3)
    assert (both["graphs_from_cache"], both["graphs_compiled"]) == (1, 3)
    assert both["compile_cache"].endswith(", 1 compiled afresh, 2 compiled outside the cache"), both
    off = compile_cache_columns(0, 0, 0, traced=1)
    assert off["graphs_from_cache"] is None and off["graphs_compiled"] is None and "no count" in off["compile_cache"]
    held = compile_cache_columns(0, 0, 0, traced=0)
    assert held["graphs_compiled"] == 0 and "held them from an earlier case" in held["compile_cache"]


def test_the_same_step_in_every_strategy_for_a_users_workload(toy, monkeypatch):
    """Parity holds for any workload, its own loss included (label smoothing here)."""
    from bench.checks.parity import CPU_TOLERANCE, all_close, parity_case, reference_parameters, run_parity

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(toy)]))
    monkeypatch.syspath_prepend(str(toy))
    reference = reference_parameters("toymodels:build", 4, shards=2)
    strategies = ("ddp", "fsdp2")  # one worker runs both
    found = run_parity([parity_case(s, "toymodels:build", 2, (), 2) for s in strategies])
    for strategy, params in zip(strategies, found):
        assert all_close(params, reference, **CPU_TOLERANCE), strategy


def test_a_factory_that_fails_stops_the_sweep_before_it_starts(toy, tmp_path):
    (toy / "broken.py").write_text("def build():\n    raise RuntimeError('no weights here')\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single", "--models", "broken:build", *TINY, "--out", str(out),
                   env=env_with(toy))
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip() == ("parabench: error: model 'broken:build': its factory failed: "
                                   "RuntimeError: no weights here (--models)")


def test_list_shows_workloads_with_parameters_and_flops(toy):
    proc = run_cli("list", "--models", env=env_with(toy))
    assert proc.returncode == 0, proc.stderr
    assert "vit-large" in proc.stdout and "304.33 M parameters" in proc.stdout and "369.02 GFLOP" in proc.stdout
    assert "timm:NAME" in proc.stdout and "package.module:factory" in proc.stdout
    assert "Strategies" not in proc.stdout
    proc = run_cli("list", "--models", "toymodels:build", env=env_with(toy))
    assert proc.returncode == 0, proc.stderr
    assert "toymodels:build" in proc.stdout and "0.13 M parameters" in proc.stdout and "module toymodels" in proc.stdout


@pytest.mark.parametrize("how", ["torch.set_default_dtype(torch.float64)\n    net = nn.Linear(64, 5)",
                                 "net = nn.Linear(64, 5).double()"])
def test_a_factory_whose_model_trains_in_float64_is_refused_before_anything_runs(toy, tmp_path, how):
    """A factory that set torch's default dtype to float64 gave ok rows recorded as fp32 while every
    forward ran in float64. A model whose parameters are not float32 is refused in one line, and a
    factory's default dtype never reaches the data or what is built after it."""
    (toy / "wide.py").write_text(f"import torch\nfrom torch import nn\n\n\ndef build():\n    {how}\n"
                                 "    return {'model': nn.Sequential(nn.Flatten(), net), 'input_shape': (1, 8, 8)}\n")
    out = tmp_path / "r.json"
    proc = run_cli("run", "--strategies", "single", "--models", "wide:build", *TINY, "--out", str(out),
                   env=env_with(toy))
    assert proc.returncode == 2 and not out.exists(), proc.stderr
    assert proc.stderr.strip() == ("parabench: error: model 'wide:build' has float64 parameters: the precisions "
                                   "(fp32, amp-*) train float32 ones; build it in float32 (do not change torch's "
                                   "default dtype or call .double() in the factory) (--models)")
