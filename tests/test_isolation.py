"""A long-lived worker runs many cases: a case's figures must not depend on what ran before
it. The same case is measured alone in a fresh worker and after other cases (bf16 autocast,
another batch size) in the same worker: its counters must be equal and its step times must
agree within their spread."""
import pytest

from bench import counters
from tests.conftest import rows_of, run_cli

PROTOCOL = ["--gpus", "", "--warmup", "2", "--steps", "5", "--trials", "3", "--cpu-replicas", "2"]


def _case(rows, precision, batch):
    [row] = [r for r in rows if r["precision"] == precision and r["batch_per_gpu"] == batch]
    assert row["status"] == "ok", row["reason"]
    return row


def _measure(tmp_path, strategy, attempt):
    alone, after = tmp_path / f"alone-{attempt}.json", tmp_path / f"after-{attempt}.json"
    proc = run_cli("run", "--strategies", strategy, "--precisions", "fp32", "--batch-sizes", "2", *PROTOCOL,
                   "--out", str(alone))
    assert proc.returncode == 0, proc.stderr
    # The grid runs the precisions in the order given: the bf16 series first, then fp32 at 1, then 2.
    proc = run_cli("run", "--strategies", strategy, "--precisions", "amp-bf16,fp32", "--batch-sizes", "1,2",
                   *PROTOCOL, "--out", str(after))
    assert proc.returncode == 0, proc.stderr
    return _case(rows_of(alone), "fp32", 2), _case(rows_of(after), "fp32", 2)


def _spreads_meet(a, b):
    return b["step_ms_p10"] <= a["step_ms_p90"] and a["step_ms_p10"] <= b["step_ms_p90"]


@pytest.mark.parametrize("strategy", ["single", "ddp"])  # the local worker and torchrun's
def test_a_case_measures_the_same_first_and_after_others(tmp_path, strategy):
    first, later = _measure(tmp_path, strategy, 1)
    assert first["worker_start_s"] is not None and later["worker_start_s"] is None  # fresh worker vs reused one
    for name in counters.COUNTERS:
        tolerance = counters.TOLERANCE.get(name, 0.0) * max(abs(first[name]), 1e-9)
        assert abs(later[name] - first[name]) <= tolerance, (name, first[name], later[name])
    # Step time on a shared CPU moves between runs: spreads that do not meet count only if
    # they fail to meet again (as in `make regress-ci`); a dependence on order repeats.
    if not _spreads_meet(first, later):
        first, later = _measure(tmp_path, strategy, 2)
    assert _spreads_meet(first, later), (
        f"alone {first['step_ms_p10']:.1f}-{first['step_ms_p90']:.1f} ms, "
        f"after others {later['step_ms_p10']:.1f}-{later['step_ms_p90']:.1f} ms, twice")
