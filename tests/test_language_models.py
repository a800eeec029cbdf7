"""Language models as workloads (bench/workloads/gpt.py, data.py): token ids with next-token targets,
throughput in tokens, FLOPs per token against PaLM's count, AdamW (and ZeRO-1 sharding its two
moments), channels_last refused before anything runs, and the same training step in every
strategy that runs on the CPU. The CPU tests' language model is `gpt-tiny` (2 layers, width 64,
vocabulary 512, 64 tokens)."""
import json
import os
import subprocess
import sys

import pytest

from bench import workloads
from tests.conftest import REPO, cuda_gpus, rows_of, run_cli

MODEL = "gpt-tiny"
TINY = ["--gpus", "", "--warmup", "1", "--steps", "2", "--trials", "1"]


def test_a_language_model_trains_on_token_ids_with_the_next_token_as_target():
    data = workloads.get_workload(MODEL).data
    inputs, targets = workloads.get_workload(MODEL).synthetic_batch(70, seed=3)
    assert (data.kind, data.unit.name, data.items_per_sample, data.spatial) == ("tokens", "tokens", 64, False)
    assert inputs.shape == targets.shape == (70, 64) and str(inputs.dtype) == "torch.int64"
    assert 0 <= int(inputs.min()) and int(inputs.max()) < 512
    # Each position's target is the next token of the same sequence.
    assert bool((targets[:, :-1] == inputs[:, 1:]).all())
    # Any slice is that slice of a larger batch (each rank makes only its own rows).
    part = workloads.get_workload(MODEL).synthetic_rows(60, 70, seed=3)
    assert bool((part[0] == inputs[60:70]).all()) and bool((part[1] == targets[60:70]).all())


@pytest.mark.parametrize("name, layers, width", [("gpt2-124m", 12, 768), ("gpt2-350m", 24, 1024),
                                                 ("gpt2-1.5b", 48, 1600), (MODEL, 2, 64)])
def test_flops_per_token_from_the_counter_agree_with_palms_count(name, layers, width):
    """6N + 12 L T d per token (PaLM, appendix B; nanoGPT's estimate_mfu), N the parameters without
    the position embedding; the counter leaves out biases and norms, which 6N counts: within 0.2%
    for GPT-2's sizes, 2% for the tiny one (whose biases and norms are a larger share)."""
    from bench.workloads.facts import facts

    found = facts(name)
    seq_len = workloads.get_workload(name).data.seq_len
    n = found["parameters"] - seq_len * width
    palm = 6 * n + 12 * layers * seq_len * width
    assert found["flops_per_item"] == pytest.approx(palm, rel=0.002 if name != MODEL else 0.02)
    assert (found["unit"], found["items_per_sample"]) == ("tokens", seq_len)


def test_gpt2_parameters_are_nanogpts():
    """nanoGPT's counts with its padded vocabulary: 124.47 M for gpt2-124m (123.69 M without the
    position embedding, as its model.py prints), tied embeddings counted once."""
    from bench.workloads.facts import parameters

    assert parameters("gpt2-124m") == 124_475_904
    assert parameters("gpt2-124m") - 1024 * 768 == 123_689_472


