#!/usr/bin/env bash
# The 2-GPU checks left open, in one device call of at most 10 minutes (2 GPUs, ordinals 0 and 1):
#   bash scripts/pending_x2.sh OUT COMMIT
# 1. the GPU parity and anatomy tests at this code (the parity cases in the reference's layout,
#    channels_last held to it; the slow-rank anatomy), their log naming COMMIT;
# 2. the slow-rank anatomy test again with the profiler left attached (TEARDOWN_CUPTI=0): whether
#    detaching between the anatomy's two windows is what lost its per-rank wait;
# 3. the gpt2-1.5b fit held against real runs at its own batches (make fit-check with FIT=).
# Apex, where carried in .vendor/, is unpacked to /tmp/apex. Each step has its own time limit.
set -uo pipefail
OUT=${1:?usage: pending_x2.sh OUT COMMIT}
COMMIT=${2:?usage: pending_x2.sh OUT COMMIT}
PY=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if [ -f .vendor/apex-25.05-python.tar.gz ]; then
  mkdir -p /tmp/apex && tar -xzf .vendor/apex-25.05-python.tar.gz -C /tmp/apex && export PYTHONPATH=/tmp/apex
fi
log="$OUT/h200x2-parity-anatomy.log"
{ echo "# $PY -m pytest -m gpu tests/test_parity.py tests/test_anatomy.py -v -rs -p no:cacheprovider -n 4"
  echo "# the working tree of commit $COMMIT on 2 NVIDIA H200 of one host ($(date -u +%F)); torch $($PY -c 'import torch; print(torch.__version__)')"
} > "$log"
timeout 240 "$PY" -m pytest -m gpu tests/test_parity.py tests/test_anatomy.py -v -rs -p no:cacheprovider -n 4 \
  >> "$log" 2>&1
tail -1 "$log"
TEARDOWN_CUPTI=0 timeout 90 "$PY" -m pytest -m gpu tests/test_anatomy.py -k slow_rank -q -p no:cacheprovider \
  > "$OUT/anatomy-cupti-kept.log" 2>&1
tail -1 "$OUT/anatomy-cupti-kept.log"
timeout 240 make fit-check GPUS=0,1 MODEL=gpt2-1.5b PY="$PY" RESULTS=/tmp/r \
  FIT=results/reference/h200/fit-gpt2-1.5b/gpt2-1.5b.fit.json > "$OUT/fit-check.log" 2>&1
tail -3 "$OUT/fit-check.log"
(cd /tmp && tar czf "$OUT/fit-check.tgz" r 2>/dev/null)
