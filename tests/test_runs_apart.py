"""Two runs whose files share a name (run-1/measured.json, run-2/measured.json) are two runs in
the report's first screen and in `bench answer`: told apart by their path and time, never
pooled by their file name."""
from bench.cases import results
from bench.report import answer, frame, sections
from bench.report.labels import Legend

ROW = {"gpu_name": "NVIDIA H200", "device": "cuda", "cpu": "x", "torch": "2.11", "cuda": "13.0", "model": "resnet18",
       "precision": "amp-bf16", "options": "{}", "warmup": 1, "steps": 2, "trials": 1, "seed": 0,
       "optimizer_impl": "foreach",
       "execution": "eager", "data": "device", "tf32": "default", "channels_last": True, "cudnn_benchmark": True,
       "batch_per_gpu": 256, "status": "ok", "reason": ""}


def measured(path, ips, date):
    """A run of single on one GPU and ddp on two, ddp at `ips` images/s."""
    rows = []
    for strategy, n, rate in (("single", 1, ips / 1.9), ("ddp", 2, ips)):
        step = 256 * n / rate * 1000
        rows.append({**ROW, "strategy": strategy, "n_gpus": n, "n_replicas": n, "gpus": ",".join(map(str, range(n))),
                     "global_batch": 256 * n, "items_per_s": rate, "items_per_s_p10": rate * 0.99,
                     "items_per_s_p90": rate * 1.01, "step_ms_p50": step, "step_ms_p10": step * 0.99,
                     "step_ms_p90": step * 1.01, "peak_alloc_mib": 3000.0, "peak_alloc_mib_min": 3000.0,
                     "date": date})
    path.parent.mkdir(parents=True)
    results.write(path, rows)
    return path


def test_two_runs_of_one_file_name_stay_apart_on_the_first_screen(tmp_path):
    first = measured(tmp_path / "run-1" / "measured.json", 103_500.0, "2026-11-23T19:03:00+00:00")
    second = measured(tmp_path / "run-2" / "measured.json", 151_500.0, "2026-11-23T21:57:00+00:00")
    assert frame.run_labels([first, second]) == {str(first): "run-1/measured.json", str(second): "run-2/measured.json"}
    assert frame.run_labels([first]) == {str(first): "measured.json"}  # alone, its name is enough

    runs = frame.load_runs([first, second])
    rep = sections.Report(frame=frame.load_frame([first, second]), runs=runs, anatomy=frame.load_anatomy([first]),
                          paths=[first, second], out=tmp_path / "plots", legend=Legend())
    screen = [line for line in sections.answer_section(rep) if line.startswith("- **")]
    assert len(screen) == 2, screen
    one, two = (next(line for line in screen if f"`run-{n}/measured.json` of 2026-11-23 {t}" in line)
                for n, t in ((1, "19:03"), (2, "21:57")))
    # Each run quotes its own ddp figure, not the other run's.
    assert "103.5k img/s" in one and "151.5k" not in one
    assert "151.5k img/s" in two and "103.5k" not in two
    # The records the terminal's `bench answer` prints are keyed by the same labels.
    recs = {(r["run"], r["devices"]): r for r in answer.records(runs)}
    assert recs[("run-1/measured.json", 2)]["items_per_s"] == 103_500.0
    assert recs[("run-2/measured.json", 2)]["items_per_s"] == 151_500.0
