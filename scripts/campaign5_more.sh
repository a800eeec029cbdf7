#!/usr/bin/env bash
# 4 H200s, one call (~7 min under `timeout 560`): the compiled steps' GPU parity under their
# stated tolerance and the anatomy's GPU tests; sharding on 4 GPUs at the other batches of
# the 2-GPU sweep; FSDP2 without resharding on 2 and 4 GPUs; the compile execution of single
# and ddp on 1, 2 and 4 GPUs (resnet18-small bf16 + channels_last, 256/GPU). Archive after
# every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign5-more
step 150 parity-compile env CUDA_VISIBLE_DEVICES=0,1 $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu and compile"
step 60 anatomy-gpu env CUDA_VISIBLE_DEVICES=0,1 $PY -m pytest -q -s -p no:cacheprovider tests/test_anatomy.py -k gpu
SHARD="--gpus 0,1,2,3 --gpu-counts 4 --strategies single,ddp,zero1,fsdp2 --precisions fp32,amp-fp16,amp-bf16 --warmup 6 --steps 10 --trials 3"
step 90 shard-4gpu-small-ladder $PY -m bench run $SHARD --models resnet18-small --batch-sizes 32,2048 --out $W/h200x4-shard-small-ladder.json
step 60 shard-4gpu-r18-64 $PY -m bench run $SHARD --models resnet18 --channels-last --batch-sizes 64 --out $W/h200x4-shard-r18-64.json
step 70 fsdp2-noreshard $PY -m bench run --gpus 0,1,2,3 --gpu-counts 2,4 --strategies fsdp2 --option reshard_after_forward=false \
  --models resnet18-small --precisions fp32,amp-fp16,amp-bf16 --batch-sizes 256 --warmup 6 --steps 10 --trials 3 \
  --out $W/h200x4-fsdp2-noreshard-small.json
step 170 exec-small-compile $PY -m bench run --gpus 0,1,2,3 --gpu-counts 1,2,4 --strategies single,ddp --models resnet18-small \
  --precisions amp-bf16 --channels-last --sgd-impl fused --batch-sizes 256 --execution compile \
  --warmup 11 --steps 15 --trials 3 --case-timeout 200 --out $W/h200x4-exec-small-compile.json
