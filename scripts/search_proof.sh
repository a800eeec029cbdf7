#!/usr/bin/env bash
# A search's answer against the fastest hand-written loop on the same GPU, in one call:
#   bash scripts/search_proof.sh MODEL BUDGET_MINUTES OUT_DIR
# runs `make bench GPUS=0` (the default search: amp-bf16, channels_last, 256/1024/2048 per GPU)
# with its wall time, then `bench check bareloop --variants ...` (eager, compile, compile
# reduce-overhead, a whole-step CUDA graph; fused SGD, channels_last) at the same batches, then the
# answer. Every file it writes lands in OUT_DIR. HANDLOOP_FIRST=1 times the hand loop first (a
# model whose search may run long); HANDLOOP_VARIANTS, HANDLOOP_STEPS and HANDLOOP_ROUNDS set its
# executions and windows; STRATEGIES (make's) narrows the survey.
set -uo pipefail
model=${1:-resnet18-small}; budget=${2:-5}; out=${3:-results/proof}
py=${PY:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
handloop() {
  "$py" -m bench check bareloop --variants "${HANDLOOP_VARIANTS:-eager,compile,compile-ro,graph}" --batches 256,1024,2048 --model "$model" \
    --precision amp-bf16 --channels-last --optimizer-impl fused --warmup 20 --steps "${HANDLOOP_STEPS:-30}" \
    --rounds "${HANDLOOP_ROUNDS:-5}" --out "$out/handloop-$model.json" 2>&1 | tail -15 | tee "$out/handloop-$model.log"
}
[ -n "${HANDLOOP_FIRST:-}" ] && handloop
start=$(date +%s)
make bench GPUS=0 PY="$py" MODEL="$model" BUDGET="$budget" ARGS="--out $out/search-$model.json" 2>&1 \
  | tee "$out/search-$model.log"
echo "make bench wall time: $(( $(date +%s) - start )) s" | tee -a "$out/search-$model.log"
[ -z "${HANDLOOP_FIRST:-}" ] && handloop
"$py" -m bench answer "$out/search-$model.json" > "$out/answer-$model.txt" 2>&1
cat "$out/answer-$model.txt"
