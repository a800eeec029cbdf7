#!/usr/bin/env bash
# 2 H200s of a 4-GPU host, one call (~8 min under `timeout 580`): the step anatomy of single,
# ddp (defaults and best knobs), allreduce-scratch and dp for resnet18 amp-fp16 + channels_last
# at 256/GPU and resnet18-small amp-bf16 + channels_last at 32 and 1024/GPU, with the CUDA-graph
# execution of single and ddp beside them (the launch-free ceiling); the same sweeps without
# --anatomy (the timing must not move); small traces for the test fixture; the GPU tests of
# the anatomy (a host sleep shows as idle).
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign4-anatomy
FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 120"
R18="--models resnet18 --precisions amp-fp16 --channels-last --batch-sizes 256"
SMALL="--models resnet18-small --precisions amp-bf16 --channels-last --batch-sizes 32,1024"
BEST="--sgd-impl fused --option gradient_as_bucket_view=true --option static_graph=true --option bucket_cap_mb=100"
sweep() {  # sweep NAME EXTRA...: the anatomy grid for one model setting
  local name=$1; shift
  step 150 "$name" $PY -m bench run --gpus 0,1 --strategies single,ddp,allreduce-scratch,dp "$@" $FAST \
    --out $W/$name.json
  step 100 "$name-best" $PY -m bench run --gpus 0,1 --strategies ddp $BEST "$@" $FAST --out $W/$name.json --resume
  step 100 "$name-graph" $PY -m bench run --gpus 0,1 --strategies single,ddp --execution cuda-graph --sgd-impl fused \
    "$@" $FAST --out $W/$name.json --resume
}
step 60 fixture $PY -m bench run --gpus 0,1 --strategies single,ddp --models resnet18-small --precisions amp-bf16 \
  --channels-last --batch-sizes 32 --warmup 3 --steps 5 --trials 1 --anatomy --anatomy-steps 2 --out $W/fixture.json
sweep anatomy-r18 $R18 --anatomy
sweep anatomy-small $SMALL --anatomy
sweep plain-r18 $R18
sweep plain-small $SMALL
step 120 anatomy-tests $PY -m pytest -q -s -p no:cacheprovider tests/test_anatomy.py
