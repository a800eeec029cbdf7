"""pytest-benchmark: record the GPU and software facts in the saved JSON's machine_info."""


def pytest_benchmark_update_machine_info(config, machine_info):
    from bench import envinfo

    facts = envinfo.collect()
    machine_info["parabench"] = {k: facts[k] for k in ("torch", "cuda", "cudnn", "nccl", "driver", "cpu", "git_commit")}
    machine_info["gpus"] = envinfo.gpus_on_host()
