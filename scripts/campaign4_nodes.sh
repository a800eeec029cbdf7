#!/usr/bin/env bash
# 4 H200s of one host, one call (~6 min): multi-node mode against one node. ddp resnet18
# amp-fp16 + channels_last 256/GPU and resnet18-small amp-bf16 + channels_last 1024/GPU (single
# beside them, on node 0, for the speed-up): 1 node x 4 GPUs, then 2 "nodes" x 2 GPUs on the same
# host (two bench processes, c10d rendezvous on localhost), first each node naming its own GPUs of
# the 4 it sees, then each node seeing only its 2 (CUDA_VISIBLE_DEVICES=0,1 and 2,3).
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign4-nodes
export FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 180"
grid() {  # grid MODEL PRECISION BATCH
  echo --strategies single,ddp --models $1 --precisions $2 --channels-last --batch-sizes $3 $FAST
}
two_nodes() {  # two_nodes NAME PORT GPUS0 GPUS1 VISIBLE0 VISIBLE1 GRID...
  local name=$1 port=$2 g0=$3 g1=$4 v0=$5 v1=$6; shift 6
  CUDA_VISIBLE_DEVICES=$v1 timeout 280 $PY -m bench run "$@" --gpus $g1 --nnodes 2 --node-rank 1 \
    --rdzv-endpoint 127.0.0.1:$port > $W/$name-node1.log 2>&1 &
  CUDA_VISIBLE_DEVICES=$v0 $PY -m bench run "$@" --gpus $g0 --nnodes 2 --node-rank 0 \
    --rdzv-endpoint 127.0.0.1:$port --out $W/$name.json
  wait
}
export -f grid two_nodes
# resnet18 fp16 with PyTorch's defaults is host-bound and noisy: it runs twice.
for cfg in "resnet18 amp-fp16 256 a" "resnet18-small amp-bf16 1024 a" "resnet18 amp-fp16 256 b"; do
  set -- $cfg; tag=$1-$2-$4
  step 150 one-node-$tag $PY -m bench run $(grid $1 $2 $3) --gpus 0,1,2,3 --out $W/one-node-$tag.json
  step 170 two-nodes-$tag bash -c "two_nodes two-nodes-$tag 29611 0,1 2,3 0,1,2,3 0,1,2,3 $(grid $1 $2 $3)"
  step 170 two-nodes-visible-$tag bash -c "two_nodes two-nodes-visible-$tag 29612 0,1 0,1 0,1 2,3 $(grid $1 $2 $3)"
done
