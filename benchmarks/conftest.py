"""pytest-benchmark: the machine's hardware in machine_info (what makes two machines
different), the software and the commit in each benchmark's extra_info (a commit in
machine_info would make every comparison across commits warn that the machine differs)."""
import pytest


def pytest_benchmark_update_machine_info(config, machine_info):
    from bench.measure import envinfo

    machine_info["gpus"] = envinfo.gpus_on_host()


@pytest.fixture(scope="session")
def software():
    from bench.measure import envinfo

    facts = {**envinfo.collect(), **envinfo.runtime_libraries()}  # this process runs the steps: ask its torch
    return {k: facts[k] for k in ("torch", "cuda", "cudnn", "nccl", "driver", "git_commit")}
