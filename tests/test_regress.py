"""Regression tracking: a real slowdown is flagged, run-to-run noise is not, bad input exits 2."""
import copy
import json

import pytest

from bench.report import compare
from bench.cases import results
from tests.conftest import TEST_STRATEGIES, run_cli

SWEEP = ["--gpus", "", "--strategies", "single,faulty", "--cpu-replicas", "1", "--batch-sizes", "2",
         "--warmup", "3", "--steps", "6", "--trials", "3"]
# What CI uses on its shared 2-core machine, whose speed drifts between runs.
THRESHOLDS = ["--max-slowdown", "0.25", "--noise-factor", "1.5", "--ratios-only"]


def sweep(path, slow_ms=0):
    env = {**TEST_STRATEGIES, "PARABENCH_FAULTY_SLOW_MS": str(slow_ms)}
    proc = run_cli("run", *SWEEP, "--out", str(path), env=env)
    assert proc.returncode == 0, proc.stderr
    return path


@pytest.fixture(scope="module")
def baselines(tmp_path_factory):
    """Two runs of the baseline: on a shared host one of them may have measured `single` while a
    neighbour held the CPU (in CI once 35% slow, so that both later runs of the same code showed
    faulty's speed-up 30% lower); a regression must show against both."""
    folder = tmp_path_factory.mktemp("base")
    return [sweep(folder / "baseline1.json"), sweep(folder / "baseline2.json")]


def _faulty_over_single(path) -> float:
    rows = {r["strategy"]: r for r in json.loads(path.read_text())["rows"]}
    return rows["faulty"]["step_ms_p50"] / rows["single"]["step_ms_p50"]


@pytest.mark.slow
def test_an_injected_slowdown_is_flagged(baselines, tmp_path):
    # 1500 ms more per step (~35-50 ms steps on this CPU) is the same work done slower: the
    # work counters cannot see it, only timing can. Judged on any machine, busy or not: the
    # known delay is inside every timed step (a sleep never ends early), and `compare` flags
    # the speed-up over single falling, told by --noise-factor 0 to hold a step some thirty times
    # longer against the threshold alone (how the measured spread widens what is allowed has
    # its own tests below, on rows whose spreads are set). On a host at load 4-6 a burst once
    # slowed one baseline's `faulty` sevenfold beside its `single`, and a 400 ms delay then read
    # as -17%: the baseline is the repeat whose `faulty` the host disturbed least, and the delay
    # is one that no burst seen here comes near.
    baseline = min(baselines, key=_faulty_over_single)
    current = sweep(tmp_path / "slow.json", slow_ms=1500)
    slow = {r["strategy"]: r for r in json.loads(current.read_text())["rows"]}  # `faulty` is the tests' own strategy
    assert slow["faulty"]["step_ms_p10"] >= 1500, slow["faulty"]
    proc = run_cli("compare", str(baseline), str(current), "--max-slowdown", "0.25", "--noise-factor", "0",
                   "--ratios-only", "--json", str(tmp_path / "v.json"), env=TEST_STRATEGIES)
    assert proc.returncode == 1, proc.stdout
    verdicts = {v["case"].split()[0]: v for v in json.loads((tmp_path / "v.json").read_text())}
    assert verdicts["faulty"]["verdict"] == "regression"
    assert "speed-up over single fell" in verdicts["faulty"]["why"][0]
    assert verdicts["single"]["verdict"] == "not judged"  # --ratios-only: no in-run reference for single
    assert "REGRESSION" in proc.stdout and "compared" not in proc.stderr


@pytest.mark.slow
def test_the_same_code_again_passes(baselines, tmp_path):
    # A regression must show in a repeat run, and against a repeat of the baseline, before it counts.
    runs = [sweep(tmp_path / "again1.json"), sweep(tmp_path / "again2.json")]
    proc = run_cli("compare", str(baselines[0]), "--baseline-repeat", str(baselines[1]), *map(str, runs),
                   *THRESHOLDS, env=TEST_STRATEGIES)
    assert proc.returncode != 1 and "REGRESSION" not in proc.stdout, proc.stdout
    if proc.returncode == 2:
        # A busy host: steps this short can spread so widely that the allowance they ask for is
        # no judgement. The run says so instead of passing; noise is still never a regression.
        assert "too noisy to judge" in proc.stdout, proc.stdout
    else:
        assert proc.returncode == 0, proc.stdout
    assert "single fp32 resnet18-small CPU x1 batch 2" in proc.stdout and "NOT JUDGED" in proc.stdout


