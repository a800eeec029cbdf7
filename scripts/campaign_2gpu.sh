#!/usr/bin/env bash
# The 2-GPU sweep: every strategy, fp32 / amp-fp16 / amp-bf16, both models, on GPUs 0,1
# (single on GPU 0). amp cases use channels_last. Budget: under 10 minutes of wall time.
set -u
OUT=${OUT:-/tmp/parabench-campaign}; W=/tmp/camp2; rm -rf $W; mkdir -p $W "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
trap 'tar czf "$OUT/campaign-2gpu.tgz" -C $W .' EXIT; trap 'exit 143' TERM INT
COMMON="--gpus 0,1 --warmup 8 --steps 12 --trials 3 --case-timeout 120"
t0=$(date +%s)
timeout 150 $PY -m bench run $COMMON --models resnet18-small --precisions fp32 --batch-sizes 32,128,512,2048 \
  --out $W/h200-2gpu-small-fp32.json 2>&1 | tail -40
timeout 200 $PY -m bench run $COMMON --models resnet18 --precisions fp32,amp-fp16 --channels-last --batch-sizes 64,256 \
  --out $W/h200-2gpu-resnet18.json 2>&1 | tail -40
timeout 220 $PY -m bench run $COMMON --models resnet18-small --precisions amp-fp16,amp-bf16 --channels-last \
  --batch-sizes 32,256,2048 --out $W/h200-2gpu-small-amp.json 2>&1 | tail -40
echo "2-GPU sweep wall time: $(( $(date +%s) - t0 )) s" | tee $W/walltime.txt
