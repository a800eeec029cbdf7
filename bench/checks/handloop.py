"""The fastest a careful hand-written loop gets on this GPU: the yardstick for a search's answer.

`python -m bench check bareloop --variants eager,compile,compile-ro,graph --batches 256,1024,2048
--model resnet18-small --precision amp-bf16 --channels-last --optimizer-impl fused --out FILE` trains
the workload in the plainest code that does each thing, with none of the suite's machinery:

- eager: forward under autocast, backward, optimiser step, zero_grad;
- compile / compile-ro: the model and its loss under torch.compile (default mode / reduce-overhead), one
  fresh compile per batch size (torch._dynamo.reset(): a second shape would recompile with a
  dynamic batch dimension, 1.4x slower on an H100);
- graph: the whole step captured once in a CUDA graph (PyTorch's recipe: warm-up on a side
  stream, gradients left unset before capture, autocast with cache_enabled=False) and replayed.

For a language model (`--model gpt2-124m`) it is nanoGPT's train.py loop: token ids and next-token
targets on the GPU, `F.cross_entropy` over the flattened logits, AdamW with nanoGPT's two groups
(weight decay 0.1 on matrices), betas (0.9, 0.95), learning rate 6e-4, fused where
`--optimizer-impl fused` says; throughput in tokens/s. The model itself is the workload's (the same
weights as every strategy's); everything around it is written out here.

Each variant is timed the most favourable way: a window of steps with one synchronisation at
each end, median of `rounds` windows. What the loop reaches is reported per batch and variant,
with the best; a search's recommendation is set against that best (its rows and this file come
from the same call on the same GPU).
"""
from __future__ import annotations

import json
import statistics
import time

VARIANTS = ("eager", "compile", "compile-ro", "graph")
KERNELS = {"for-loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def _optimizer(model, kind: str, kernels: str, captured: bool):
    """The optimiser as nanoGPT and the ResNet recipes write it, with no suite code."""
    import torch

    if kind == "sgd":
        return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4, **KERNELS[kernels])
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, capturable=captured, **KERNELS[kernels])


def _loop(model_name: str, batch: int, precision: str, channels_last: bool, kernels: str, variant: str):
    """(a function that runs one training step, items per step) for one variant."""
    import torch
    from torch.nn import functional as F

    from bench.core.precision import get_precision
    from bench.workloads import get_workload

    torch._dynamo.reset()
    workload = get_workload(model_name)
    tokens = workload.data.kind == "tokens"
    fmt = torch.channels_last if channels_last and not tokens else torch.contiguous_format
    torch.manual_seed(0)
    model = workload.build(seed=0).cuda().to(memory_format=fmt)
    x, y = workload.synthetic_batch(batch)
    x, y = x.cuda(), y.cuda()
    if not tokens:
        x = x.contiguous(memory_format=fmt)
    opt = _optimizer(model, workload.data.optimizer, kernels, captured=variant == "graph")
    dtype = getattr(torch, get_precision(precision).autocast_dtype or "float32")
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    def forward_loss(inputs, targets):
        out = model(inputs)
        if tokens:  # nanoGPT: every position against the next token
            return F.cross_entropy(out.view(-1, out.size(-1)), targets.view(-1))
        return F.cross_entropy(out, targets)

    # The loss compiled with the model, as nanoGPT's model computes it in its compiled forward.
    if variant == "compile":
        forward_loss = torch.compile(forward_loss)
    elif variant == "compile-ro":
        forward_loss = torch.compile(forward_loss, mode="reduce-overhead")

    def step():
        with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32, cache_enabled=variant != "graph"):
            loss = forward_loss(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    items = batch * workload.data.items_per_sample
    if variant != "graph":
        return step, items
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(11):
            step()
    torch.cuda.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay, items


def measure(model_name: str, batch: int, precision: str, channels_last: bool, kernels: str, variant: str,
            warmup: int, steps: int, rounds: int) -> dict:
    import torch

    from bench.workloads import get_workload

    started = time.perf_counter()
    step, items = _loop(model_name, batch, precision, channels_last, kernels, variant)
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    windows = []
    for _ in range(rounds):
        begin = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        windows.append(items * steps / (time.perf_counter() - begin))
    torch.cuda.empty_cache()
    data = get_workload(model_name).data
    return {"model": model_name, "batch_per_gpu": batch, "precision": precision,
            "channels_last": channels_last and data.spatial, "optimizer": data.optimizer, "optimizer_impl": kernels,
            "variant": variant, "unit": data.unit.name, "items_per_s": statistics.median(windows), "windows": windows,
            "seconds": round(time.perf_counter() - started, 1)}


def run(args) -> dict:
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("parabench: check bareloop measures a GPU: this host has none (CUDA not available)")
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"parabench: unknown --variants {', '.join(unknown)}: choose from {', '.join(VARIANTS)}")
    batches = [int(b) for b in str(args.batches or args.batch).split(",")]
    torch.backends.cudnn.benchmark = True
    rows = []
    for batch in batches:
        for variant in variants:
            try:
                rows.append(measure(args.model, batch, args.precision, args.channels_last, args.optimizer_impl, variant,
                                    args.warmup, args.steps, args.rounds))
            except torch.OutOfMemoryError as exc:
                rows.append({"model": args.model, "batch_per_gpu": batch, "variant": variant, "status": "oom",
                             "reason": str(exc).splitlines()[0]})
                torch.cuda.empty_cache()
            print(json.dumps(rows[-1]), flush=True)
    best = {}
    for row in rows:
        if "items_per_s" in row and row["items_per_s"] > best.get(row["batch_per_gpu"], {}).get("items_per_s", 0):
            best[row["batch_per_gpu"]] = row
    result = {"schema": "parabench-handloop/1", "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
              "command": " ".join(__import__("sys").argv), "rows": rows,
              "best": {str(b): {"variant": r["variant"], "items_per_s": r["items_per_s"]}
                       for b, r in sorted(best.items())}}
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(result, fh, indent=1)
    return result
