#!/usr/bin/env bash
# 4 GPUs, one call: GPU parity (with the DDP and SGD knobs), peak matrix rates, bare loop
# vs suite, the knobs behind the hardware-level targets (SGD kernels, DDP's own options,
# torch.compile), and the DataParallel cuDNN-autotuning effect. About 10 minutes: run it
# under `timeout 570`; the archive in $OUT is refreshed after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign-knobs
FAST="--warmup 8 --steps 12 --trials 3 --case-timeout 90"
R18="--models resnet18 --precisions amp-fp16 --channels-last --batch-sizes 256"
SMALL="--models resnet18-small --precisions amp-bf16 --channels-last --batch-sizes 1024"
BEST="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100"
step 170 parity-gpu $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k gpu
step 40 peak $PY -m bench.peak --out $W/peak.json
step 60 bareloop $PY -m bench.bareloop --model resnet18 --batch 256 --precision amp-fp16 --channels-last --out $W/bareloop.json
# 1 GPU: SGD kernels (for-loop was the suite's only update before; foreach is PyTorch's default)
for impl in foreach fused; do
  step 40 single-r18-$impl $PY -m bench run --gpus 0 --strategies single $R18 $FAST --sgd-impl $impl --out $W/h200x4-knobs-single-r18-$impl.json
  step 40 single-small-$impl $PY -m bench run --gpus 0 --strategies single $SMALL $FAST --sgd-impl $impl --out $W/h200x4-knobs-single-small-$impl.json
done
# DDP: defaults, then its own knobs, then those with the fused update
step 70 ddp-r18-default $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,4 --strategies ddp $R18 $FAST --out $W/h200x4-knobs-ddp-r18-default.json
step 90 ddp-r18-best $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies ddp $R18 $FAST $BEST --sgd-impl fused --out $W/h200x4-knobs-ddp-r18-best.json
step 70 ddp-small-default $PY -m bench run --gpus 0,1,2,3 --gpu-counts 2,4 --strategies ddp $SMALL $FAST --out $W/h200x4-knobs-ddp-small-default.json
step 90 ddp-small-best $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies ddp $SMALL $FAST $BEST --sgd-impl fused --out $W/h200x4-knobs-ddp-small-best.json
step 60 ddp-r18-nobcast $PY -m bench run --gpus 0,1,2,3 --strategies ddp $R18 $FAST $BEST --option broadcast_buffers=false --sgd-impl fused --out $W/h200x4-knobs-ddp-r18-nobcast.json
# torch.compile, 1 GPU (compilation happens in the warm-up)
step 120 compile $PY -m bench run --gpus 0 --strategies single --compile $R18 --warmup 15 --steps 12 --trials 3 \
  --case-timeout 110 --sgd-impl fused --out $W/h200x4-knobs-compile.json
# DataParallel with cuDNN autotuning on (its off figures come from the sweeps)
step 80 dp-cudnn-on $PY -m bench run --gpus 0,1 --strategies dp,dp-fn --cudnn-benchmark on --models resnet18-small \
  --precisions fp32 --batch-sizes 32,512 --warmup 3 --steps 4 --trials 2 --case-timeout 40 --out $W/h200x4-dp-cudnn-on.json
step 40 dp-cudnn-off $PY -m bench run --gpus 0,1 --strategies dp,dp-fn --cudnn-benchmark off --models resnet18-small \
  --precisions fp32 --batch-sizes 32,512 --warmup 3 --steps 4 --trials 2 --case-timeout 30 --out $W/h200x4-dp-cudnn-off.json
