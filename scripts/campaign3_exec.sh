#!/usr/bin/env bash
# 4 H200s, one call (~9 min under `timeout 580`): GPU parity of every strategy and execution,
# then the execution targets (CUDA graphs for single and ddp, resnet18-small bf16 + channels_last
# at 32/256/1024 per GPU on 1, 2 and 4 GPUs; resnet18 fp16 + channels_last 256/GPU on 4 GPUs),
# then sharding (ddp, zero1, fsdp2 both reshard settings) side by side. The archive in $OUT
# is refreshed after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign3-exec
nvidia-smi topo -m > $W/topo.txt 2>&1
FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 120"
SMALL="--models resnet18-small --precisions amp-bf16 --channels-last --sgd-impl fused"
R18="--models resnet18 --precisions amp-fp16 --channels-last --sgd-impl fused --batch-sizes 256"
BEST="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100"
step 200 parity-gpu $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu and not compile"
step 170 exec-small $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies single,ddp $SMALL \
  --execution eager,cuda-graph --batch-sizes 32,256,1024 $FAST --out $W/h200x4-exec-small.json
step 90 exec-r18 $PY -m bench run --gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp $R18 $BEST \
  --execution eager,cuda-graph $FAST --out $W/h200x4-exec-r18.json
step 110 shard $PY -m bench run --gpus 0,1 --strategies ddp,zero1,fsdp2 --models resnet18,resnet18-small \
  --precisions fp32,amp-bf16 --channels-last --batch-sizes 256 $FAST --out $W/h200x4-shard.json
step 60 shard-noreshard $PY -m bench run --gpus 0,1 --strategies fsdp2 --option reshard_after_forward=false \
  --models resnet18,resnet18-small --precisions fp32,amp-bf16 --channels-last --batch-sizes 256 $FAST \
  --out $W/h200x4-shard-noreshard.json
