#!/usr/bin/env bash
# 2 H200s, one call (~5 min): where the counting step's time goes on GPUs
# (scripts/probe_counting.py), then DDP's GPU isolation record again, three more attempts,
# interleaved with three in workers that never freeze their heap (scripts/nofreeze), to see
# whether the slower "after others" medians of campaign 7 come from the freeze.
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign7-probe
export CUDA_CACHE_PATH=$PWD/.cache/cuda-jit
step 90 counting env PYTHONPATH=$PWD $PY scripts/probe_counting.py $W/counting.json
P="--warmup 10 --steps 20 --trials 3 --models resnet18-small --gpus 0,1 --gpu-counts 2 --strategies ddp"
$PY -m bench run $P --precisions fp32 --batch-sizes 256 --out $W/jit-warmup.json > $W/jit-warmup.log 2>&1
iso() {  # iso FOLDER ATTEMPT [env...]
  local dir=$1 n=$2; shift 2; mkdir -p $dir
  env "$@" $PY -m bench run $P --precisions fp32 --batch-sizes 256 --out $dir/ddp-alone-$n.json > $dir/ddp-alone-$n.log 2>&1
  env "$@" $PY -m bench run $P --precisions amp-bf16,fp32 --batch-sizes 32,256 --out $dir/ddp-after-$n.json > $dir/ddp-after-$n.log 2>&1
}
T0=$(date +%s)
for n in 3 4 5; do
  iso $W/iso-freeze $n PARABENCH_PROBE=freeze
  iso $W/iso-nofreeze $n PYTHONPATH=$PWD/scripts/nofreeze
  tar czf "$ARCHIVE" -C "$W" .
done
echo "isolation probe: $(( $(date +%s) - T0 )) s" | tee -a $W/walltime.txt
for d in iso-freeze iso-nofreeze; do echo "== $d"; $PY -m bench.isolation $W/$d; done | tee $W/isolation-summary.txt