def test_a_regression_must_repeat_to_count(tmp_path):
    base, cur = _rows(items_per_s=8000.0, items_per_s_p10=7900.0, items_per_s_p90=8100.0)
    noise = compare.compare(base, _rows()[1], compare.Thresholds())
    real = compare.compare(base, cur, compare.Thresholds())
    assert compare.confirmed([real, noise])[0]["verdict"] == "unconfirmed"
    assert compare.confirmed([real, real])[0]["verdict"] == "regression"


def test_a_disturbed_baseline_is_outvoted_by_its_repeat():
    (base, _), (_, cur) = _rows(), _rows()
    disturbed = copy.deepcopy(base)  # `single` measured while the host was busy: ddp's speed-up looks higher
    disturbed[1].update(items_per_s=3500.0, items_per_s_p10=3480.0, items_per_s_p90=3520.0)
    slower = _rows(items_per_s=8000.0, items_per_s_p10=7900.0, items_per_s_p90=8100.0)[1]
    by_case = lambda verdicts: {v["case"].split()[0]: v for v in verdicts}  # noqa: E731
    th = compare.Thresholds()
    assert by_case(compare.judge([disturbed], [cur, cur], th))["ddp"]["verdict"] == "regression"
    outvoted = by_case(compare.judge([disturbed, base], [cur, cur], th))["ddp"]
    assert outvoted["verdict"] == "unconfirmed" and "not seen again in a repeat" in outvoted["why"][-1]
    assert by_case(compare.judge([disturbed, base], [slower, slower], th))["ddp"]["verdict"] == "regression"


def test_the_command_takes_repeats_of_the_baseline_and_a_wrong_one_refutes_nothing(tmp_path):
    base, cur = _rows()
    disturbed = copy.deepcopy(base)
    disturbed[1].update(items_per_s=3500.0, items_per_s_p10=3480.0, items_per_s_p90=3520.0)
    other_gpu = [dict(r, gpu_name="NVIDIA A100") for r in base]
    files = {}
    for name, rows in (("base", base), ("disturbed", disturbed), ("cur", cur), ("other", other_gpu)):
        files[name] = str(tmp_path / f"{name}.json")
        _write(files[name], copy.deepcopy(rows))
    regressed = run_cli("compare", files["disturbed"], files["cur"])
    assert regressed.returncode == 1 and "REGRESSION: speed-up over single fell" in regressed.stdout
    outvoted = run_cli("compare", files["disturbed"], "--baseline-repeat", files["base"], files["cur"])
    assert outvoted.returncode == 0 and "UNCONFIRMED" in outvoted.stdout, outvoted.stdout
    assert f"against baseline {files['disturbed']} + {files['base']}" in outvoted.stdout
    wrong = run_cli("compare", files["disturbed"], "--baseline-repeat", files["other"], files["cur"])
    assert wrong.returncode == 1 and "REGRESSION" in wrong.stdout, wrong.stdout


def test_ratios_only_leaves_single_unjudged():
    base, cur = _rows()
    cur[1].update(items_per_s=2000.0, items_per_s_p10=1990.0, items_per_s_p90=2010.0)  # the whole machine slower
    cur[0].update(items_per_s=3920.0, items_per_s_p10=3900.0, items_per_s_p90=3940.0)  # ddp slower by the same factor
    verdicts = {v["case"].split()[0]: v for v in compare.compare(base, cur, compare.Thresholds(), ratios_only=True)}
    assert verdicts["single"]["verdict"] == "not judged" and verdicts["ddp"]["verdict"] == "pass"
    verdicts = {v["case"].split()[0]: v for v in compare.compare(base, cur, compare.Thresholds())}
    assert verdicts["single"]["verdict"] == "regression"  # without --ratios-only, absolute figures are judged


def _write(path, rows):
    """The rows as a results file, each one's step times those its rate comes from (a reader checks
    that the rate is the global batch over the median step)."""
    for row in rows:
        batch_ms = 1000.0 * row["batch_per_gpu"] * row["n_replicas"]
        row.update(step_ms_p10=batch_ms / row["items_per_s_p90"], step_ms_p50=batch_ms / row["items_per_s"],
                   step_ms_p90=batch_ms / row["items_per_s_p10"])
    results.write(path, rows)


