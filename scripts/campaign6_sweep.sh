#!/usr/bin/env bash
# 2 H200s, one call (~8 min under `timeout 590`): whether one OpenMP thread per GPU worker
# (the local worker's default while this ran, since reverted: the slow first warm-up was the
# CUDA driver's JIT cache, see README) moves warm-up or throughput: `single` resnet18-small
# at 32 and 256, three alternations of OMP_NUM_THREADS=<cores> against one thread, and DDP on
# one GPU with the full pool; then the full 2-GPU sweep, the grid of campaign 5 (418 s
# there), with its wall time. Archive after every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign6-sweep
CORES=$(nproc)
AB="--gpus 0 --strategies single --precisions amp-fp16 --batch-sizes 32,256 --warmup 6 --steps 10 --trials 3"
for i in 1 2 3; do
  step 30 omp-pool-$i env OMP_NUM_THREADS=$CORES $PY -m bench run $AB --out $W/omp-pool-$i.json
  step 30 omp-one-$i $PY -m bench run $AB --out $W/omp-one-$i.json
done
step 30 omp-pool-ddp1 env OMP_NUM_THREADS=$CORES $PY -m bench run ${AB/single/ddp} --gpu-counts 1 --out $W/omp-pool-ddp1.json
SWEEP="--gpus 0,1 --precisions fp32,amp-fp16,amp-bf16 --warmup 6 --steps 10 --trials 3 --case-timeout 120"
T0=$(date +%s)
step 240 sweep-2gpu-small $PY -m bench run $SWEEP --models resnet18-small --batch-sizes 32,256,2048 --out $W/h200x2-sweep-small.json
step 200 sweep-2gpu-r18 $PY -m bench run $SWEEP --models resnet18 --channels-last --batch-sizes 64,256 --out $W/h200x2-sweep-r18.json
echo "full 2-GPU sweep wall: $(( $(date +%s) - T0 )) s" | tee -a $W/walltime.txt
