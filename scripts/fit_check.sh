#!/usr/bin/env bash
# A fit's figures at n devices held against real runs of n GPUs, in one call:
#   bash scripts/fit_check.sh FIT_FILE MODEL STRATEGIES GPUS OUT_DIR
# e.g. bash scripts/fit_check.sh fit.fit.json vit-large ddp,zero1,fsdp2 0,1 results/fitcheck
# For each strategy, a real run on GPUS (n of them) at the batches per GPU the fit's search at n
# probed that tell most: the smallest that fit (a peak to compare), the largest that fit and the
# smallest that failed (the verdicts); then `bench fit-check` over all of them.
set -uo pipefail
fitfile=$1; model=$2; strategies=$3; gpus=$4; out=$5
py=${PY:-python3}
n=$(awk -F, '{print NF}' <<<"$gpus")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
files=()
for strategy in ${strategies//,/ }; do
  read -r precision batches < <("$py" - "$fitfile" "$model" "$strategy" "$n" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
model, strategy, n = sys.argv[2], sys.argv[3], int(sys.argv[4])
found = next((o for o in doc["outcomes"] if (o["model"], o["strategy"], o["devices"]) == (model, strategy, n)), None)
if found is None or not found["largest_fit"]:
    sys.exit(f"{sys.argv[1]} has no largest batch for {model} {strategy} at {n} devices")
fitted = sorted(r["batch_per_gpu"] for r in doc["rows"] if r["model"] == model and r["strategy"] == strategy
                and r.get("devices") == n and r["status"] == "ok")
batches = dict.fromkeys([fitted[0], found["largest_fit"]] + ([found["smallest_failed"]] if found["smallest_failed"] else []))
print(found["precision"], ",".join(map(str, batches)))
PY
  ) || continue
  "$py" -m bench run --gpus "$gpus" --strategies "$strategy" --models "$model" --precisions "$precision" \
    --batch-sizes "$batches" --sgd-impl foreach --warmup 2 --steps 3 --trials 1 \
    --out "$out/real-$model-$strategy-x$n.json" 2>&1 | tail -4
  files+=("$out/real-$model-$strategy-x$n.json")
done
[ ${#files[@]} -gt 0 ] || { echo "fit_check.sh: $fitfile gave no batches to run for $model at $n devices" >&2; exit 2; }
"$py" -m bench fit-check "$fitfile" "${files[@]}" | tee "$out/fit-check-$model-x$n.md"
