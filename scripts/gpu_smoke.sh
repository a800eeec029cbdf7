#!/usr/bin/env bash
# Quick check of every CUDA path on a multi-GPU host: GPU parity tests, a short sweep of
# every strategy, and the DataParallel cuDNN-autotuning effect. Writes under ${OUT:-/tmp/parabench-smoke}.
set -u
OUT=${OUT:-/tmp/parabench-smoke}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PY=${PY:-python3}
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader
nvidia-smi topo -m | head -8
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
timeout 240 $PY -m pytest -q -s -p no:cacheprovider tests/test_parity.py -k gpu 2>&1 | grep -E "max \||passed|failed|Error" | tee "$OUT/parity.log"
timeout 300 $PY -m bench run --no-search --gpus 0,1 --precisions fp32,amp-bf16 --batch-sizes 64,512 \
  --warmup 5 --steps 10 --trials 2 --out "$OUT/smoke.json" 2>&1 | tail -30
timeout 120 $PY -m bench run --no-search --gpus 0,1 --strategies dp --cudnn-benchmark on --batch-sizes 64 \
  --warmup 3 --steps 5 --trials 1 --out "$OUT/dp_cudnn_on.json" --case-timeout 90 2>&1 | tail -3
