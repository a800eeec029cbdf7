#!/usr/bin/env bash
# The 2-GPU checks left open, in one device call of at most 10 minutes:
#   bash scripts/pending_x2.sh OUT COMMIT [TEST_GPUS [FIT_GPUS]]
# 1. every GPU test at this code on the 2 GPUs TEST_GPUS (default 0,1; scripts/gpu_tests.sh: the
#    parity cases, channels_last held to them, the slow-rank anatomy...), its log naming COMMIT;
# 2. `make fit-check GPUS=FIT_GPUS MODEL=gpt2-1.5b` (default the same GPUs): the fit made afresh on
#    the first of them, for 1 and 2 devices, then held against real 2-GPU runs at its own batches
#    (on the same GPUs, in what is left of the 10 minutes: the fit alone took 277 s on one H200).
# On a host of 4 GPUs, `... OUT COMMIT 0,1 2,3` runs the two side by side; on the same GPUs they run
# one after the other. Each step has its own time limit.
set -uo pipefail
OUT=${1:?usage: pending_x2.sh OUT COMMIT [TEST_GPUS [FIT_GPUS]]}
COMMIT=${2:?usage: pending_x2.sh OUT COMMIT [TEST_GPUS [FIT_GPUS]]}
TEST_GPUS=${3:-0,1}
FIT_GPUS=${4:-$TEST_GPUS}
PY=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
CUDA_VISIBLE_DEVICES=$TEST_GPUS GPU_TESTS_TIMEOUT=${GPU_TESTS_TIMEOUT:-300} PY="$PY" \
  bash scripts/gpu_tests.sh "$OUT" "$COMMIT" "h200x2-$COMMIT" &
tests=$!
limit=500
if [ "$TEST_GPUS" = "$FIT_GPUS" ]; then  # the same GPUs: one after the other, within the call's 10 minutes
  wait "$tests"
  limit=$((570 - SECONDS))
fi
timeout "${FIT_CHECK_TIMEOUT:-$limit}" make fit-check GPUS="$FIT_GPUS" MODEL=gpt2-1.5b PY="$PY" RESULTS=/tmp/r \
  > "$OUT/fit-check.log" 2>&1
echo "fit-check exit $? in ${SECONDS} s since the start" >> "$OUT/fit-check.log"
wait
tail -3 "$OUT/fit-check.log"
(cd /tmp && tar czf "$OUT/fit-check.tgz" r 2>/dev/null)
