"""The answer over a large results file, as a pytest-benchmark benchmark: `answer` and `report`
read files of up to 20,000 rows (bench/cases/results.py's limit). On a 2-core machine `bench answer` of 2,000 rows
took 15.5 s when each record filtered the whole run and made its rows into dicts group by
group, 2.3 s once they are made once; `make pytest-bench ARGS=--benchmark-compare` shows a
return to the former."""
from pathlib import Path

import pytest

from bench.cases import results
from bench.report import answer, frame

BASELINE = Path(__file__).resolve().parent.parent / "results" / "reference" / "baselines" / "cpu-ci.json"


@pytest.fixture(scope="module")
def many_rows(tmp_path_factory) -> Path:
    """2,000 distinct cases: the CI baseline's rows at batch 2, scaled to batches 1-667."""
    template = [r for r in results.load(BASELINE) if r["status"] == "ok" and r["batch_per_gpu"] == 2]
    rows = []
    for batch in range(1, 2000 // len(template) + 2):
        for t in template:
            factor = batch / t["batch_per_gpu"]
            rows.append({**t, "batch_per_gpu": batch, "global_batch": batch * t["n_replicas"],
                         **{k: t[k] * factor for k in ("items_per_s", "items_per_s_p10", "items_per_s_p90",
                                                       "items_per_s_ci_lo",
                                                       "items_per_s_ci_hi") if t.get(k) is not None}})
    path = tmp_path_factory.mktemp("many") / "many.json"
    results.write(path, rows[:2000])
    return path


def test_answer_of_2000_rows(benchmark, many_rows):
    runs = frame.load_runs([many_rows])
    records = benchmark.pedantic(answer.records, args=(runs,), rounds=3, iterations=1)
    assert len(records) == len({(r["devices"], r["batch_per_gpu"]) for r in records}) > 600
