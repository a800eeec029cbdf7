"""The recipes of docs/extending.md, tried from the tests themselves: a strategy added in a
file of its own runs in a sweep and shows in `list`, with nothing else edited."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import run_cli

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

            step = training.standard_step(model, optimizer, runtime, ctx.criterion)
            return TrainStep(model, [device], place, step, optimizer)
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
    assert by_strategy["toy"]["status"] == "ok" and by_strategy["toy"]["items_per_s"] > 0
    assert by_strategy["single"]["status"] == "ok"


def _recipe(heading_word: str) -> str:
    """The Python block of docs/extending.md whose class is named `heading_word`: the test runs
    the recipe as the document prints it."""
    text = (REPO / "docs" / "extending.md").read_text()
    blocks = text.split("```python\n")[1:]
    return next(b.split("```")[0] for b in blocks if f"class {heading_word}(" in b)


@pytest.mark.slow  # several sweeps or fits: make test-slow, which CI runs too
def test_a_strategy_that_shards_the_optimiser_is_fitted_and_reported_from_its_file_alone(tmp_path):
    """The recipe's MyZero, in a folder of its own and nowhere else: `bench fit` (which fits
    every strategy that declares it shards) measures it, its optimiser state at n = 2 is rank 0's
    share, and the report's memory section and fit section say what it shards and sends."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "myzero.py").write_text(_recipe("MyZero"))
    fixtures = REPO / "tests" / "fixtures" / "fit"
    env = {"PARABENCH_STRATEGY_PATH": str(folder), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(fixtures)])}
    out = tmp_path / "results" / "w.fit.json"
    fit = run_cli("fit", "--gpus", "", "--models", "tinynets:widenet", "--memory-budget", "16", "--devices", "1,2",
                  "--first-batches", "2,8", "--precisions", "fp32", "--out", str(out), env=env)
    assert fit.returncode == 0, fit.stderr[-3000:]
    doc = json.loads(out.read_text())
    found = {(o["strategy"], o["devices"]): o for o in doc["outcomes"]}
    assert {("myzero", 1), ("myzero", 2), ("ddp", 2)} <= set(found)
    assert found[("myzero", 2)]["largest_fit"] and "myzero fits" in fit.stdout

    def optimiser_state(strategy):
        return next(r["optimizer_state_bytes"] for r in doc["rows"]
                    if (r["strategy"], r["devices"], r["status"]) == (strategy, 2, "ok"))

    # Rank 0's share of ZeroRedundancyOptimizer's partition (greedy by tensor: the wide head's weight
    # makes it uneven), as the built-in zero1 holds it, and less than DDP's whole momentum.
    assert 0 < optimiser_state("myzero") == optimiser_state("zero1") < optimiser_state("ddp")

    # A run's rows beside the fit file, as `bench run` writes them: DDP and MyZero on 2 ranks.
    from bench.cases import results

    common = {"precision": "fp32", "model": "tinynets:widenet", "device": "cpu", "gpus": "", "gpu_name": "cpu",
              "cpu": "x", "n_gpus": 0, "n_replicas": 2, "batch_per_gpu": 8, "global_batch": 16, "status": "ok",
              "parameters": 1_000_000, "channels_last": False, "execution": "eager", "options": "{}",
              "date": "2026-11-26T00:00:00+00:00", "tflops": 0.1}
    rows = [{**common, "strategy": s, "items_per_s": ips, "items_per_s_p10": ips * 0.95, "items_per_s_p90": ips * 1.05,
             "step_ms_p50": 16e3 / ips, "step_ms_p10": 16e3 / ips * 0.95, "step_ms_p90": 16e3 / ips * 1.05,
             "peak_alloc_mib": peak} for s, ips, peak in (("ddp", 100.0, 40.0), ("myzero", 90.0, 38.2))]
    results.write(tmp_path / "results" / "run.json", rows)
    report = run_cli("report", str(tmp_path / "results" / "run.json"), "--out", str(tmp_path / "plots"), env=env)
    assert report.returncode == 0, report.stderr[-3000:]
    text = (tmp_path / "plots" / "REPORT.md").read_text()
    # 1 M parameters: 3.8 MiB of fp32 momentum, sharded; the all-reduce and broadcast of 3.8 MiB each.
    assert ("myzero shards the optimiser state (3.8 MiB) and sends per step: all-reduce of the gradients (3.8 MiB), "
            "broadcast of the parameters (3.8 MiB)") in text
    assert "| myzero (CPU x2) |" in text.replace("`", "")
    assert "myzero fits" in text and "w.fit.json" in text
    listing = run_cli("list", "--gpus", "", env=env)
    assert "shards the optimiser state; sends per step: all-reduce of the gradients, broadcast of the parameters" \
        in listing.stdout, listing.stdout[-2000:]


