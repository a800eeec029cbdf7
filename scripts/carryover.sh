#!/usr/bin/env bash
# What a worker carries from one case to the next (docs/findings.md, "What a worker carried from
# one case to the next"): one compiled case (single, resnet18-small, amp-bf16, channels_last,
# compile default, foreach SGD, 1024/GPU) measured alone in a worker of its own and, interleaved,
# after an eager case in the same worker: as the suite runs it (the profiler lets go of the GPU
# after each case's counting), with CUPTI kept attached as kineto does by default
# (TEARDOWN_CUPTI=0), and after the same step compiled at 256/GPU (torch._dynamo.reset()
# between them). Then `bench check isolation` on each pair.
# Usage: bash scripts/carryover.sh OUT [ATTEMPTS]   (one GPU: CUDA ordinal 0)
set -euo pipefail
OUT=${1:?usage: carryover.sh OUT [ATTEMPTS]}
ATTEMPTS=${2:-2}
PY=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
SIDES=(suite kept compiled)
for side in "${SIDES[@]}"; do mkdir -p "$OUT/$side"; done
COMMON=(--no-search --gpus 0 --strategies single --models resnet18-small --precisions amp-bf16 --optimizer-impl foreach
        --compile-mode default --warmup 20 --steps 30 --trials 5)
$PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee "$OUT/versions.txt"
for n in $(seq 1 "$ATTEMPTS"); do
  $PY -m bench run "${COMMON[@]}" --execution compile --batch-sizes 1024 --out "$OUT/suite/single-alone-$n.json" | tail -2
  for side in kept compiled; do cp "$OUT/suite/single-alone-$n.json" "$OUT/$side/"; done
  $PY -m bench run "${COMMON[@]}" --execution eager,compile --batch-sizes 1024 \
    --out "$OUT/suite/single-after-$n.json" | tail -2
  TEARDOWN_CUPTI=0 $PY -m bench run "${COMMON[@]}" --execution eager,compile --batch-sizes 1024 \
    --out "$OUT/kept/single-after-$n.json" | tail -2
  $PY -m bench run "${COMMON[@]}" --execution compile --batch-sizes 256,1024 \
    --out "$OUT/compiled/single-after-$n.json" | tail -2
done
for side in "${SIDES[@]}"; do
  echo "== $side"
  $PY -m bench check isolation "$OUT/$side" | tee "$OUT/isolation-$side.txt"
done
