#!/usr/bin/env bash
# The 2-GPU checks left open, in one device call of at most 10 minutes (2 GPUs, ordinals 0 and 1):
#   bash scripts/pending_x2.sh OUT COMMIT
# 1. every GPU test at this code on 2 GPUs (scripts/gpu_tests.sh: the parity cases in the
#    reference's layout, channels_last held to it, the slow-rank anatomy...), its log naming COMMIT;
# 2. the gpt2-1.5b fit held against real runs at its own batches (make fit-check with FIT=).
# Each step has its own time limit.
set -uo pipefail
OUT=${1:?usage: pending_x2.sh OUT COMMIT}
COMMIT=${2:?usage: pending_x2.sh OUT COMMIT}
PY=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
GPU_TESTS_TIMEOUT=${GPU_TESTS_TIMEOUT:-300} PY="$PY" bash scripts/gpu_tests.sh "$OUT" "$COMMIT" "h200x2-$COMMIT"
timeout 240 make fit-check GPUS=0,1 MODEL=gpt2-1.5b PY="$PY" RESULTS=/tmp/r \
  FIT=results/reference/h200/fit-gpt2-1.5b/gpt2-1.5b.fit.json > "$OUT/fit-check.log" 2>&1
echo "fit-check exit $?" >> "$OUT/fit-check.log"
tail -3 "$OUT/fit-check.log"
(cd /tmp && tar czf "$OUT/fit-check.tgz" r 2>/dev/null)
