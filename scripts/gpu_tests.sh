#!/usr/bin/env bash
# `pytest -m gpu` on the GPUs of this host, its log headed by the command, the commit and the machine
# (the logs under tests/gpu-logs/ are made this way):
#   bash scripts/gpu_tests.sh OUT COMMIT NAME [PYTEST ARGS...]
# writes OUT/NAME.log. Apex, where carried in .vendor/, is unpacked to /tmp/apex first.
set -uo pipefail
OUT=${1:?usage: gpu_tests.sh OUT COMMIT NAME [PYTEST ARGS...]}
COMMIT=${2:?usage: gpu_tests.sh OUT COMMIT NAME}
NAME=${3:?usage: gpu_tests.sh OUT COMMIT NAME}
shift 3
PY=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
mkdir -p "$OUT"
if [ -f .vendor/apex-25.05-python.tar.gz ]; then
  mkdir -p /tmp/apex && tar -xzf .vendor/apex-25.05-python.tar.gz -C /tmp/apex && export PYTHONPATH=/tmp/apex
fi
# The GPUs the tests see: CUDA_VISIBLE_DEVICES's where it names some (2 of a host's 4, say).
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader ${CUDA_VISIBLE_DEVICES:+-i "$CUDA_VISIBLE_DEVICES"} 2>/dev/null \
       | sort | uniq -c | sed 's/^ *//' | paste -sd,)
log="$OUT/$NAME.log"
{ echo "# ${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES }PYTHONPATH=/tmp/apex $PY -m pytest -m gpu tests -v -rs -p no:cacheprovider --durations=30 -n 4 $*"
  echo "# the working tree of commit $COMMIT on ${gpus:-no GPU} ($(date -u +%F)); torch" \
       "$($PY -c 'import torch; print(torch.__version__)')"
} > "$log"
timeout "${GPU_TESTS_TIMEOUT:-360}" "$PY" -m pytest -m gpu tests -v -rs -p no:cacheprovider --durations=30 -n 4 "$@" \
  >> "$log" 2>&1
echo "exit $? (pytest; 124: the time limit)" >> "$log"
tail -2 "$log"
