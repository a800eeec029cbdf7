"""`bench probe-comm` (bench/link/): the link measured as NCCL's tests measure it, the
collectives the strategies declare they send, bad input in one line, no rank left behind."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, run_cli


def test_bad_input_gets_one_line():
    for args, says in ((["probe-comm", "--gpus", "", "--devices", "1"], "2 or more devices"),
                       (["probe-comm", "--gpus", "", "--sizes", "4K,lots"], "--sizes takes sizes"),
                       (["probe-comm", "--gpus", "", "--collectives", "all_to_all"],
                        "unknown collective 'all_to_all'")):
        proc = run_cli(*args)
        assert proc.returncode == 2 and says in proc.stderr, (args, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_bus_bandwidth_is_nccl_tests_by_hand():
    from bench.link import probe

    # 100 MB in 1 ms is 100 GB/s of algorithm bandwidth; on 4 ranks an all-reduce's bus carries
    # 2 x 3/4 of it, a reduce-scatter or all-gather 3/4, a broadcast all of it.
    points = [{"collective": c, "n": 4, "bytes": 100_000_000, "times": [0.9, 1.0, 1.1]} for c in probe.COLLECTIVES]
    got = {r["collective"]: r for r in probe.summarise(points)}
    assert got["all_reduce"]["algbw_gbps"] == pytest.approx(100.0)
    assert [got[c]["busbw_gbps"] for c in probe.COLLECTIVES] == pytest.approx([150.0, 75.0, 75.0, 100.0])


def test_by_default_it_times_what_the_strategies_declare_they_send():
    """The default collectives are read from the strategies' declarations (Strategy.sends), not
    listed: DDP's all-reduce, ZeRO-1's broadcast, FSDP2's reduce-scatter and all-gather."""
    import strategies
    from bench.link import probe

    sent = {c.op for n in strategies.names() for c in strategies.get(n).sends}
    assert set(probe.declared()) == sent & set(probe.COLLECTIVES) == {"all_reduce", "broadcast", "reduce_scatter",
                                                                      "all_gather"}


def test_a_cpu_probe_writes_the_table(tmp_path):
    out = tmp_path / "x.comm.json"
    proc = run_cli("probe-comm", "--gpus", "", "--devices", "2", "--sizes", "4K,64K", "--reps", "2",
                   "--collectives", "all_reduce", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert [(p["collective"], p["n"], p["bytes"]) for p in doc["points"]] == [("all_reduce", 2, 4096),
                                                                              ("all_reduce", 2, 65536)]
    # 2(n-1)/n = 1
    assert all(p["busbw_gbps"] == pytest.approx(p["algbw_gbps"]) and p["algbw_gbps"] > 0 for p in doc["points"])
    assert "algbw (GB/s)" in proc.stdout and "busbw (GB/s)" in proc.stdout


def test_more_cpu_ranks_than_the_host_holds_are_refused_before_anything_starts(tmp_path, capsys):
    """More CPU ranks for probe-comm than this host's cores (without --oversubscribe) or memory (at
    one probe rank's measured peak) hold would start what the host cannot run: one line and exit 2,
    before anything starts."""
    from bench.cli import main
    from bench.link import probe
    from bench.run import limits

    args = ["probe-comm", "--gpus", "", "--sizes", "4K", "--devices", str(limits.usable_cores() + 1),
            "--out", str(tmp_path / "x.comm.json")]
    assert main(args) == 2, args
    err = capsys.readouterr().err
    assert "--oversubscribe" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x.comm.json").exists()
    # The memory rule, on a host of 8 cores and 4 GiB available: 8 ranks of 480 MiB fit, 9 do not
    # (whatever the cores); larger messages make each rank larger.
    probe.check_cpu_ranks(8, probe.RESNET18_GRAD_BYTES, False, cores=8, available_bytes=4 << 30)
    with pytest.raises(limits.LimitError, match="use at most 8"):
        probe.check_cpu_ranks(9, probe.RESNET18_GRAD_BYTES, True, cores=64, available_bytes=4 << 30)
    with pytest.raises(limits.LimitError, match="use at most 4"):
        probe.check_cpu_ranks(8, probe.RESNET18_GRAD_BYTES + (200 << 20), False, cores=8, available_bytes=4 << 30)


def test_probe_comm_ranks_die_with_a_killed_probe(tmp_path):
    """SIGKILL of `probe-comm` (no handler runs) takes its spawned ranks along, also while they
    are still starting (importing torch, before torch's own spawn asks for a signal at its
    parent's death): each rank asks the kernel to kill it when its parent dies and checks, once
    started, that its parent is still the probe. The probe is killed as soon as its ranks exist."""
    import signal
    import time

    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "bench", "probe-comm", "--gpus", "", "--devices", "2",
                             "--sizes", "4K,8K", "--reps", "100000", "--out", str(tmp_path / "x.comm.json")],
                            cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    ranks: list = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(ranks) < 2:
            ranks = [c for c in psutil.Process(proc.pid).children(recursive=True)
                     if "spawn_main" in " ".join(c.cmdline())]
            time.sleep(0.02)
        assert len(ranks) == 2, "the probe's ranks did not start"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        gone, alive = psutil.wait_procs(ranks, timeout=30)  # time to import torch and look
        assert not alive, [p.pid for p in alive]
    finally:
        for rank in ranks:
            try:
                rank.kill()
            except psutil.NoSuchProcess:
                pass
