#!/usr/bin/env bash
# The answer at the GPUs you have, against the fastest configuration the same machine measures, in
# steps that each fit one command of a lent machine (run them in order while it stays warm):
#   bash scripts/answer_proof.sh OUT_DIR search NAME GPUS   # the default `make bench GPUS=...`, its wall time and answer
#   bash scripts/answer_proof.sh OUT_DIR listing GPUS       # the fastest configurations, listed; the hand loop
#   bash scripts/answer_proof.sh OUT_DIR proof              # `check proof` of every search against every file
#     (a committed folder holds the three listings in one file, listings.json: the same step reads it)
# 1. search: `make bench GPUS=0,1` (or 0,1,2,3): the default search (resnet18-small, amp-bf16,
#    channels_last, 256/1024/2048 per GPU, the default budget), with its wall time and nvidia-smi's
#    clocks beside it (smi-search-NAME.csv); run it twice.
# 2. listing: `single` at one GPU and `ddp` at the largest count in a CUDA graph and under compile
#    reduce-overhead with fused SGD (the executions that won on H100 and H200), each its own
#    `bench run` file; `single` under compile reduce-overhead with foreach SGD at 256/GPU alone (what the
#    search measured before it brought fused SGD along); then the hand-written loop on one GPU
#    (`bench check bareloop --variants`).
# 3. proof: `python -m bench check proof`: each search's answer at its largest device count and at one
#    GPU over the fastest row of every file of OUT_DIR.
# Every file lands in OUT_DIR; a step that fails is logged and the next one runs.
# MODEL=gpt2-124m (default resnet18-small) proves another workload: its own batches (8/16/32 sequences of a
# language model), channels_last only for images, the hand loop in VARIANTS (default compile-ro,graph).
set -uo pipefail
out=${1:?usage: answer_proof.sh OUT_DIR search NAME GPUS | listing GPUS | proof}
step=${2:?usage: answer_proof.sh OUT_DIR search NAME GPUS | listing GPUS | proof}
py=${PY:-python3}
model=${MODEL:-resnet18-small}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
# The model's kind and default per-GPU batches (bench/workloads/data.py), asked of the suite.
read -r kind batches < <("$py" -c "import sys; from bench.workloads import data_of; from bench.workloads.probing import probe; probe([sys.argv[1]]); \
d = data_of(sys.argv[1]); print(d.kind, ','.join(map(str, d.batches['cuda'])))" "$model")
layout=(); [ "$kind" = tokens ] || layout=(--channels-last)
common=(--no-search --models "$model" --precisions amp-bf16 "${layout[@]}" --batch-sizes "$batches")

search() {  # NAME GPUS
  local start smi=; start=$(date +%s)
  if command -v nvidia-smi >/dev/null; then
    # The GPUs' clocks, power and what holds their clocks down (0x4: the software power cap), every 250 ms.
    local reasons=clocks_event_reasons.active
    nvidia-smi --query-gpu=$reasons --format=csv >/dev/null 2>&1 || reasons=clocks_throttle_reasons.active
    nvidia-smi --query-gpu=timestamp,index,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,$reasons \
      --format=csv -lms 250 > "$out/smi-search-$1.csv" 2>&1 &
    smi=$!
  fi
  if command -v make >/dev/null; then
    make bench GPUS="$2" MODEL="$model" PY="$py" ARGS="--out $out/search-$1.json" > "$out/search-$1.log" 2>&1
  else  # what `make bench GPUS=... MODEL=...` runs on a GPU host, for a machine without make
    "$py" -m bench run --gpus "$2" --precisions amp-bf16 --models "$model" --search --out "$out/search-$1.json" \
      > "$out/search-$1.log" 2>&1
  fi
  echo "make bench GPUS=$2 MODEL=$model wall time: $(( $(date +%s) - start )) s" | tee -a "$out/search-$1.log"
  [ -z "$smi" ] || kill "$smi" 2>/dev/null
  "$py" -m bench answer "$out/search-$1.json" > "$out/answer-$1.txt" 2>&1
}
listing() {  # NAME ARGS...
  local name=$1; shift
  timeout "${LISTING_TIMEOUT:-300}" "$py" -m bench run "${common[@]}" "$@" --out "$out/listing-$name.json" \
    > "$out/listing-$name.log" 2>&1
  echo "listing $name: exit $?" | tee -a "$out/listing-$name.log"
}

case $step in
  search)
    search "${3:?name}" "${4:?GPUS}"
    ;;
  listing)
    gpus=${3:?GPUS}
    n=$(( $(tr -cd , <<<"$gpus" | wc -c) + 1 ))
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$out/gpus.csv" 2>&1
    nvidia-smi topo -m >> "$out/gpus.csv" 2>&1
    listing graph --gpus "$gpus" --gpu-counts "$n" --strategies single,ddp --execution cuda-graph --optimizer-impl fused
    listing compile-ro --gpus "$gpus" --gpu-counts "$n" --strategies single,ddp --execution compile \
      --compile-mode reduce-overhead --optimizer-impl fused
    [ "$kind" = tokens ] || listing compile-ro-foreach --gpus "${gpus%%,*}" --strategies single --execution compile \
      --compile-mode reduce-overhead --optimizer-impl foreach --batch-sizes 256
    "$py" -m bench check bareloop --variants "${VARIANTS:-compile-ro,graph}" --batches "$batches" --model "$model" \
      --precision amp-bf16 "${layout[@]}" --optimizer-impl fused --warmup 20 --steps 30 --rounds 5 \
      --out "$out/handloop.json" > "$out/handloop.log" 2>&1
    ;;
  proof)
    "$py" -m bench check proof "$out"/search-*.json --against "$out"/listing*.json \
      --handloop "$out/handloop.json" --out "$out/proof.json" 2>&1 | tee "$out/proof.txt"
    ;;
  *)
    echo "answer_proof.sh: no step '$step': search NAME GPUS, listing GPUS or proof" >&2
    exit 2
    ;;
esac
