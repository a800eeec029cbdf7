"""Input a user can give that once hung, leaked a process, or ended in a traceback: each gives the
right outcome or one line naming the fix, and leaves no process behind."""
import json
import os
import time

import psutil
import pytest



HELPER = '''
import subprocess

def with_helper():
    import torch
    subprocess.Popen(["sleep", "117.25"])  # a helper that outlives the call and holds its output pipes
    return {"model": torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 10)), "input_shape": (3, 8, 8)}
'''


def helpers() -> list:
    return [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "117.25"]]


def test_a_factory_that_starts_a_helper_process_resolves_at_once_and_leaves_no_helper(tmp_path, monkeypatch):
    from bench.workloads.probing import probe

    (tmp_path / "helperfactory.py").write_text(HELPER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    try:
        found = probe(["helperfactory:with_helper"], timeout_s=100)
        assert found["helperfactory:with_helper"]["num_classes"] == 10
        assert time.monotonic() - started < 60  # not the helper's 117 s, nor the time limit
        assert not helpers()
    finally:
        for p in helpers():
            p.kill()


def small_run(folder):
    from bench.cases import results
    from tests.test_report import row

    path = folder / "run.json"
    results.write(path, [row("single", 1, 64, ips=10000), row("ddp", 2, 64, ips=19000)])
    return path


def test_a_pipe_named_like_a_fit_file_beside_the_run_is_left_out_not_read(tmp_path):
    from tests.conftest import run_cli

    path = small_run(tmp_path)
    os.mkfifo(tmp_path / "x.fit.json")
    proc = run_cli("answer", str(path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "x.fit.json is not a regular file (a pipe, a device or a socket)" in proc.stdout + proc.stderr


def test_side_files_that_are_devices_or_pipes_are_one_line(tmp_path):
    from bench.cases import fileio
    from bench.measure import anatomy
    from bench.report import sections

    from bench.fit import fit

    with pytest.raises(fit.FitError, match="not a regular file"):
        fit.load("/dev/zero")
    with pytest.raises(fileio.ResultsError, match="not a regular file"):
        fileio.read_json("/dev/zero", "probe file", "run `bench probe-comm` again")
    with pytest.raises(ValueError, match="not a regular file"):
        anatomy.load("/dev/zero")
    os.mkfifo(tmp_path / "h200.probe.json")
    assert sections.peak_rates([small_run(tmp_path)]) == {}  # the pipe is skipped, not waited on
    (tmp_path / "deep.fit.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(fit.FitError, match="nested too deeply"):
        fit.load(tmp_path / "deep.fit.json")
    assert fileio.MAX_BYTES < 2**30


def test_a_results_file_of_very_many_small_rows_is_one_line_at_once(tmp_path):
    """Within the byte limit, 200,000 minimal rows: refused by their count, in seconds, not read
    and answered for minutes."""
    from tests.conftest import run_cli

    path = tmp_path / "many.csv"
    path.write_text("strategy,precision,model,batch_per_gpu,status,items_per_s\n"
                    + "single,fp32,resnet18-small,2,skipped,\n" * 200_000)
    started = time.monotonic()
    proc = run_cli("answer", str(path), timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == (
        f"parabench: error: {path} holds more than 20,000 rows, more than any sweep writes; re-run the sweep into "
        "a new file, or pass another results file"), proc.stderr
    assert time.monotonic() - started < 30


def test_a_non_ascii_path_on_an_ascii_terminal_is_escaped_not_a_traceback(tmp_path):
    """compare's exit status is the verdict (make regress-ci reads 1 as a regression): an output
    encoding that cannot show the path must not turn a pass into 1."""
    from tests.conftest import run_cli

    folder = tmp_path / "ünï"
    folder.mkdir()
    path = small_run(folder)
    proc = run_cli("compare", str(path), str(path), env={"PYTHONIOENCODING": "ascii"}, timeout=120)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "\\xfcn\\xef" in proc.stdout, proc.stdout


@pytest.mark.parametrize("args, message", [
    (["--seed", "99999999999999999999"], "--seed must be at most 4,294,967,295, got 99999999999999999999"),
    (["--steps", "1000000000000"], "--steps must be at most 100,000"),
    (["--warmup", "100000000000"], "--warmup must be at most 100,000"),
    (["--trials", "5000"], "--trials must be at most 1,000"),
    (["--anatomy", "--anatomy-steps", "100000000000"], "--anatomy-steps must be at most 1,000"),
])
def test_counts_past_what_a_case_can_run_are_one_line(args, message, tmp_path):
    from tests.conftest import run_cli

    proc = run_cli("run", "--gpus", "", "--strategies", "single", *args, "--out", str(tmp_path / "r.json"), timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip().startswith(f"parabench: error: {message}"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("field, value", [("batch_per_gpu", -5), ("nnodes", 0), ("steps", -1), ("n_replicas", -2),
                                          ("global_batch", 0), ("gpus_per_node", -1), ("n_timed_steps", -1)])
def test_a_count_no_sweep_writes_is_one_line_naming_file_row_and_field(field, value, tmp_path, capsys):
    from bench.cases import results
    from bench.cli import main
    from tests.test_report import row

    path = tmp_path / "run.json"
    rows = [row("single", 1, 64, ips=10000), {**row("ddp", 2, 64, ips=19000), field: value}]
    path.write_text(json.dumps({"schema": results.SCHEMA, "rows": rows}))
    assert main(["answer", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"parabench: error: {path}: row 1: field {field} is {value}, "
                                               "not a usable count; re-run the sweep into a new file, "
                                               "or pass another results file")


@pytest.mark.parametrize("size", ["1e400", "nan", "inf", "2", "65G"])
def test_a_message_size_no_link_can_send_is_one_line(size):
    from bench.link import probe
    with pytest.raises(probe.ProbeError, match="a message size must be 4 bytes"):
        probe.parse_size(size)
