#!/usr/bin/env bash
# 2 H200s, one call (~8 min under `timeout 590`): where a fresh worker's warm-up goes
# (`single` in the local worker, with OMP_NUM_THREADS=1, with cuDNN benchmark off, and DDP
# on one GPU under torchrun); graphed DDP on 2 GPUs with and without its knobs
# (resnet18-small bf16 + channels_last, 256 and 1024/GPU); the compile execution at the
# batches the last campaign left out (resnet18-small at 32 and 1024/GPU, resnet18 fp16 at
# 256/GPU on 2 GPUs). Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign6-x2
FAST="--warmup 11 --steps 15 --trials 3 --case-timeout 200"
KNOBS="--option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100"
WARM="--gpus 0 --precisions fp32,amp-fp16 --batch-sizes 32,256 --warmup 6 --steps 10 --trials 3"
step 45 warm-local $PY -m bench run $WARM --strategies single --out $W/warm-local.json
step 45 warm-omp1 env OMP_NUM_THREADS=1 $PY -m bench run $WARM --strategies single --out $W/warm-omp1.json
step 45 warm-nobench $PY -m bench run $WARM --strategies single --cudnn-benchmark off --out $W/warm-nobench.json
step 45 warm-ddp1 $PY -m bench run $WARM --strategies ddp --gpu-counts 1 --out $W/warm-ddp1.json
SMALL="--gpus 0,1 --gpu-counts 2 --strategies single,ddp --models resnet18-small --precisions amp-bf16 --channels-last --sgd-impl fused"
step 50 graph-default $PY -m bench run $SMALL --batch-sizes 256,1024 --execution cuda-graph $FAST --out $W/h200x2-graph-default.json
step 50 graph-knobs $PY -m bench run $SMALL --batch-sizes 256,1024 --execution cuda-graph $KNOBS $FAST --out $W/h200x2-graph-knobs.json
step 60 graph-nobcast $PY -m bench run $SMALL --batch-sizes 256,1024 --execution cuda-graph $KNOBS \
  --option broadcast_buffers=false --anatomy $FAST --out $W/h200x2-graph-nobcast.json
step 120 compile-small $PY -m bench run $SMALL --batch-sizes 32,1024 --execution compile $FAST --out $W/h200x2-compile-small.json
step 100 compile-r18 $PY -m bench run --gpus 0,1 --gpu-counts 1,2 --strategies single,ddp --models resnet18 \
  --precisions amp-fp16 --channels-last --sgd-impl fused --batch-sizes 256 --execution eager,compile $KNOBS $FAST \
  --out $W/h200x2-compile-r18.json
