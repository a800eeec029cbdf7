#!/usr/bin/env bash
# 2 H200s, one call (~7 min under `timeout 590`): the full 2-GPU sweep, the grid of campaigns 5
# and 6 (every strategy, three precisions; resnet18-small at 32/256/2048 and resnet18 with
# channels_last at 64/256 per GPU), with its wall time, on a CUDA JIT cache of its own:
#   cold  empties the cache first: a machine that never ran these kernels;
#   warm  keeps what the last call left: a user's next sweep on the same machine.
# The cache lives in .cache/ (ignored by git, so the device keeps it between calls).
# `warm` then records the GPU isolation comparison (scripts/isolation_gpu.sh), where no case
# pays the JIT compilation in its warm-up.
set -u
MODE=${1:?cold or warm}
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign7-sweep-$MODE
export CUDA_CACHE_PATH=$PWD/.cache/cuda-jit
[ "$MODE" = cold ] && rm -rf "$CUDA_CACHE_PATH"
echo "JIT cache before: $(du -sh "$CUDA_CACHE_PATH" 2>/dev/null || echo empty)" | tee -a $W/walltime.txt
SWEEP="--gpus 0,1 --precisions fp32,amp-fp16,amp-bf16 --warmup 6 --steps 10 --trials 3 --case-timeout 120"
T0=$(date +%s)
step 290 sweep-small-$MODE $PY -m bench run $SWEEP --models resnet18-small --batch-sizes 32,256,2048 --out $W/h200x2-sweep-small-$MODE.json
step 200 sweep-r18-$MODE $PY -m bench run $SWEEP --models resnet18 --channels-last --batch-sizes 64,256 --out $W/h200x2-sweep-r18-$MODE.json
echo "full 2-GPU sweep wall ($MODE JIT cache): $(( $(date +%s) - T0 )) s; cache after: $(du -sh "$CUDA_CACHE_PATH" | cut -f1)" | tee -a $W/walltime.txt
if [ "$MODE" = warm ]; then
  step 170 isolation bash scripts/isolation_gpu.sh $W/isolation
fi
