#!/usr/bin/env bash
# The GPU record of tests/test_isolation.py: the same case (resnet18-small fp32, 256 per GPU)
# measured alone in a fresh worker and after others in the same worker (the amp-bf16 series
# and batch 32 first), twice each side, interleaved; `single` on one GPU and DDP on two.
# Writes the rows under $1 and prints the comparison (bench/isolation.py).
set -u
DIR=${1:?folder}; mkdir -p "$DIR"; PY=${PY:-python3}
P="--warmup 10 --steps 20 --trials 3 --models resnet18-small"
for attempt in 1 2; do
  for s in single ddp; do
    G="--gpus 0"; [ $s = ddp ] && G="--gpus 0,1 --gpu-counts 2"
    $PY -m bench run $P $G --strategies $s --precisions fp32 --batch-sizes 256 --out "$DIR/$s-alone-$attempt.json" > "$DIR/$s-alone-$attempt.log" 2>&1
    $PY -m bench run $P $G --strategies $s --precisions amp-bf16,fp32 --batch-sizes 32,256 --out "$DIR/$s-after-$attempt.json" > "$DIR/$s-after-$attempt.log" 2>&1
  done
done
$PY -m bench.isolation "$DIR" | tee "$DIR/summary.txt"