def _rows(**changes):
    row = {c: None for c in results.COLUMNS}
    row.update(strategy="ddp", precision="fp32", model="resnet18", device="cuda", gpus="0,1", n_gpus=2, n_replicas=2,
               batch_per_gpu=256, status="ok", gpu_name="NVIDIA H200", items_per_s=10000.0, items_per_s_p10=9900.0,
               items_per_s_p90=10100.0, peak_alloc_mib=5000.0, options="{}", data="device", tf32="default",
               step_ms_p10=50.7, step_ms_p50=51.2, step_ms_p90=51.7)
    single = dict(row, strategy="single", gpus="0", n_gpus=1, n_replicas=1, items_per_s=5100.0, items_per_s_p10=5050.0,
                  items_per_s_p90=5150.0)
    current = [dict(row, **changes), copy.deepcopy(single)]
    return [row, single], current


@pytest.mark.parametrize("changes, verdict, why", [
    ({"items_per_s": 8000.0, "items_per_s_p10": 7900.0, "items_per_s_p90": 8100.0}, "regression",
     "speed-up over single fell"),
    ({"items_per_s": 9600.0, "items_per_s_p10": 9500.0, "items_per_s_p90": 9700.0}, "pass", None),
    ({"peak_alloc_mib": 6000.0}, "regression", "peak memory grew 20.0%"),
    ({"status": "oom", "reason": "CUDA out of memory"}, "regression", "was ok, now oom"),
    ({"gpu_name": "NVIDIA A100"}, "not compared", "different hardware"),
    ({"batch_per_gpu": 512}, "new", "only in the current file"),
])
def test_verdicts(changes, verdict, why):
    base, cur = _rows(**changes)
    verdicts = {v["case"]: v for v in compare.compare(base, cur, compare.Thresholds())}
    ddp = [v for c, v in verdicts.items() if c.startswith("ddp")][0]
    assert ddp["verdict"] == verdict
    if why:
        assert why in ddp["why"][0]


def test_rows_from_before_an_option_existed_still_match():
    # A baseline written before DDP had `broadcast_buffers` ran with its default (True).
    base, cur = _rows(options='{"broadcast_buffers": true, "bucket_cap_mb": 25}')
    base[0]["options"] = '{"bucket_cap_mb": 25}'
    assert [v["verdict"] for v in compare.compare(base, cur, compare.Thresholds())
            if v["case"].startswith("ddp")] == ["pass"]
    # A knob set away from its default is another case.
    _, cur = _rows(options='{"broadcast_buffers": false}')
    assert "new" in [v["verdict"] for v in compare.compare(base, cur, compare.Thresholds())
                     if v["case"].startswith("ddp")]


def test_a_wide_spread_is_noise_not_a_regression():
    base, cur = _rows(items_per_s=8500.0, items_per_s_p10=7000.0, items_per_s_p90=10000.0)
    base[0].update(items_per_s_p10=8000.0, items_per_s_p90=12000.0)
    assert compare.compare(base, cur, compare.Thresholds())[0]["verdict"] == "pass"


def test_nothing_comparable_exits_2(tmp_path):
    base, cur = _rows(gpu_name="NVIDIA A100")
    cur[1]["gpu_name"] = "NVIDIA A100"
    _write(tmp_path / "b.json", base)
    _write(tmp_path / "c.json", cur)
    proc = run_cli("compare", str(tmp_path / "b.json"), str(tmp_path / "c.json"))
    assert proc.returncode == 2 and "could be compared" in proc.stderr


def test_corrupt_baseline_exits_2(tmp_path):
    (tmp_path / "b.json").write_text('{"schema": "parabench-results/1", "rows": [')
    _write(tmp_path / "c.json", _rows()[1])
    proc = run_cli("compare", str(tmp_path / "b.json"), str(tmp_path / "c.json"))
    assert proc.returncode == 2 and "b.json: corrupt or truncated" in proc.stderr


