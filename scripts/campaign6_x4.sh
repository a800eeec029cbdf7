#!/usr/bin/env bash
# 4 H200s, one call (~7 min under `timeout 430`): the two 4-GPU execution targets with DDP's
# buffers broadcast off on top of its knobs (resnet18-small bf16 + channels_last graphed at
# 256 and 1024/GPU; resnet18 fp16 + channels_last at 256/GPU in eager, compile and
# cuda-graph), then the rest of the 4-GPU sharding ladder (resnet18-small fp16/bf16 at 32
# and 2048/GPU, resnet18 at 64/GPU). Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign6-x4
FAST="--warmup 11 --steps 15 --trials 3 --case-timeout 200"
KNOBS="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100 --option broadcast_buffers=false"
step 60 graph-small-4gpu $PY -m bench run --gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp --models resnet18-small \
  --precisions amp-bf16 --channels-last --sgd-impl fused --batch-sizes 256,1024 --execution cuda-graph $KNOBS --anatomy $FAST \
  --out $W/h200x4-graph-small-nobcast.json
step 170 exec-r18-4gpu $PY -m bench run --gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp --models resnet18 \
  --precisions amp-fp16 --channels-last --sgd-impl fused --batch-sizes 256 --execution eager,cuda-graph,compile $KNOBS \
  --anatomy $FAST --out $W/h200x4-exec-r18-nobcast.json
SHARD="--gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp,zero1,fsdp2 --warmup 6 --steps 10 --trials 3"
step 90 shard-4gpu-small-ladder-amp $PY -m bench run $SHARD --models resnet18-small --precisions amp-fp16,amp-bf16 \
  --batch-sizes 32,2048 --out $W/h200x4-shard-small-ladder-amp.json
step 100 shard-4gpu-r18-64 $PY -m bench run $SHARD --models resnet18 --channels-last --precisions fp32,amp-fp16,amp-bf16 \
  --batch-sizes 64 --out $W/h200x4-shard-r18-64.json
