#!/usr/bin/env bash
# 4 GPUs: GPU parity tests, peak matrix rates, bare loop vs suite, scaling 1 -> 2 -> 4,
# DDP knobs, torch.compile, and the DataParallel cuDNN-autotuning effect.
set -u
OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/camp4; rm -rf $W; mkdir -p $W "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
trap 'tar czf "$OUT/campaign-4gpu.tgz" -C $W .' EXIT; trap 'exit 143' TERM INT
COMMON="--warmup 8 --steps 12 --trials 3 --case-timeout 150"
timeout 150 $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k gpu 2>&1 | grep -E "reference|passed|failed" | tee $W/parity-gpu.log
timeout 60 $PY -m bench.peak --out $W/peak.json | tail -8
timeout 90 $PY -m bench.bareloop --model resnet18 --batch 256 --precision amp-fp16 --channels-last --out $W/bareloop.json | tail -4
timeout 200 $PY -m bench run $COMMON --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies single,ddp,allreduce-scratch,dp \
  --models resnet18 --precisions fp32 --batch-sizes 256 --out $W/h200-scaling-resnet18-fp32.json 2>&1 | tail -12
timeout 120 $PY -m bench run $COMMON --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies single,ddp --channels-last \
  --models resnet18 --precisions amp-fp16 --batch-sizes 256 --out $W/h200-scaling-resnet18-fp16.json 2>&1 | tail -6
timeout 150 $PY -m bench run $COMMON --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies single,ddp --channels-last \
  --models resnet18-small --precisions amp-bf16,fp32 --batch-sizes 1024 --out $W/h200-scaling-small.json 2>&1 | tail -10
timeout 60 $PY -m bench run $COMMON --gpus 0,1,2,3 --strategies ddp --channels-last --models resnet18-small \
  --precisions amp-bf16 --batch-sizes 1024 --option static_graph=true --option gradient_as_bucket_view=true \
  --option bucket_cap_mb=100 --out $W/h200-ddp-knobs.json 2>&1 | tail -3
timeout 90 $PY -m bench run --gpus 0,1 --strategies dp,dp-fn --cudnn-benchmark on --batch-sizes 64,512 \
  --warmup 3 --steps 4 --trials 2 --case-timeout 60 --out $W/h200-dp-cudnn-on.json 2>&1 | tail -5
timeout 150 $PY -m bench run --gpus 0 --strategies single --compile --channels-last --models resnet18 \
  --precisions amp-fp16 --batch-sizes 256 --warmup 15 --steps 12 --trials 3 --case-timeout 140 \
  --out $W/h200-compile.json 2>&1 | tail -3