def test_auto_baseline_follows_the_gpu_model(tmp_path):
    _write(tmp_path / "c.json", _rows()[1])
    proc = run_cli("compare", "auto", str(tmp_path / "c.json"))
    # The H200 baseline is picked (these synthetic cases are not in it, hence exit 2).
    assert "against baseline" in proc.stdout and "baselines/nvidia-h200.json" in proc.stdout
    _write(tmp_path / "other.json", [dict(r, gpu_name="Imaginary GPU") for r in _rows()[1]])
    proc = run_cli("compare", "auto", str(tmp_path / "other.json"))
    assert proc.returncode == 2 and "no baseline for Imaginary GPU" in proc.stderr


def test_dashboard_export(tmp_path):
    _write(tmp_path / "c.json", _rows()[1])
    proc = run_cli("dashboard", str(tmp_path / "c.json"), "--out", str(tmp_path / "d.json"),
                   "--memory-out", str(tmp_path / "m.json"))
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((tmp_path / "d.json").read_text())
    assert {"name", "unit", "value", "range", "extra"} == set(entries[0]) and entries[0]["unit"] == "img/s"
    assert "torch" in entries[0]["extra"] and "commit" in entries[0]["extra"]
    assert any(e["unit"] == "x" and "speed-up over single, same run" in e["name"] for e in entries)
    memory = json.loads((tmp_path / "m.json").read_text())
    assert all(e["unit"] == "MiB" for e in memory)


def test_dashboard_names_are_unique_over_the_committed_results(tmp_path):
    from pathlib import Path

    from bench.cases.results import may_be_results

    files = sorted(str(p) for p in (Path(__file__).resolve().parent.parent / "results").rglob("*.json")
                   if "archive" not in str(p) and not p.name.endswith(".probe.json") and may_be_results(p))
    proc = run_cli("dashboard", *files, "--out", str(tmp_path / "d.json"), "--memory-out", str(tmp_path / "m.json"))
    assert proc.returncode == 0, proc.stderr
    for out in ("d.json", "m.json"):
        names = [e["name"] for e in json.loads((tmp_path / out).read_text())]
        assert len(names) > 50 and len(names) == len(set(names))


@pytest.mark.parametrize("autotuning, verdict", [(True, "pass"), (False, "regression")])
def test_autotuned_gpu_launches_vary_and_are_not_judged(autotuning, verdict):
    # Counts from campaign 7: the same DDP case in two fresh workers launched 448 and 452 kernels.
    counts = dict(ops_per_step=1273, host_syncs_per_step=1, collectives_per_step=8, cudnn_benchmark=autotuning)
    base, cur = _rows(kernel_launches_per_step=452, alloc_mib_per_step=2982.4, **counts)
    for row in base:
        row.update(kernel_launches_per_step=448, alloc_mib_per_step=2638.0, **counts)
    [ddp] = [v for v in compare.compare(base, cur, compare.Thresholds()) if v["case"].startswith("ddp")]
    assert ddp["verdict"] == verdict
    # Operator calls repeat exactly with autotuning too, and stay judged.
    cur[0]["ops_per_step"] = 1274
    [ddp] = [v for v in compare.compare(base, cur, compare.Thresholds()) if v["case"].startswith("ddp")]
    assert ddp["verdict"] == "regression" and "ops per step rose" in ddp["why"][0]


# A counter that cannot be read stops every reader with one line (exit 2), never a crash and
# never a pass: infinity, NaN and a counter the baseline has and the current file lacks.
def _cpu_rows(**counter):
    rows = _rows()[0]
    for r in rows:
        r.update(device="cpu", gpus="", n_gpus=0, gpu_name="cpu", cpu="x", peak_alloc_mib=None,
                 **dict.fromkeys(compare.counters.COUNTERS, 10))
    return rows, [dict(r, **counter) for r in rows]


