#!/usr/bin/env bash
# The answer at the GPUs you have, against the fastest configuration the same call measures, on a
# host of 4 GPUs:
#   bash scripts/answer_proof.sh OUT_DIR
# 1. `make bench GPUS=0,1,2,3` and `make bench GPUS=0,1`: the default searches (resnet18-small,
#    amp-bf16, channels_last, 256/1024/2048 per GPU, 5 minutes), each with its wall time;
# 2. the listing: single at one GPU, ddp at 2 and 4 GPUs, zero1 and fsdp2 at 4, in a CUDA graph and
#    under compile reduce-overhead with fused SGD (the executions that won on H100 and H200), each
#    its own `bench run` file; then the hand-written loop on one GPU (`bench check bareloop --variants`);
# 3. `bench answer` of both searches, and `python -m bench check proof`: each search's answer at its
#    largest device count and at one GPU over the fastest row of every file of the call.
# Every file lands in OUT_DIR; a step that fails is logged and the next one runs.
set -uo pipefail
out=${1:-results/proof}
py=${PY:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
common=(--models resnet18-small --precisions amp-bf16 --channels-last --batch-sizes 256,1024,2048 --sgd-impl fused)

search() {  # GPUS NAME
  local start; start=$(date +%s)
  if command -v make >/dev/null; then
    make bench GPUS="$1" PY="$py" ARGS="--out $out/search-$2.json" > "$out/search-$2.log" 2>&1
  else  # what `make bench GPUS=...` runs on a GPU host, for a machine without make
    "$py" -m bench run --gpus "$1" --precisions amp-bf16 --models resnet18-small --batch-sizes 256,1024,2048 \
      --channels-last --search --budget 5 --out "$out/search-$2.json" > "$out/search-$2.log" 2>&1
  fi
  echo "make bench GPUS=$1 wall time: $(( $(date +%s) - start )) s" | tee -a "$out/search-$2.log"
  "$py" -m bench answer "$out/search-$2.json" > "$out/answer-$2.txt" 2>&1
}
listing() {  # NAME ARGS...
  local name=$1; shift
  timeout "${LISTING_TIMEOUT:-420}" "$py" -m bench run "${common[@]}" "$@" --out "$out/listing-$name.json" \
    > "$out/listing-$name.log" 2>&1
  echo "listing $name: exit $?" | tee -a "$out/listing-$name.log"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpus.csv" 2>&1
nvidia-smi topo -m >> "$out/gpus.csv" 2>&1
search 0,1,2,3 x4
search 0,1 x2
listing graph --gpus 0,1,2,3 --gpu-counts 4,2 --strategies single,ddp --execution cuda-graph
listing compile-ro --gpus 0,1,2,3 --gpu-counts 4,2 --strategies single,ddp,zero1,fsdp2 --execution compile \
  --compile-mode reduce-overhead
"$py" -m bench check bareloop --variants compile-ro,graph --batches 256,1024,2048 --model resnet18-small \
  --precision amp-bf16 --channels-last --sgd-impl fused --warmup 20 --steps 30 --rounds 5 \
  --out "$out/handloop.json" > "$out/handloop.log" 2>&1
"$py" -m bench check proof "$out"/search-x4.json "$out"/search-x2.json --against "$out"/listing-*.json \
  --handloop "$out/handloop.json" --out "$out/proof.json" 2>&1 | tee "$out/proof.txt"
