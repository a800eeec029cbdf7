#!/usr/bin/env bash
# 4 H200s, one call (~8 min under `timeout 560`): fsdp2 with channels_last, graphed DDP on
# 4 GPUs and again on 2, the GPU parity of the compression hooks, then the full 2-GPU sweep
# (every strategy, three precisions, both models) with its wall time. Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign3-sweep
FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 120"
SMALL="--models resnet18-small --precisions amp-bf16 --channels-last --sgd-impl fused"
step 70 shard-fsdp2 $PY -m bench run --gpus 0,1 --strategies fsdp2 --models resnet18,resnet18-small \
  --precisions fp32,amp-bf16 --channels-last --batch-sizes 256 $FAST --out $W/h200x4-shard-fsdp2.json
step 90 exec-small-graph $PY -m bench run --gpus 0,1,2,3 --gpu-counts 2,4 --strategies single,ddp $SMALL \
  --execution cuda-graph --batch-sizes 32,256,1024 $FAST --out $W/h200x4-exec-small-graph.json
step 60 parity-hooks $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu and comm_hook"
# The grid of the last campaign's full 2-GPU sweep (745 s then, one worker per group): every
# strategy, three precisions; resnet18-small at 32/256/2048 and resnet18 at 64/256 per GPU.
SWEEP="--gpus 0,1 --precisions fp32,amp-fp16,amp-bf16 --warmup 6 --steps 10 --trials 3 --case-timeout 120"
T0=$(date +%s)
step 200 sweep-2gpu-small $PY -m bench run $SWEEP --models resnet18-small --batch-sizes 32,256,2048 --out $W/h200x2-sweep-small.json
step 170 sweep-2gpu-r18 $PY -m bench run $SWEEP --models resnet18 --channels-last --batch-sizes 64,256 --out $W/h200x2-sweep-r18.json
echo "full 2-GPU sweep wall: $(( $(date +%s) - T0 )) s" | tee -a $W/walltime.txt
