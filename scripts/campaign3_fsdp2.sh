#!/usr/bin/env bash
# 2 of 4 H200s, a short call: FSDP2's parameter policies (off and auto) in amp-fp16/amp-bf16,
# both models, 256/GPU; the GPU parity of DDP's knobs and compression hooks.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign3-fsdp2
FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 120"
for mp in off auto; do
  step 80 fsdp2-$mp $PY -m bench run --gpus 0,1 --strategies ddp,fsdp2 --option mixed_precision=$mp --models resnet18,resnet18-small \
    --precisions amp-fp16,amp-bf16 --channels-last --batch-sizes 256 $FAST --out $W/h200x2-fsdp2-mp-$mp.json
done
step 120 parity-knobs $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu_ddp_knobs"
