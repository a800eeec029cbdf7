"""Multi-node sweeps on one machine: two `bench run` processes acting as two nodes of two
CPU ranks each, joined by torchrun's c10d rendezvous through node 0's store (gloo)."""
import json
import os
import signal
import socket
import subprocess
import sys

import pytest

from bench.run import node_launches, nodes
from tests.conftest import REPO, rows_of
from tests.test_reliability import processes_with, tagged, wait_for

SWEEP = ["--gpus", "", "--cpu-replicas", "2", "--batch-sizes", "2", "--warmup", "0", "--steps", "2", "--trials", "1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(rank, args, env, port, out=None):
    cmd = [sys.executable, "-m", "bench", "run", *args, "--nnodes", "2", "--node-rank", str(rank),
           "--rdzv-endpoint", f"127.0.0.1:{port}", "--startup-timeout", "60"]
    if out is not None:
        cmd += ["--out", str(out)]
    return subprocess.Popen(cmd, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), **env},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_two_nodes_give_one_results_file_with_world_size_4(tmp_path):
    env, port = tagged(), free_port()
    follower = node(1, ["--strategies", "single,ddp", *SWEEP], env, port, out=tmp_path / "node1.json")
    leader = node(0, ["--strategies", "single,ddp", *SWEEP], env, port, out=tmp_path / "run.json")
    lout, lerr = leader.communicate(timeout=300)
    fout, ferr = follower.communicate(timeout=60)
    assert leader.returncode == 0, lerr
    assert follower.returncode == 0, ferr
    rows = {r["strategy"]: r for r in rows_of(tmp_path / "run.json")}
    ddp, single = rows["ddp"], rows["single"]
    assert ddp["status"] == "ok", ddp["reason"]
    assert (ddp["nnodes"], ddp["world_size"], ddp["n_replicas"], ddp["global_batch"]) == (2, 4, 4, 8)
    host = socket.gethostname()
    assert ddp["hosts"] == f"{host};{host}" and ddp["node_gpu_names"] == "CPU;CPU"
    # One-process strategies run on node 0 alone: the baseline of the speed-up.
    assert (single["status"], single["nnodes"], single["world_size"]) == ("ok", 1, 1)
    # The follower writes nothing and says what it took part in.
    assert not (tmp_path / "node1.json").exists()
    assert "node 1: worker 0 (2 nodes x CPU x2): ddp batch 2" in fout
    assert wait_for(lambda: not processes_with(env["PARABENCH_TEST_TAG"]), 20)


def test_a_node_with_other_arguments_is_refused(tmp_path):
    env, port = tagged(), free_port()
    follower = node(1, ["--strategies", "ddp", *SWEEP[:-6], "--warmup", "0", "--steps", "3", "--trials", "1"], env,
                    port)
    leader = node(0, ["--strategies", "ddp", *SWEEP], env, port, out=tmp_path / "run.json")
    _, lerr = leader.communicate(timeout=120)
    _, ferr = follower.communicate(timeout=60)
    assert leader.returncode == 2 and follower.returncode == 2
    for err in (lerr, ferr):
        line = err.strip().splitlines()[-1]
        assert "node(s) 1 were started with other sweep arguments than node 0" in line, err
    assert not (tmp_path / "run.json").exists()
    assert not processes_with(env["PARABENCH_TEST_TAG"])


@pytest.mark.slow
def test_a_node_killed_mid_case_gives_a_row_and_leaves_no_process(tmp_path):
    env, port = tagged(), free_port()
    mark = tmp_path / "hanging"
    env["PARABENCH_FAULTY_MARK"] = str(mark)
    # Rank 0 (on node 0) hangs in its first step: the case is in flight when node 1 is killed.
    args = ["--strategies", "faulty", "--option", "launcher=torchrun", "--option", "fault=hang", *SWEEP,
            "--batch-sizes", "2,4", "--case-timeout", "30"]
    follower = node(1, args, env, port)
    leader = node(0, args, env, port, out=tmp_path / "run.json")
    assert wait_for(mark.exists, 180)  # the case is under way on every rank's side
    follower.send_signal(signal.SIGKILL)
    _, lerr = leader.communicate(timeout=180)
    assert leader.returncode == 1, lerr
    assert "node(s) 1 stopped answering; 1 case(s)" in lerr.strip().splitlines()[-1], lerr
    (row,) = rows_of(tmp_path / "run.json")  # batch 4 did not run: resume runs it once node 1 is back
    assert row["status"] in ("error", "timeout") and row["nnodes"] == 2, row
    assert "node(s) 1 stopped answering" in row["reason"]
    assert wait_for(lambda: not processes_with(env["PARABENCH_TEST_TAG"]), 30)


@pytest.mark.parametrize("environ, expected", [
    ({}, nodes.Nodes()),
    ({"SLURM_NTASKS": "1", "SLURM_PROCID": "0"}, nodes.Nodes()),
])
def test_one_node_needs_nothing(environ, expected):
    assert nodes.from_args(None, None, None, None, environ) == expected


def test_slurm_tasks_are_the_nodes(monkeypatch):
    monkeypatch.setattr(nodes, "first_slurm_host", lambda env: "gpu-a01")
    got = nodes.from_args(None, None, None, None, {"SLURM_NTASKS": "2", "SLURM_PROCID": "1", "SLURM_JOB_ID": "77",
                                                   "SLURM_JOB_NODELIST": "gpu-a[01-02]"})
    assert got == nodes.Nodes(2, 1, "gpu-a01", nodes.DEFAULT_PORT, "slurm-77")


@pytest.mark.parametrize("args, message", [
    ((2, None, "h:1", None), "needs --node-rank between 0 and 1"),
    ((2, 2, "h:1", None), "needs --node-rank between 0 and 1"),
    ((2, 0, None, None), "needs --rdzv-endpoint HOST:PORT"),
    ((2, 0, "h:x", None), "takes HOST:PORT"),
    ((0, 0, "h:1", None), "--nnodes takes 1 to 1024 hosts"),
    # One host: a rank or an endpoint was dropped without a word.
    ((None, 3, None, None), "--node-rank joins hosts into one run: give --nnodes N"),
    ((1, None, "foo:1", None), "--rdzv-endpoint joins hosts into one run"),
    ((None, 0, "foo:1", None), "--node-rank and --rdzv-endpoint join hosts"),
])
def test_bad_node_flags_get_one_line(args, message):
    with pytest.raises(nodes.NodesError, match=message.replace("(", r"\(")):
        nodes.from_args(*args, environ={})


def test_a_follower_runs_node_0s_worker_on_its_own_gpus():
    from bench.cases.case import Case, settings
    from bench.core.launch_spec import LaunchSpec
    from bench.core.placement import Placement

    case = Case.make("ddp", "fp32", "resnet18-small", Placement((0, 1), 2), 4, "eager", settings()).spec()
    spec = LaunchSpec.local("torchrun", (0, 1), 2, cases=(case,))
    published = LaunchSpec.from_json(json.loads(json.dumps(spec.to_json())))  # as node 0 publishes it
    mine = node_launches.on_these_gpus(published, [2, 3, 4])
    assert mine.gpus == (2, 3) and mine.cases[0].gpus == (2, 3) and mine.cases[0].strategy == "ddp"
    alone = LaunchSpec.local("local")
    assert node_launches.on_these_gpus(alone, []) == alone
    with pytest.raises(nodes.NodesError, match="this node has 1"):
        node_launches.on_these_gpus(published, [5])