@pytest.mark.parametrize("value", [float("inf"), float("nan"), "Infinity", "-inf"])
def test_a_non_finite_counter_is_unusable_for_every_reader(tmp_path, value):
    base, cur = _cpu_rows(ops_per_step=value)
    _write(tmp_path / "b.json", base)
    _write(tmp_path / "c.json", cur)
    for args in (["compare", str(tmp_path / "b.json"), str(tmp_path / "c.json"), "--judge", "counters"],
                 ["dashboard", str(tmp_path / "c.json"), "--out", str(tmp_path / "d.json")],
                 ["report", str(tmp_path / "c.json"), "--out", str(tmp_path / "p")],
                 ["run", "--gpus", "", "--strategies", "single", "--batch-sizes", "2", "--resume",
                  "--out", str(tmp_path / "c.json")]):
        proc = run_cli(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        line, = proc.stderr.strip().splitlines()
        assert f"{tmp_path / 'c.json'}: row 0: field ops_per_step" in line and "not a usable figure" in line


@pytest.mark.parametrize("judge", ["counters", "all"])
def test_a_missing_counter_is_unusable_not_a_pass(tmp_path, judge):
    base, cur = _cpu_rows(ops_per_step=None)
    _write(tmp_path / "b.json", base)
    _write(tmp_path / "c.json", cur)
    proc = run_cli("compare", str(tmp_path / "b.json"), str(tmp_path / "c.json"), "--judge", judge)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "UNUSABLE: the current row has no ops_per_step" in proc.stdout
    line, = proc.stderr.strip().splitlines()
    assert "lack work counters that" in line
    # Both without counters (files from before counters existed): nothing judged, not a failure of input.
    base, cur = _cpu_rows()
    assert [v["verdict"] for v in compare.compare(base, cur, compare.Thresholds(), judge_timing=False)] == ["pass"] * 2


def test_a_case_90_percent_slower_is_never_a_pass_however_wide_its_spread():
    """On a busy host `compare` passed a case at -90% of its baseline: its noise allowance exceeded 100%.
    An allowance that wide cannot judge anything: the case is not judged, and says why."""
    base, cur = _rows(items_per_s=1000.0, items_per_s_p10=200.0, items_per_s_p90=1900.0)
    (ddp,) = [v for v in compare.compare(base, cur, compare.Thresholds(noise_factor=1.5))
              if v["case"].startswith("ddp")]
    assert ddp["verdict"] == "not judged" and "too noisy to judge" in ddp["why"][0], ddp


def test_a_speed_up_over_a_single_too_noisy_to_judge_is_not_judged_either():
    """On a busy host `compare` passed ddp at -91% ("PASS") beside single marked "NOT JUDGED: too noisy":
    ddp's speed-up divided by that single, and both had dropped. A ratio over a single too noisy to
    judge judges nothing: ddp is not judged either, and says why."""
    base, cur = _rows(items_per_s=1000.0, items_per_s_p10=950.0, items_per_s_p90=1050.0)
    cur[1].update(items_per_s=510.0, items_per_s_p10=200.0, items_per_s_p90=900.0)  # single, 90% down and wide
    verdicts = {v["case"].split()[0]: v for v in compare.compare(base, cur, compare.Thresholds(noise_factor=1.5))}
    assert verdicts["single"]["verdict"] == "not judged", verdicts["single"]
    assert verdicts["ddp"]["verdict"] == "not judged" and "divides by single" in verdicts["ddp"]["why"][0], \
        verdicts["ddp"]
    assert compare.exit_status(list(verdicts.values())) == 2


def test_a_run_whose_matched_cases_were_all_too_noisy_says_so_not_that_nothing_matched(tmp_path):
    """`compare` said "no case could be compared (different cases or hardware)" after a NOT JUDGED
    row of the same case and hardware: the case matched, and was too noisy to judge."""
    def consistent(row, img, low, high):  # the step times that give these images/s
        batch = row["batch_per_gpu"] * row["n_replicas"]
        return dict(row, items_per_s=img, items_per_s_p10=low, items_per_s_p90=high, step_ms_p50=batch / img * 1000,
                    step_ms_p10=batch / high * 1000, step_ms_p90=batch / low * 1000)

    base, cur = _rows()
    base = [consistent(r, r["items_per_s"], r["items_per_s_p10"], r["items_per_s_p90"]) for r in base[:1]]
    cur = [consistent(r, r["items_per_s"] / 10, r["items_per_s"] / 50, r["items_per_s"] / 5) for r in cur[:1]]
    results.write(tmp_path / "base.json", base)
    results.write(tmp_path / "cur.json", cur)
    proc = run_cli("compare", str(tmp_path / "base.json"), str(tmp_path / "cur.json"), "--noise-factor", "1.5")
    assert proc.returncode == 2 and "NOT JUDGED" in proc.stdout, proc.stdout
    assert "could be judged" in proc.stderr and "different cases or hardware" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