def test_every_declared_knob_is_a_field_read_one_way_in_the_parent_and_the_worker():
    """docs/extending.md, a knob: its entry in bench/core/knobs.py and its field in
    bench/core/step.py's KnobFields. The same field reads the request on Settings, the resolved
    value on Case, and what the worker runs on its context, for every knob."""
    from bench.cases.case import Case, settings
    from bench.core.knobs import KNOBS
    from bench.core.placement import Placement
    from bench.core.step import CaseSpec, KnobFields, WorkerContext

    fields = {n for n in dir(KnobFields) if isinstance(getattr(KnobFields, n), property)}
    assert fields == {k.name for k in KNOBS}, "a knob declared without its field, or a field without its knob"
    asked = settings(tf32="on", optimizer_impl="foreach", cpu_bind="exclusive", data="host")
    case = Case.make("ddp", "fp32", "resnet18-small", Placement((), 2), 4, "eager", asked)
    ctx = WorkerContext(case.spec(), case.placement, None, {})
    for knob in KNOBS:
        spec = CaseSpec.from_json(case.spec().to_json())  # as the worker reads it back
        assert getattr(case, knob.name) == getattr(spec, knob.name) == getattr(ctx, knob.name), knob.name
    assert (asked.tf32, case.tf32, ctx.tf32) == ("on", "on",
                                                 "on") and ctx.optimizer_impl == "foreach" and ctx.data == "host"
    assert asked.cudnn_benchmark == "auto" and case.cudnn_benchmark is None  # resolved: no cuDNN on the CPU


def _python(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=120)


