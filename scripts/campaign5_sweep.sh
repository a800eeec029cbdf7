#!/usr/bin/env bash
# 4 H200s, one call (~9 min under `timeout 590`): the full 2-GPU sweep on GPUs 0,1 with its
# wall time and, per case, where the time went (worker start, build, warm-up, timed, counting
# step); the NVML topology as recorded; then pytest-benchmark three times on an unchanged
# tree, each compared with the first (`--benchmark-compare-fail=median:10%`). Archive after
# every step.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign5-sweep
nvidia-smi topo -m > $W/topo.txt 2>&1
$PY -c "from bench import envinfo; print(envinfo.for_gpus((0, 1)))" > $W/envinfo-gpus.txt 2>&1
# The grid of the last two campaigns' full 2-GPU sweeps (745 s, then 372 s cut with ~30 cases
# left): every strategy, three precisions; resnet18-small at 32/256/2048 and resnet18
# (channels_last) at 64/256 per GPU.
SWEEP="--gpus 0,1 --precisions fp32,amp-fp16,amp-bf16 --warmup 6 --steps 10 --trials 3 --case-timeout 120"
T0=$(date +%s)
step 260 sweep-2gpu-small $PY -m bench run $SWEEP --models resnet18-small --batch-sizes 32,256,2048 --out $W/h200x2-sweep-small.json
step 230 sweep-2gpu-r18 $PY -m bench run $SWEEP --models resnet18 --channels-last --batch-sizes 64,256 --out $W/h200x2-sweep-r18.json
echo "full 2-GPU sweep wall: $(( $(date +%s) - T0 )) s" | tee -a $W/walltime.txt
BM="-p no:cacheprovider benchmarks -q --benchmark-storage=file://$W/pytest-benchmark"
step 40 pytest-bench-1 $PY -m pytest $BM --benchmark-autosave
for i in 2 3; do
  step 40 pytest-bench-$i $PY -m pytest $BM --benchmark-autosave --benchmark-compare=0001 --benchmark-compare-fail=median:10%
done
