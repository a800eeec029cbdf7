#!/usr/bin/env bash
# 2 H200s, one call (~4 min): which earlier cases leave DDP's case (resnet18-small fp32, 256
# per GPU) in its slow mode. Three arms, interleaved, three rounds: alone in a fresh torchrun
# worker; after fp32 at 32 only (same precision); after amp-bf16 at 256 only (same batch).
set -u
source "$(dirname "$0")/campaign_lib.sh"; campaign campaign7-ddp-isolation
export CUDA_CACHE_PATH=$PWD/.cache/cuda-jit
P="--warmup 10 --steps 20 --trials 3 --models resnet18-small --gpus 0,1 --gpu-counts 2 --strategies ddp"
$PY -m bench run $P --precisions fp32,amp-bf16 --batch-sizes 32,256 --out $W/jit-warmup.json > $W/jit-warmup.log 2>&1
T0=$(date +%s)
for n in 1 2 3; do
  $PY -m bench run $P --precisions fp32 --batch-sizes 256 --out $W/alone/ddp-alone-$n.json > $W/alone-$n.log 2>&1
  $PY -m bench run $P --precisions fp32 --batch-sizes 32,256 --out $W/fp32/ddp-after-$n.json > $W/fp32-$n.log 2>&1
  $PY -m bench run $P --precisions amp-bf16,fp32 --batch-sizes 256 --out $W/bf16/ddp-after-$n.json > $W/bf16-$n.log 2>&1
  tar czf "$ARCHIVE" -C "$W" .
done
echo "ddp isolation arms: $(( $(date +%s) - T0 )) s" | tee -a $W/walltime.txt
for arm in fp32 bf16; do cp $W/alone/*.json $W/$arm/; echo "== after $arm"; $PY -m bench.isolation $W/$arm; done | tee $W/summary.txt
