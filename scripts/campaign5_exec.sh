#!/usr/bin/env bash
# 4 H200s, one call (~9 min under `timeout 590`): the compile executions' GPU parity; the two
# execution targets the last campaign missed, with the step anatomy (resnet18 fp16 +
# channels_last at 256/GPU on 4 GPUs in eager, compile and cuda-graph; resnet18-small bf16
# graphed at 256/GPU on 4 GPUs, with and without DDP's knobs); then sharding on 4 GPUs
# (ddp, zero1, fsdp2) in three precisions, both models, at 256/GPU. Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign5-exec
FAST="--warmup 11 --steps 15 --trials 3 --case-timeout 200"
BEST="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100"
step 170 parity-compile env CUDA_VISIBLE_DEVICES=0,1 $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu and compile"
step 200 exec-r18 $PY -m bench run --gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp --models resnet18 \
  --precisions amp-fp16 --channels-last --sgd-impl fused --batch-sizes 256 $BEST --execution eager,compile,cuda-graph \
  --anatomy $FAST --out $W/h200x4-exec-r18.json
step 60 exec-small-default $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,4 --strategies single,ddp --models resnet18-small \
  --precisions amp-bf16 --channels-last --sgd-impl fused --batch-sizes 256 --execution cuda-graph --anatomy $FAST \
  --out $W/h200x4-exec-small-default.json
step 60 exec-small-best $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,4 --strategies single,ddp --models resnet18-small \
  --precisions amp-bf16 --channels-last --sgd-impl fused --batch-sizes 256 --execution cuda-graph $BEST $FAST \
  --out $W/h200x4-exec-small-best.json
# As in the 2-GPU sweep: resnet18 with channels_last, resnet18-small without.
SHARD="--gpus 0,1,2,3 --strategies single,ddp,zero1,fsdp2 --precisions fp32,amp-fp16,amp-bf16 --batch-sizes 256 --warmup 6 --steps 10 --trials 3"
step 80 shard-4gpu-small $PY -m bench run $SHARD --models resnet18-small --out $W/h200x4-shard-small.json
step 80 shard-4gpu-r18 $PY -m bench run $SHARD --models resnet18 --channels-last --out $W/h200x4-shard-r18.json
