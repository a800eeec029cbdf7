"""The cpu_bind knob: how CPUs are split among a host's processes, and what a run records."""
import os

import pytest

from bench.run import affinity
from tests.conftest import rows_of, run_cli


def test_blocks_split_the_cpus_contiguously_and_the_first_take_the_remainder():
    cpus = list(range(10))
    blocks = [affinity.split(cpus, i, 3) for i in range(3)]
    assert blocks == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert affinity.split([0, 1], 1, 4) == [0, 1]  # fewer CPUs than processes: no block is empty
    assert affinity.cpu_ranges([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"
    assert affinity.parse_ranges("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}


def test_exclusive_blocks_stay_within_the_gpus_numa_node(monkeypatch):
    # Two NUMA nodes of 4 CPUs; GPUs 0 and 1 on node 1, GPU 2 on node 0.
    monkeypatch.setattr(affinity, "numa_nodes", lambda: {0: {0, 1, 2, 3}, 1: {4, 5, 6, 7}})
    monkeypatch.setattr(affinity, "numa_node_of_gpu", lambda ordinal: {0: 1, 1: 1, 2: 0}[ordinal])
    started = list(range(8))
    assert [affinity.exclusive_cpus(started, r, 3, [0, 1, 2]) for r in range(3)] == [[4, 5], [6, 7], [0, 1, 2, 3]]
    # A GPU whose node sysfs does not name: every CPU, split among every process.
    monkeypatch.setattr(affinity, "numa_node_of_gpu", lambda ordinal: None)
    assert affinity.exclusive_cpus(started, 1, 2, [0, 1]) == [4, 5, 6, 7]


@pytest.mark.slow  # several sweeps or fits: make test-slow, which CI runs too
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs Linux CPU affinity")
def test_a_run_records_each_ranks_cpus_and_exclusive_ones_do_not_overlap(tmp_path):
    out = tmp_path / "bound.json"
    proc = run_cli("run", "--gpus", "", "--strategies", "ddp", "--cpu-replicas", "2", "--oversubscribe",
                   "--batch-sizes", "2", "--warmup", "1", "--steps", "2", "--trials", "1",
                   "--cpu-bind", "exclusive", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    (row,) = rows_of(out)
    assert row["status"] == "ok" and row["cpu_bind"] == "exclusive"
    ranks = [affinity.parse_ranges(text) for text in row["cpus_per_rank"].split(";")]
    allowed = sorted(os.sched_getaffinity(0))
    assert ranks == [set(affinity.split(allowed, r, 2)) for r in range(2)]
    if len(allowed) >= 2:
        assert not ranks[0] & ranks[1]
