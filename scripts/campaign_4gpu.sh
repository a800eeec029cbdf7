#!/usr/bin/env bash
# 4 GPUs: the scaling curves 1 -> 2 -> 4 with PyTorch's defaults. Parity, peak rates, the
# bare loop, DDP's knobs, torch.compile and the cuDNN effect are in campaign_knobs.sh.
set -u
OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/camp4; rm -rf $W; mkdir -p $W "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
trap 'tar czf "$OUT/campaign-4gpu.tgz" -C $W .' EXIT; trap 'exit 143' TERM INT
COMMON="--gpus 0,1,2,3 --gpu-counts 1,2,4 --warmup 6 --steps 10 --trials 3 --case-timeout 90"
timeout 200 $PY -m bench run $COMMON --strategies single,ddp,allreduce-scratch,dp \
  --models resnet18 --precisions fp32 --batch-sizes 256 --out $W/h200-scaling-resnet18-fp32.json 2>&1 | tail -12
timeout 150 $PY -m bench run $COMMON --strategies single,ddp --channels-last \
  --models resnet18 --precisions amp-fp16 --batch-sizes 256 --out $W/h200-scaling-resnet18-fp16.json 2>&1 | tail -6
timeout 150 $PY -m bench run $COMMON --strategies single,ddp --channels-last \
  --models resnet18-small --precisions amp-bf16,fp32 --batch-sizes 1024 --out $W/h200-scaling-small.json 2>&1 | tail -10
