#!/usr/bin/env bash
# 2 H200s, one call (~5 min under `timeout 320`): FSDP2 with and without resharding after the
# forward side by side (alternating runs, both models at 256/GPU, fp32 and bf16, ddp in
# every run as the reference), and resnet18 fp16 + channels_last at 256/GPU with DDP's knobs
# and its buffers' broadcast off, eager and graphed. Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign6-x2b
FAST="--warmup 11 --steps 15 --trials 3 --case-timeout 200"
KNOBS="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100 --option broadcast_buffers=false"
step 90 exec-r18-2gpu $PY -m bench run --gpus 0,1 --gpu-counts 2 --strategies single,ddp --models resnet18 \
  --precisions amp-fp16 --channels-last --sgd-impl fused --batch-sizes 256 --execution eager,cuda-graph $KNOBS $FAST \
  --out $W/h200x2-exec-r18-nobcast.json
FSDP="--gpus 0,1 --gpu-counts 2 --strategies ddp,fsdp2 --models resnet18-small,resnet18 --precisions fp32,amp-bf16 --batch-sizes 256 --warmup 6 --steps 10 --trials 3"
for i in 1 2; do
  step 55 fsdp2-reshard-$i $PY -m bench run $FSDP --out $W/h200x2-fsdp2-reshard-$i.json
  step 55 fsdp2-noreshard-$i $PY -m bench run $FSDP --option reshard_after_forward=false --out $W/h200x2-fsdp2-noreshard-$i.json
done
