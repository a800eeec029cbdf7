#!/usr/bin/env bash
# A fit's figures at n devices held against real runs of n GPUs, in one call:
#   bash scripts/fit_check.sh FIT_FILE MODEL STRATEGIES GPUS OUT_DIR
# e.g. bash scripts/fit_check.sh fit.fit.json vit-large ddp,zero1,fsdp2 0,1 results/fitcheck
# For each strategy, a real run on GPUS (n of them) of the fit's own case (its precision, knobs and
# options, read from the fit file) at the batches per GPU the fit's search at n probed that tell
# most: the smallest that fit (a peak to compare), the largest that fit and the smallest that failed
# (the verdicts); then `bench fit-check` over all of them.
set -uo pipefail
fitfile=$1; model=$2; strategies=$3; gpus=$4; out=$5
py=${PY:-python3}
n=$(awk -F, '{print NF}' <<<"$gpus")
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
files=()
for strategy in ${strategies//,/ }; do
  # The real run's flags come from the fit file (bench/fit/fit.py `real_run`): the fit's precision,
  # knobs and options, at the batches its search probed that tell most.
  mapfile -t flags < <("$py" - "$fitfile" "$model" "$strategy" "$n" <<'PY'
import sys
from bench.fit import fit
try:
    print("\n".join(fit.real_run(fit.load(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4]))))
except fit.FitError as exc:
    sys.exit(f"{sys.argv[1]}: {exc}")
PY
  )
  [ ${#flags[@]} -gt 0 ] || continue
  "$py" -m bench run --gpus "$gpus" "${flags[@]}" --warmup 2 --steps 3 --trials 1 \
    --out "$out/real-$model-$strategy-x$n.json" 2>&1 | tail -4
  files+=("$out/real-$model-$strategy-x$n.json")
done
[ ${#files[@]} -gt 0 ] || { echo "fit_check.sh: $fitfile gave no batches to run for $model at $n devices" >&2; exit 2; }
"$py" -m bench fit-check "$fitfile" "${files[@]}" | tee "$out/fit-check-$model-x$n.md"