def test_a_strategy_built_on_ddp_claims_only_what_it_declares(tmp_path):
    """docs/extending.md's MyZero, renamed so that it sorts before ddp: it does not become the
    reference, take ddp's place and colour, or inherit ddp's CUDA graph and Apex levels."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "amyzero.py").write_text(_recipe("MyZero").replace('"myzero"', '"amyzero"'))
    proc = _python("import strategies as s; z = s.get('amyzero'); "
                   "print(s.reference(), z.executions, z.apex_levels, z.reference, z.order == s.get('ddp').order, "
                   "z.colour == s.get('ddp').colour)", {"PARABENCH_STRATEGY_PATH": str(folder)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ddp", "('eager',)", "()", "False", "False", "False"], proc.stdout


def test_a_second_reference_or_a_bad_claim_is_refused_when_it_registers(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    claims = {"reference = True": "claims reference = True, which 'ddp' holds",
              'executions = ("eager", "jit")': "executions ('eager', 'jit'): eager and any of compile, cuda-graph",
              'apex_levels = ("O4",)': "apex_levels ('O4',): choose from O1, O2, O3"}
    for claim, message in claims.items():
        (folder / "bad.py").write_text(_recipe("MyZero").replace('    summary = "DDP + ZeroRedundancyOptimizer"',
                                                                 f'    summary = "x"\n    {claim}'))
        proc = _python("import strategies; strategies.names()", {"PARABENCH_STRATEGY_PATH": str(folder)})
        assert proc.returncode != 0 and message in proc.stderr, (claim, proc.stderr[-2000:])


@pytest.mark.slow  # a sweep in a worker: make test-slow, which CI runs too
def test_execution_compile_is_refused_unless_declared_and_checked_when_declared(tmp_path):
    """The Toy recipe declares no executions: --execution compile is refused, with the reason in
    the row. A strategy that declares compile but never compiles fails its case: a row that says
    execution=compile is a compiled step."""
    folder = tmp_path / "my_strategies"
    folder.mkdir()
    (folder / "toy.py").write_text(TOY_STRATEGY)
    liar = TOY_STRATEGY.replace("class Toy", "class Liar").replace('"toy"', '"liar"')
    claim = 'max_replicas = 1\n    executions = ("eager", "compile")'
    (folder / "liar.py").write_text(liar.replace("max_replicas = 1", claim))
    out = tmp_path / "c.json"
    run = subprocess.run([sys.executable, "-m", "bench", "run", "--gpus", "", "--strategies", "toy,liar",
                          "--execution", "compile", "--batch-sizes", "2", "--warmup", "1", "--steps", "2",
                          "--trials", "1", "--out", str(out)], cwd=REPO,
                         env={**os.environ, "PARABENCH_STRATEGY_PATH": str(folder)},
                         capture_output=True, text=True, timeout=300)
    rows = {r["strategy"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["toy"]["status"] == "skipped" and "supports --execution eager, not compile" in rows["toy"]["reason"]
    assert rows["liar"]["status"] == "error", rows["liar"]
    assert "declares --execution compile but its step compiled nothing" in rows["liar"]["reason"], run.stdout


def test_no_module_copies_a_registry_fact_at_import():
    """Facts about strategies are asked of the registry when needed: a module-level name bound to
    strategies.names(), baseline(), reference() or a strategy's flag would miss a strategy that
    registers later, or change the report silently when one inherits a flag."""
    import ast

    copied = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                    isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "strategies"
                    for n in ast.walk(node.value)):
                copied.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not copied, copied


def test_a_strategy_registered_after_the_report_is_imported_is_in_its_order_and_colours():
    proc = _python(textwrap.dedent('''
        from bench.report import figures, frame
        import strategies
        from strategies.base import Strategy

        @strategies.register
        class Late(Strategy):
            name, summary, order, colour = "late", "registered after the report's import", 5, "tab:pink"

        print(figures.colour("late"), strategies.names().index("late"))
    '''), {})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["tab:pink", "1"], proc.stdout


def test_the_package_names_no_committed_results_file_and_finds_its_code_one_way():
    """What `pip install .` carries reads no file of this repository's results/ or plots/ (the
    claims and provenance machinery lives with the tests), and where the code is imported from
    (the folder workers get on PYTHONPATH) is worked out in one module, bench/core/imports.py."""
    import ast

    tracked = subprocess.run(["git", "ls-files", "results", "plots"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    names = {p for path in tracked for p in (path, path.split("/", 1)[1]) if "/" in path}
    named, rooted = [], []
    for path in sorted([*(REPO / "bench").rglob("*.py"), *(REPO / "strategies").rglob("*.py")]):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and any(name in node.value for name in names):
                named.append(f"{path.relative_to(REPO)}:{node.lineno}")
            if isinstance(node, ast.Name) and node.id == "__file__" and path.name != "imports.py" \
                    and "parent" in ast.get_source_segment(path.read_text(), _statement_of(tree, node)):
                rooted.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert len(names) > 50 and not named, named
    assert not rooted, rooted


def _statement_of(tree, node):
    """The innermost statement holding `node`."""
    import ast

    found = None
    for stmt in ast.walk(tree):
        if isinstance(stmt, ast.stmt) and any(n is node for n in ast.walk(stmt)):
            if found is None or (stmt.lineno >= found.lineno and stmt.end_lineno <= found.end_lineno):
                found = stmt
    return found


def test_every_entry_point_takes_its_measurement_defaults_from_one_table():
    """bench/cases/defaults.py: the flags of run, fit and probe-comm say its defaults, and a
    Settings or Case made in code (checks, tests, instruction counts) starts from run's CPU column."""
    from bench.cases.case import Case, Settings
    from bench.cases.defaults import MEASUREMENT, default
    from bench.core.placement import Placement

    case = Case.make("single", "fp32", "resnet18-small", Placement((), 1), 2, "eager", Settings())
    for name in ("warmup", "steps", "trials"):
        assert getattr(Settings(), name) == getattr(case, name) == default("run", name, on_gpu=False), name
    for command, entries in MEASUREMENT.items():
        usage = run_cli(command, "--help").stdout
        for name, ((on_gpu, on_cpu), _, _) in entries.items():
            said = f"default {on_gpu}" if on_gpu == on_cpu else f"default {on_gpu} on GPUs, {on_cpu} on the CPU"
            assert said in " ".join(usage.split()), (command, name, usage[-1500:])


