"""Device memory a real world of n holds outside PyTorch's allocator (the NCCL communicator's
buffers), which a fake world of n (bench fit) does not have. Run one process per GPU:
    torchrun --standalone --nproc-per-node N -m bench.fit.comm_memory
(bench fit does, on a host of 2 or more GPUs: bench/fit/reserve.py). Each rank prints, as one
JSON line: device memory in use (the driver's view: total - free) less what PyTorch's allocator
holds, after CUDA starts, after the first all-reduce, and after a DDP step of resnet18 with its
buckets (the all-reduces DDP runs): the communicator the fit holds back. Then, as figures beside
it, after the collectives other strategies declare (`sends`): every parameter broadcast from its
owner as ZeroRedundancyOptimizer does after its step, and an all-gather and a reduce-scatter of
the parameters as FSDP2 does. NCCL connects some of its buffers only when a kind of collective
first runs; these say whether a strategy's real run holds more than a DDP step's."""
import json
import os

import torch
import torch.distributed as dist

MIB = 2 ** 20


def outside_allocator() -> float:
    free, total = torch.cuda.mem_get_info()
    return (total - free - torch.cuda.memory_reserved()) / MIB


def main() -> None:
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    torch.zeros(1, device="cuda")
    started = outside_allocator()
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    dist.all_reduce(torch.ones(1, device="cuda"))
    torch.cuda.synchronize()
    communicator = outside_allocator()
    from bench.workloads import get_workload

    model = torch.nn.parallel.DistributedDataParallel(get_workload("resnet18").build(seed=0).cuda(), device_ids=[rank])
    model(torch.randn(32, 3, 224, 224, device="cuda")).sum().backward()
    torch.cuda.synchronize()
    stepped = outside_allocator()
    outside = {"cuda_started": round(started, 1), "after_all_reduce": round(communicator, 1),
               "after_ddp_step": round(stepped, 1)}
    try:  # figures beside the one the fit holds back: a failure here loses only them
        outside.update(other_collectives(model, dist.get_world_size(), rank))
    except Exception as exc:  # noqa: BLE001 - said in the line, the communicator's figure stands
        outside["other_collectives_failed"] = f"{type(exc).__name__}: {exc}"[:200]
    print(json.dumps({"rank": rank, "world": dist.get_world_size(), "gpu": torch.cuda.get_device_name(),
                      "nccl": torch.cuda.nccl.version(), "outside_allocator_mib": outside,
                      "communicator_mib": round(stepped - started, 1)}), flush=True)
    dist.destroy_process_group()


def other_collectives(model, world: int, rank: int) -> dict:
    """Outside the allocator, cumulatively: after every parameter is broadcast from its owner, as
    ZeroRedundancyOptimizer does after its step; then after this rank's shard of the parameters is
    all-gathered and the whole reduce-scattered back, as FSDP2 does."""
    params = list(model.parameters())
    handles = [dist.broadcast(p.data, src=i % world, async_op=True) for i, p in enumerate(params)]
    for handle in handles:
        handle.wait()
    torch.cuda.synchronize()
    broadcast = outside_allocator()
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    flat = torch.nn.functional.pad(flat, (0, (-flat.numel()) % world))
    shard = flat.chunk(world)[rank].clone()
    dist.all_gather_into_tensor(flat, shard)
    dist.reduce_scatter_tensor(shard, flat)
    torch.cuda.synchronize()
    return {"after_broadcast": round(broadcast, 1), "after_all_gather_reduce_scatter": round(outside_allocator(), 1)}


if __name__ == "__main__":
    main()
