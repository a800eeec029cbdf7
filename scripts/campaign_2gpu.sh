#!/usr/bin/env bash
# The 2-GPU sweep: every strategy, fp32 / amp-fp16 / amp-bf16, both models (single on the
# first GPU of the pair), then the largest batches up to out-of-memory for single and ddp.
# On a host with 4 GPUs the two models run at the same time on disjoint pairs (0,1 and 2,3),
# which halves the wall time; on a 2-GPU host set PAIR_B=0,1 and they run one after another.
set -u
OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/camp2; rm -rf $W; mkdir -p $W "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
PAIR_A=${PAIR_A:-0,1}; PAIR_B=${PAIR_B:-2,3}; LIMIT=${LIMIT:-520}
trap 'tar czf "$OUT/campaign-2gpu.tgz" -C $W .' EXIT; trap 'exit 143' TERM INT
COMMON="--warmup 6 --steps 10 --trials 3 --case-timeout 90"

OOM="--strategies single,ddp --precisions fp32 --warmup 1 --steps 3 --trials 1 --case-timeout 90"
export COMMON OOM W PAIR_A PAIR_B
small() {
  $PY -m bench run --gpus $PAIR_A $COMMON --models resnet18-small --precisions fp32 --batch-sizes 32,256,2048 \
    --out $W/h200-2gpu-small-fp32.json
  $PY -m bench run --gpus $PAIR_A $COMMON --models resnet18-small --precisions amp-fp16,amp-bf16 --channels-last \
    --batch-sizes 32,256,2048 --out $W/h200-2gpu-small-amp.json
  $PY -m bench run --gpus $PAIR_A $OOM --models resnet18-small --batch-sizes 8192,32768,131072 --out $W/h200-2gpu-small-oom.json
}
large() {
  $PY -m bench run --gpus $PAIR_B $COMMON --models resnet18 --precisions fp32,amp-fp16,amp-bf16 --channels-last \
    --batch-sizes 64,256 --out $W/h200-2gpu-resnet18.json
  $PY -m bench run --gpus $PAIR_B $OOM --channels-last --models resnet18 --batch-sizes 1024,4096,8192 --out $W/h200-2gpu-resnet18-oom.json
}
t0=$(date +%s)
if [ "$PAIR_A" = "$PAIR_B" ]; then
  timeout $LIMIT bash -c "$(declare -f small large); small; large" > $W/sweep.log 2>&1
else
  timeout $LIMIT bash -c "$(declare -f small); small" > $W/small.log 2>&1 &
  timeout $LIMIT bash -c "$(declare -f large); large" > $W/resnet18.log 2>&1 &
  wait
fi
echo "2-GPU sweep wall time: $(( $(date +%s) - t0 )) s (pairs $PAIR_A and $PAIR_B)" | tee $W/walltime.txt
tail -n 45 $W/*.log