def test_a_sweep_of_a_language_model_counts_tokens_and_its_answer_says_tokens_per_second(tmp_path):
    out = tmp_path / "lm.json"
    proc = run_cli("run", "--models", MODEL, "--strategies", "single,ddp", "--batch-sizes", "2", *TINY,
                   "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "tokens/s" in proc.stderr and "img" not in proc.stderr
    rows = [r for r in rows_of(out) if r["status"] == "ok"]
    assert len(rows) == 2
    for r in rows:
        assert (r["unit"], r["items_per_sample"], r["optimizer"]) == ("tokens", 64, "adamw")
        # A step trains the global batch's sequences times their tokens.
        assert r["items_per_s"] == pytest.approx(r["global_batch"] * 64 * 1000 / r["step_ms_p50"], rel=1e-6)
        assert r["tflops"] == pytest.approx(r["flops_per_item"] * r["items_per_s"] / 1e12)
        assert r["channels_last"] is False
    answer = run_cli("answer", str(out))
    assert answer.returncode == 0, answer.stderr
    assert "tokens/s" in answer.stdout and "img" not in answer.stdout and "image" not in answer.stdout
    report = run_cli("report", str(out), "--out", str(tmp_path / "plots"))
    assert report.returncode == 0, report.stderr
    for path in [*(tmp_path / "plots").rglob("*.md"), *(tmp_path / "plots").rglob("*.csv")]:
        text = path.read_text()
        assert "img" not in text and "image" not in text.lower(), (path.name, text[:300])
    listed = run_cli("list", "--models", MODEL)
    assert "per token" in listed.stdout and "tokens/s" in listed.stdout and "img" not in listed.stdout


def test_channels_last_is_refused_for_a_language_model_before_anything_runs(tmp_path):
    out = tmp_path / "lm.json"
    proc = run_cli("run", "--models", MODEL, "--strategies", "single", "--channels-last", *TINY, "--out", str(out))
    assert proc.returncode == 2 and not out.exists()
    assert proc.stderr.strip() == ("parabench: error: --channels-last lays out 4-D image batches; gpt-tiny takes "
                                   "sequences of 64 tokens, vocabulary 512: leave --channels-last out (or give its "
                                   "models a run of their own)")
    fit = run_cli("fit", "--models", MODEL, "--gpus", "", "--memory-budget", "100", "--channels-last",
                  "--out", str(tmp_path / "x.fit.json"))
    assert fit.returncode == 2 and "--channels-last lays out 4-D image batches" in fit.stderr


def test_a_case_resolves_the_layout_and_the_optimiser_from_its_workload():
    """On a GPU (no GPU needed to resolve): images default to channels_last, a language model has no
    layout to choose; images train with SGD, a language model with AdamW; a case that asks for the
    layout on a language model anyway is declined with why before it is measured."""
    from bench.cases.case import Case, execution_unavailable_reason, settings
    from bench.core.placement import Placement

    gpu = Placement((0,), 1)
    image = Case.make("single", "amp-bf16", "resnet18-small", gpu, 256, "eager", settings())
    text = Case.make("single", "amp-bf16", "gpt2-124m", gpu, 8, "eager", settings())
    assert (image.channels_last, image.optimizer) == (True, "sgd") and image.variant() == "channels_last"
    assert (text.channels_last, text.optimizer) == (False, "adamw") and text.variant() == ""
    cpu = Case.make("single", "fp32", "resnet18-small", Placement((), 1), 4, "eager", settings())
    assert cpu.channels_last is False
    asked = Case.make("single", "amp-bf16", "gpt2-124m", gpu, 8, "eager", settings(optimizer="sgd"))
    assert asked.optimizer == "sgd" and asked.variant() == "optimizer=sgd"
    fused = Case.make("single", "amp-bf16", "gpt2-124m", gpu, 8, "eager", settings(optimizer_impl="fused"))
    assert fused.variant() == "adamw=fused"
    import dataclasses

    forced = dataclasses.replace(text, knobs=tuple((k, True if k == "channels_last" else v) for k, v in text.knobs))
    assert "channels_last lays out 4-D image batches; gpt2-124m takes" in execution_unavailable_reason(forced)


STATE = r"""
import json, sys
from bench.cases.case import Case, settings
from bench.core.placement import Placement
from bench.fit import worker as fit_worker
from bench.core.launch_spec import LaunchSpec
from bench.engine.launchers import FAKE_WORLD
from bench.run.worker import Job, configure_backends
from bench.workloads import get_workload

job = Job(LaunchSpec.local(FAKE_WORLD.name, (), 2), 0, 2, 0, launcher=FAKE_WORLD)
job.launcher.init(job.spec, 0, 2, 0)
out = {}
for strategy in ("ddp", "zero1", "fsdp2"):
    case = Case.make(strategy, "fp32", sys.argv[1], Placement((), 2), 2, "eager",
                     settings(warmup=1, steps=1, trials=1)).spec()
    configure_backends(case)
    step, run = fit_worker.build(job, case, get_workload(sys.argv[1]).build(seed=0))
    run()
    run()
    inner = getattr(step.optimizer, "optim", step.optimizer)  # ZeroRedundancyOptimizer's own
    out[strategy] = {**fit_worker.state_bytes(step), "optimizer": type(inner).__name__}
print(json.dumps(out))
"""


def test_zero1_and_fsdp2_shard_adamws_two_moments(tmp_path):
    """Rank 0 of 2 (bench fit's fake world), after two AdamW steps of gpt-tiny: DDP holds both
    moments whole (two fp32 copies of the parameters, and a step count per tensor); ZeRO-1 holds its
    partition of them (whole tensors, so about half); FSDP2 half of everything."""
    script = tmp_path / "state.py"
    script.write_text(STATE)
    proc = subprocess.run([sys.executable, str(script), MODEL], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    state = json.loads(proc.stdout.strip().splitlines()[-1])
    whole = state["ddp"]["parameter_bytes"]
    assert {s["optimizer"] for s in state.values()} == {"AdamW"}
    assert 2 * whole <= state["ddp"]["optimizer_state_bytes"] < 2 * whole + 4 * 100  # two moments and the steps
    assert 0.3 * 2 * whole < state["zero1"]["optimizer_state_bytes"] < 0.7 * 2 * whole
    assert state["zero1"]["parameter_bytes"] == whole
    assert whole / 2 <= state["fsdp2"]["parameter_bytes"] < 0.6 * whole
    assert whole <= state["fsdp2"]["optimizer_state_bytes"] < 1.2 * whole


def test_the_model_state_a_strategy_shards_counts_what_the_optimiser_holds():
    import strategies

    params = 1_000
    assert strategies.get("zero1").sharded_bytes(params, "sgd") == 4_000
    assert strategies.get("zero1").sharded_bytes(params, "adamw") == 8_000
    assert strategies.get("fsdp2").sharded_bytes(params, "adamw") == 16_000
    assert strategies.get("ddp").sharded_bytes(params, "adamw") == 0


@pytest.fixture(scope="module")
def reference():
    from bench.checks.parity import reference_parameters

    return {n: reference_parameters(MODEL, 4, shards=n) for n in (1, 2)}


CPU_STRATEGIES = [("single", 1, {}), ("allreduce-scratch", 2, {}), ("ddp", 2, {}), ("zero1", 2, {}),
                  ("fsdp2", 2, {}), ("fsdp2", 2, {"reshard_after_forward": False}), ("ddp", 2, {"launcher": "spawn"})]


@pytest.fixture(scope="module")
def cpu_parameters():
    from bench.checks.parity import parameters_by_worker, parity_case

    return parameters_by_worker([parity_case(name, MODEL, 4 // n, (), n, options) for name, n, options in
                                 CPU_STRATEGIES])


@pytest.mark.parametrize("index", range(len(CPU_STRATEGIES)),
                         ids=["-".join([n, *(f"{k}={v}" for k, v in o.items())]) for n, _, o in CPU_STRATEGIES])
def test_every_strategy_takes_the_same_adamw_step_on_a_language_model(index, cpu_parameters, reference):
    """fp32 on the CPU, rtol 1e-4 / atol 1e-5 (bench/checks/parity.py's CPU_TOLERANCE): one AdamW
    step of the global batch of 4 sequences in each strategy's shards equals the reference's, which
    averages the shards' gradients; and the step moved every parameter (AdamW's first step moves each
    by about its learning rate)."""
    import torch

    from bench.checks.parity import CPU_TOLERANCE, all_close, max_abs_difference

    found = cpu_parameters[index]
    if isinstance(found, Exception):
        raise found
    expected = reference[CPU_STRATEGIES[index][1]]
    assert all_close(found, expected, **CPU_TOLERANCE), f"max |diff| {max_abs_difference(found, expected):.3g}"
    initial = workloads.get_workload(MODEL).build(seed=0).state_dict()
    moved = min((found[k] - initial[k]).abs().max().item() for k in found if k in initial)
    assert moved > 1e-4  # every tensor took a step (the wrong optimiser, or none, would not match anyway)
    assert torch.isfinite(torch.cat([p.flatten() for p in found.values()])).all()


HF_RECIPE = '''
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel


class Logits(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


def gpt2():
    """Hugging Face's GPT2LMHeadModel at test size, random weights."""
    config = GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    return {"model": Logits(GPT2LMHeadModel(config)), "vocab_size": 128, "seq_len": 32,
            "blocks": ("GPT2Block",)}
'''


def needs_transformers():
    """transformers, or the test says what is missing (CI, which installs it, fails instead)."""
    import importlib.util

    if importlib.util.find_spec("transformers") is None:
        message = "transformers is not installed here: make setup-models installs it (docs/extending.md's recipe)"
        if os.environ.get("PARABENCH_REQUIRE_MODEL_SOURCES") == "1":
            raise AssertionError("PARABENCH_REQUIRE_MODEL_SOURCES is set but " + message)
        pytest.skip(message)


def test_a_hugging_face_gpt2_of_the_users_own_runs_as_the_recipe_says(tmp_path):
    """docs/extending.md's recipe at test size: GPT2LMHeadModel from a GPT2Config (no download) behind
    a module that returns its logits, declared with its vocabulary and sequence length: every kind of
    strategy trains it, its rows count tokens, and ddp's step is the reference's."""
    needs_transformers()
    folder = tmp_path / "own"
    folder.mkdir()
    (folder / "mylms.py").write_text(HF_RECIPE)
    env = {"PYTHONPATH": os.pathsep.join([str(REPO), str(folder)])}
    out = tmp_path / "hf.json"
    proc = run_cli("run", "--models", "mylms:gpt2", "--strategies", "single,ddp,fsdp2", "--batch-sizes", "2", *TINY,
                   "--out", str(out), env=env)
    assert proc.returncode == 0, proc.stderr
    rows = rows_of(out)
    assert [r["status"] for r in rows] == ["ok"] * 3, [r["reason"] for r in rows]
    for r in rows:
        assert (r["unit"], r["items_per_sample"], r["optimizer"], r["workload_source"]) == \
            ("tokens", 32, "adamw", "module mylms")
    listed = run_cli("list", "--models", "mylms:gpt2", env=env)
    assert "sequences of 32 tokens, vocabulary 128" in listed.stdout, listed.stdout + listed.stderr


@pytest.mark.gpu
@pytest.mark.skipif(cuda_gpus() < 1, reason="needs a CUDA GPU")
@pytest.mark.parametrize("strategy, execution, kernels", [
    ("single", "eager", "foreach"), ("single", "cuda-graph", "foreach"), ("single", "cuda-graph", "fused"),
    ("single", "compile", "fused"), ("dp", "eager", "foreach"), ("ddp", "eager", "fused"), ("fsdp2", "eager", "fused"),
])
def test_gpu_executions_take_the_same_adamw_step_in_float64(strategy, execution, kernels):
    """On one GPU, gpt-tiny held in float64 (bench/checks/parity.py: rounding's knife edges gone): each
    strategy and execution lands within 1e-6 of each tensor's own update of the reference's AdamW step
    (a CUDA graph's AdamW keeps its step count on the GPU and is put back before its replays)."""
    from bench.checks.parity import FLOAT64_UPDATE_FRACTION, reference_parameters, strategy_parameters, update_share

    reference = reference_parameters(MODEL, 4, shards=1, device="cuda:0", dtype="float64")
    initial = reference_parameters(MODEL, 4, shards=1, steps=0, dtype="float64")
    params = strategy_parameters(strategy, MODEL, 4, (0,), 1, optimizer_impl=kernels, execution=execution,
                                 dtype="float64")
    worst, share = update_share(params, reference, initial)
    assert share <= FLOAT64_UPDATE_FRACTION, f"{strategy} {execution} adamw={kernels}: {worst} {share:.3g}"


def test_a_results_file_written_before_units_replays_to_the_same_answer(tmp_path):
    """The committed 2-H200 search (written with `img_per_s` and `sgd_impl`) answers today as parabench
    9438c55 answered it (tests/fixtures/legacy/: its `answer --json`, made by that commit): the same
    pick, figures, intervals and levers in every cell; the keys renamed (img_per_s -> items_per_s), the
    unit and optimiser added. `compare` matches rows across the two schemas."""
    from bench.cases import results
    from bench.report import compare

    legacy = REPO / "results/reference/h200x2/answer/search-1.json"
    assert '"img_per_s"' in legacy.read_text() and '"sgd_impl"' in legacy.read_text()
    before = json.loads((REPO / "tests/fixtures/legacy/answer-h200x2-search-1.json").read_text())
    proc = run_cli("answer", "--json", str(legacy.relative_to(REPO)))
    assert proc.returncode == 0, proc.stderr
    now = json.loads(proc.stdout)

    def renamed(value):
        if isinstance(value, dict):
            return {k.replace("img_per_s", "items_per_s"): renamed(v) for k, v in value.items()}
        return [renamed(v) for v in value] if isinstance(value, list) else value

    assert len(now) == len(before) == 6
    for old, new in zip(renamed(before), now):
        assert (new.pop("unit"), new.pop("optimizer")) == ("images", "sgd")
        assert new.pop("no_speedup") == ""  # added since: why a speed-up is missing (none is here)
        assert new == old
    # A row of today's schema (written here) and the same row as the legacy file holds it: one case.
    rows = results.load(legacy)
    results.write(tmp_path / "today.json", rows)
    verdicts = compare.compare(rows, results.load(tmp_path / "today.json"), compare.Thresholds())
    measured = [v for v in verdicts if v["verdict"] != "not compared"]  # skipped in both: mxnet-gluon on Hopper
    assert len(measured) == sum(r["status"] == "ok" for r in rows) == 36
    assert all(v["verdict"] == "pass" and v["rate_change"] == 0.0 for v in measured), measured[:2]


@pytest.mark.slow
@pytest.mark.parametrize("strategy, replicas", [("single", 1), ("ddp", 2), ("fsdp2", 2)])
def test_a_compiled_step_of_a_language_model_is_the_step_in_float64(strategy, replicas):
    """On the CPU, gpt-tiny in float64 under --execution compile (the model and its loss compiled
    together, training.LossOf): within 1e-6 of each tensor's own update of the reference's AdamW step."""
    from bench.checks.parity import FLOAT64_UPDATE_FRACTION, reference_parameters, strategy_parameters, update_share

    reference = reference_parameters(MODEL, 4, shards=replicas, dtype="float64")
    initial = reference_parameters(MODEL, 4, shards=replicas, steps=0, dtype="float64")
    params = strategy_parameters(strategy, MODEL, 4 // replicas, (), replicas, execution="compile", dtype="float64",
                                 timeout_s=600)
    worst, share = update_share(params, reference, initial)
    assert share <= FLOAT64_UPDATE_FRACTION, f"{strategy} x{replicas} compile: {worst} {share:.3g}"


def test_a_language_model_that_returns_no_logits_tensor_is_refused_naming_the_fix(tmp_path):
    """A Hugging Face model returns an output object, not logits: refused before anything runs, in one
    line that says to return its .logits."""
    (tmp_path / "objlm.py").write_text(
        "import torch\nfrom torch import nn\n\n\nclass LM(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.emb = nn.Embedding(16, 4)\n\n    def forward(self, ids):\n"
        "        return {'logits': self.emb(ids)}\n\n\ndef build():\n"
        "    return {'model': LM(), 'vocab_size': 16, 'seq_len': 8}\n")
    proc = run_cli("run", "--models", "objlm:build", "--strategies", "single", *TINY, "--out", str(tmp_path / "r.json"),
                   env={"PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path)])})
    assert proc.returncode == 2 and not (tmp_path / "r.json").exists()
    line, = proc.stderr.strip().splitlines()
    assert "must return logits of shape (batch, 8, vocabulary)" in line and "return its .logits" in line, line


def test_the_achieved_flops_section_counts_per_token_for_a_language_model():
    import pandas as pd

    from bench.report.sections import achieved_vs_peak

    frame = pd.DataFrame([{"status": "ok", "gpu_name": "NVIDIA H200", "tflops": 440.0, "n_gpus": 1,
                           "strategy": "single", "model": "gpt2-124m", "precision": "amp-bf16", "batch_per_gpu": 32,
                           "variant": "", "unit": "tokens"}])
    text = "\n".join(achieved_vs_peak(frame, {"NVIDIA H200": {"file": "h200.probe.json", "bf16_matmul_tflops": 790.0}}))
    assert "Training FLOPs per token come from" in text and "image" not in text, text
