#!/usr/bin/env bash
# 2 of 4 H200s, a short call: FSDP2's parameter policies (off and auto) in amp-fp16/amp-bf16,
# both models, 256/GPU; the GPU parity of DDP's knobs and compression hooks.
set -u
OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/camp3c; rm -rf $W; mkdir -p $W "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
trap 'tar czf "$OUT/campaign3-fsdp2.tgz" -C $W .' EXIT; trap 'exit 143' TERM INT
step() {
  local limit=$1 name=$2; shift 2; local t0=$(date +%s)
  timeout "$limit" "$@" > "$W/$name.log" 2>&1; local rc=$?
  echo "$name: rc=$rc $(( $(date +%s) - t0 )) s" | tee -a $W/walltime.txt; tail -3 "$W/$name.log"
  tar czf "$OUT/campaign3-fsdp2.tgz" -C $W .
}
FAST="--warmup 5 --steps 15 --trials 3 --case-timeout 120"
for mp in off auto; do
  step 80 fsdp2-$mp $PY -m bench run --gpus 0,1 --strategies ddp,fsdp2 --option mixed_precision=$mp --models resnet18,resnet18-small \
    --precisions amp-fp16,amp-bf16 --channels-last --batch-sizes 256 $FAST --out $W/h200x2-fsdp2-mp-$mp.json
done
step 120 parity-knobs $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k "gpu_ddp_knobs"