@pytest.mark.slow  # a sweep in a worker: make test-slow, which CI runs too
def test_a_knob_added_in_one_file_reaches_list_the_sweep_the_answer_and_the_report(tmp_path):
    """docs/extending.md, a knob: one entry in bench/core/knobs.py and nothing else edited. In a
    copy of the code with that entry added, `list` offers its flag, a sweep records its column,
    and the answer and the report label the case by it."""
    import shutil

    copy = tmp_path / "code"
    for package in ("bench", "strategies"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    knobs = copy / "bench" / "core" / "knobs.py"
    entry = ('    Knob("warm_start", "--warm-start", "no", "a knob of the test", choices=("no", "yes"), legacy="no", '
             'label="warm"),\n)\nBY_NAME =')
    knobs.write_text(knobs.read_text().replace(")\nBY_NAME =", entry, 1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def bench(*args):
        proc = subprocess.run([sys.executable, "-m", "bench", *args], cwd=copy, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    assert "--warm-start       no|yes: a knob of the test" in bench("list", "--gpus", "")
    out = tmp_path / "r.json"
    bench("run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--warmup", "1", "--steps", "2",
          "--trials", "1", "--warm-start", "yes", "--out", str(out))
    assert json.loads(out.read_text())["rows"][0]["warm_start"] == "yes"
    assert "warm=yes" in bench("answer", str(out))
    bench("report", str(out), "--out", str(tmp_path / "plots"))
    assert "warm=yes" in (tmp_path / "plots" / "REPORT.md").read_text()


def test_a_knob_added_in_one_file_reaches_fits_flags_the_levers_the_labels_and_the_fit_check(tmp_path):
    """A knob's words come from its entry: in a copy of the code with one entry added to
    bench/core/knobs.py (a short token and a lever), `fit` takes its flag and compares it, a
    search tries its lever in its place, a difference names it, and a short label shows its token."""
    import shutil

    copy = tmp_path / "code"
    for package in ("bench", "strategies"):
        shutil.copytree(REPO / package, copy / package, ignore=shutil.ignore_patterns("__pycache__"))
    knobs = copy / "bench" / "core" / "knobs.py"
    entry = ('    Knob("warm_start", "--warm-start", "no", "a knob of the test", choices=("no", "yes"), legacy="no", '
             'label="warm", short="ws-{value}", lever=lambda case, data: "yes" if case.warm_start == "no" else None, '
             'lever_rank=3),\n)\nBY_NAME =')
    knobs.write_text(knobs.read_text().replace(")\nBY_NAME =", entry, 1))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    fit_help = subprocess.run([sys.executable, "-m", "bench", "fit", "--help"], cwd=copy, env=env,
                              capture_output=True, text=True, timeout=300)
    assert fit_help.returncode == 0 and "--warm-start" in fit_help.stdout, fit_help.stderr[-2000:]
    probe = """
from bench.cases.case import Case, settings
from bench.cases.levers import DIMENSIONS, difference, levers
from bench.core.placement import Placement
from bench.fit.fit import _same_case
from bench.report.labels import tokens

case = Case.make("single", "fp32", "resnet18-small", Placement((), 1), 2, "eager", settings())
assert DIMENSIONS == ("execution", "optimizer_impl", "channels_last", "warm_start", "options"), DIMENSIONS
(lever,) = levers(case, "warm_start")
assert lever.setting == "warm=yes" and lever.case.warm_start == "yes", lever
assert difference(case, lever.case) == ["warm=yes"]
assert tokens(lever.case.row()) == "ws-yes", tokens(lever.case.row())
assert not _same_case(case.row(), lever.case.row()) and _same_case(case.row(), case.row())
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", probe], cwd=copy, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-3000:]


def test_the_case_crosses_into_the_worker_as_one_typed_versioned_object():
    """Case.spec() is a CaseSpec: written as JSON and read back as the same object, its knobs
    typed fields; a spec of another version or with fields this code does not know is refused in
    one line, and the worker modules read fields, not string keys."""
    import ast
    import dataclasses

    import pytest

    from bench.cases.case import Case, settings
    from bench.core.placement import Placement
    from bench.core.step import SPEC_VERSION, CaseSpec, SpecError

    case = Case.make("ddp", "fp32", "resnet18-small", Placement((), 2), 4, "eager", settings(channels_last=True))
    spec = case.spec()
    back = CaseSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec and back.channels_last is True and back.placement == case.placement
    with pytest.raises(SpecError, match=f"this process reads version {SPEC_VERSION}"):
        CaseSpec.from_json({**spec.to_json(), "version": SPEC_VERSION + 1})
    with pytest.raises(SpecError, match="fields batch_size are not in version"):
        CaseSpec.from_json({**spec.to_json(), "batch_size": 4})
    assert dataclasses.replace(spec, batch_per_gpu=8).batch_per_gpu == 8  # frozen: changed by replace only
    for module in ("bench/run/worker.py", "bench/fit/worker.py", "strategies/gluon/worker.py"):
        tree = ast.parse((REPO / module).read_text())
        keyed = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                 and isinstance(n.value, ast.Name) and n.value.id == "case"]
        assert not keyed, (module, keyed)


WITH_NOTE = r"""
import json, sys
from dataclasses import dataclass, replace
from bench.cases.case import Case, settings
from bench.core.launch_spec import LaunchSpec
from bench.core.placement import Placement
from bench.run import worker

@dataclass(frozen=True)
class WithNote(LaunchSpec):
    note: str = ""

if sys.argv[1] == "write":
    case = Case.make("single", "fp32", "resnet18-small", Placement((), 1), 2, "eager", settings()).spec()
    print(json.dumps(replace(WithNote.local("local", (), 1, cases=(case,)), note="reached").to_json()))
else:
    worker.main([sys.argv[2]], run_case=lambda job, case: print("note:", job.spec.note) or {}, spec_type=WithNote)
"""


def test_every_message_that_crosses_a_process_is_typed_and_versioned(tmp_path):
    """The worker's launch spec, its race rule and anatomy request, and `bench fit`'s worker spec
    were dicts read by string key in three to five modules with no version check. Each is now a
    Message (bench/core/message.py): a field declared once in its dataclass reaches the worker, and
    another version, an unknown field or a missing one is refused in one line."""
    import ast
    import dataclasses

    import pytest

    from bench.cases.case import Case, settings
    from bench.core.launch_spec import LaunchSpec, RaceRule
    from bench.core.message import SpecError
    from bench.core.placement import Placement
    from bench.core.step import AnatomyRequest
    from bench.fit.spec import FitItem, FitWorkerSpec

    env = {**os.environ, "PYTHONPATH": str(REPO), "PARABENCH_EVENTS": str(tmp_path / "events.jsonl")}
    written = subprocess.run([sys.executable, "-c", WITH_NOTE, "write"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=300)
    assert written.returncode == 0, written.stderr[-2000:]
    path = tmp_path / "spec.json"
    path.write_text(written.stdout)
    ran = subprocess.run([sys.executable, "-c", WITH_NOTE, "read", str(path)], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    assert "note: reached" in ran.stdout, ran.stderr[-2000:]  # one line in the dataclass, read in the worker
    data = json.loads(written.stdout)
    with pytest.raises(SpecError, match=f"^launch spec fields note are not in version {LaunchSpec.VERSION}$"):
        LaunchSpec.from_json(data)  # the production worker refuses what it does not know
    version = LaunchSpec.VERSION
    with pytest.raises(SpecError, match=f"launch spec version {version + 1}: this process reads version {version}"):
        LaunchSpec.from_json({**data, "version": version + 1})
    with pytest.raises(SpecError, match=f"launch spec version {version} lacks fields cases"):
        LaunchSpec.from_json({k: v for k, v in data.items() if k not in ("cases", "note")})

    case = Case.make("ddp", "fp32", "resnet18-small", Placement((), 2), 4, "eager", settings()).spec()
    spec = LaunchSpec(launcher="torchrun", gpus=(), n_replicas=2, nnodes=1, launcher_options={"backend": "auto"},
                      cases=(dataclasses.replace(case, anatomy=AnatomyRequest(steps=3, folder="/f", record="r")),),
                      race=RaceRule(short_steps=5, leaders={"g": {"items_per_s": 10.0, "lo": 9.0, "hi": 11.0}}))
    back = LaunchSpec.from_json(json.loads(json.dumps(spec.to_json())))
    assert back == spec and back.cases[0].anatomy.steps == 3 and back.race.short_steps == 5
    fit = FitWorkerSpec(model="resnet18-small", gpus=(), budget_mib=300.0, seed=0,
                        plan=(FitItem(precision="fp32", strategy="ddp", devices=(1, 2), cases={"2": case},
                                      search={"first": [8]}, done={"1": [{"batch": 8, "status": "ok"}]}),))
    fit_back = FitWorkerSpec.from_json(json.loads(json.dumps(fit.to_json())))
    assert fit_back == fit and fit_back.plan[0].cases["2"].n_replicas == 2
    with pytest.raises(SpecError, match="fit plan item fields cases_at are not in version 2"):
        FitWorkerSpec.from_json({**fit.to_json(), "plan": [{**fit.plan[0].to_json(), "cases_at": {}}]})

    # Nothing that reads a spec reads it by string key.
    for module in ("bench/run/worker.py", "bench/fit/worker.py", "bench/engine/launchers.py",
                   "bench/run/node_launches.py", "bench/checks/parity_worker.py", "strategies/gluon/worker.py",
                   "strategies/gluon/parity.py", "bench/link/probe.py"):
        tree = ast.parse((REPO / module).read_text())
        keyed = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Subscript)
                 and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str)
                 and ((isinstance(n.value, ast.Name) and n.value.id in ("spec", "item", "rule", "parity"))
                      or (isinstance(n.value, ast.Attribute) and n.value.attr in ("spec", "anatomy")))]
        assert not keyed, (module, keyed)


def test_a_gpu_host_runs_by_default_what_make_bench_runs_there(tmp_path):
    """`bench run` with no flags measured fp32 with no search on GPUs, where `make bench` passed
    amp-bf16 and --search of its own: two tables that disagreed. Both now read one
    (bench/cases/defaults.py SWEEP, BUDGET_MIN; each data kind's batches in bench/workloads/data.py):
    the Makefile passes only what the user set, and the documents say the table's budget."""
    import re

    from bench.cases.defaults import BUDGET_MIN, SWEEP
    from bench.cli import build_parser
    from bench.cli.run import _axes, _settings
    from bench.workloads.data import Images, Tokens

    for on_gpu, column in ((True, 0), (False, 1)):
        args = build_parser().parse_args(["run", "--gpus", "", "--models", "resnet18-small"])
        names, precisions, _, _ = _axes(args, on_gpu=on_gpu)
        _settings(args, on_gpu, names)
        assert precisions == [SWEEP["precisions"][column]] and args.search is SWEEP["search"][column]
        assert args.budget == (BUDGET_MIN if args.search else None)
    args = build_parser().parse_args(["run", "--no-search", "--precisions", "fp32"])
    _settings(args, True, ["single"])
    assert args.search is False and args.budget is None

    def make_bench(*assignments):
        made = subprocess.run(["make", "-n", "bench", "PY=python3", *assignments], cwd=REPO, capture_output=True,
                              text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        return next(line for line in made.stdout.splitlines() if "-m bench run" in line)

    plain = make_bench("GPUS=0")
    assert "--precisions" not in plain and "--search" not in plain and "--budget" not in plain, plain
    asked = make_bench("GPUS=0", "PRECISION=fp32", "SEARCH=--no-search", "BUDGET=3", "BATCH_SIZES=8")
    assert all(f in asked for f in ("--precisions 'fp32'", "--no-search", "--budget '3'", "--batch-sizes '8'")), asked
    help_text = " ".join(build_parser().format_help().split())
    run_help = " ".join(next(a for a in build_parser()._subparsers._group_actions[0].choices.values()
                             if a.prog.endswith(" run")).format_help().split())
    assert help_text and f"default {BUDGET_MIN:g}" in run_help
    for kind in (Images, Tokens):
        assert ",".join(map(str, kind.batches["cuda"])) in run_help, kind
    said = {"README.md": r"a search in (\d+) minutes", "docs/search.md": r"the default budget is (\d+) minutes"}
    for doc, pattern in said.items():
        found = re.findall(pattern, (REPO / doc).read_text())
        assert found and {float(f) for f in found} == {BUDGET_MIN}, (doc, found)


def test_the_seed_and_the_timeouts_are_written_once():
    """The seed and the timeouts stood in two to five places (`bench fit`'s probes: 300 s by its
    flag, 600 s where a Fit was made in code); each is read from bench/cases/defaults.py."""
    import argparse
    import dataclasses

    from bench.cases.case import Settings
    from bench.cases.defaults import SEED, TIMEOUT_S
    from bench.cli import fit as fit_cli, run as run_cli_module
    from bench.fit.fit import Fit

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    run_cli_module.add_parser(sub)
    fit_cli.add_parser(sub)
    run = parser.parse_args(["run"])
    fit = parser.parse_args(["fit"])
    made = {f.name: f.default for f in dataclasses.fields(Fit)}
    assert (run.seed, Settings().seed, made["seed"]) == (SEED,) * 3
    assert (run.case_timeout, Settings().case_timeout_s) == (TIMEOUT_S["case"],) * 2
    assert (run.startup_timeout, Settings().startup_timeout_s, fit.startup_timeout,
            made["startup_timeout_s"]) == (TIMEOUT_S["startup"],) * 4
    assert (fit.probe_timeout, made["probe_timeout_s"]) == (TIMEOUT_S["probe"],) * 2


def test_no_class_or_module_in_bench_is_longer_than_a_reader_can_hold():
    """The search was one class of 375 lines and the sweep one of 319; five modules ran past 450
    lines. Each phase of the search is now a function over one state (bench/run/search_state.py),
    the worker's run is bench/run/attempt.py, and the longest modules are split by what they hold."""
    import ast

    classes, modules = [], []
    for path in sorted((REPO / "bench").rglob("*.py")):
        text = path.read_text()
        if len(text.splitlines()) > 450:
            modules.append((str(path.relative_to(REPO)), len(text.splitlines())))
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > 250:
                classes.append((f"{path.relative_to(REPO)}:{node.name}", node.end_lineno - node.lineno + 1))
    assert not classes and not modules, (classes, modules)
