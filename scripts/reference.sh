#!/usr/bin/env bash
# Every seed row in one reference a user can reproduce (`make reference GPUS=0,1,2,3`):
#   bash scripts/reference.sh GPUS [RESULTS_DIR [PLOTS_DIR]]
# On GPUs: single, dp, dp-fn, dp-manual, allreduce-scratch, ddp, zero1, fsdp2 and mxnet-gluon in
# fp32, amp-fp16 (GradScaler), amp-bf16, apex-O1 and apex-O2 (each strategy runs what it can and
# declines the rest with its reason, in its row), at 1, 2, 4 ... GPUs up to those given, resnet18
# and resnet18-small at 256 and 1024 per GPU; then its report and figures, and the GPU tests
# (`pytest -m gpu`) with their log beside the results. Results go to results/reference/<gpu>x<n>/
# and plots/reference/<gpu>x<n>/ unless named. APEX_DIR (a folder holding NVIDIA Apex's `apex/`)
# puts Apex on the path; RESUME=1 continues a reference that was stopped.
# On the CPU (GPUS empty): the same strategies and precisions but amp-fp16 on 2 CPU replicas, resnet18-small at
# 2 and 4 per replica (the CPU's measurement defaults), into RESULTS_DIR (default results/reference-cpu).
set -uo pipefail
gpus=${1-}
if [ "$gpus" = all ]; then  # every GPU here, or the CPU where there is none
  gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | paste -sd, -)
fi
py=${PY:-python3}
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
[ -n "${APEX_DIR:-}" ] && export PYTHONPATH="$APEX_DIR${PYTHONPATH:+:$PYTHONPATH}"
strategies=single,dp,dp-fn,dp-manual,allreduce-scratch,ddp,zero1,fsdp2,mxnet-gluon
precisions=fp32,amp-fp16,amp-bf16,apex-O1,apex-O2

if [ -n "$gpus" ] && [ "$gpus" != cpu ]; then
  n=$(tr ',' '\n' <<< "$gpus" | grep -c .)
  counts=1; c=2
  while [ "$c" -le "$n" ]; do counts="$counts,$c"; c=$((c * 2)); done
  # The model's word with a digit: "NVIDIA H200" -> h200, "NVIDIA GeForce RTX 4090" -> 4090.
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader -i "${gpus%%,*}" 2>/dev/null \
        | tr ' ' '\n' | grep -m1 '[0-9]' | tr '[:upper:]' '[:lower:]')
  name="${gpu:-gpu}x$n"
  results=${2:-results/reference/$name}
  plots=${3:-plots/reference/$name}
  # The seed rows: PyTorch's own layout (channels_last is a knob the search and findings measure).
  sweep=(--gpus "$gpus" --gpu-counts "$counts" --models resnet18,resnet18-small --batch-sizes 256,1024
         --channels-last off)
else
  results=${2:-results/reference-cpu}
  plots=${3:-$results/plots}
  sweep=(--gpus '' --cpu-replicas 2 --models resnet18-small --batch-sizes 2,4)
  # fp16 arithmetic is emulated on a CPU (a step of batch 2 took 2.5 s on 2 cores): the small version
  # leaves amp-fp16 to GPUs; apex's rows decline with their reason, as they do on GPUs without Apex.
  precisions=fp32,amp-bf16,apex-O1,apex-O2
fi
mkdir -p "$results" "$plots"
out="$results/reference.json"
# A reference is one run: an existing file is continued only where asked (RESUME=1, after a stop).
resume=(); [ -n "${RESUME:-}" ] && resume=(--resume)
"$py" -m bench run --no-search "${sweep[@]}" --strategies "$strategies" --precisions "$precisions" --out "$out" "${resume[@]}" \
  2>&1 | tee "$results/reference.log"
status=${PIPESTATUS[0]}
[ "$status" -ne 0 ] && { echo "parabench: reference sweep exited $status; its rows are in $out" >&2; exit "$status"; }
"$py" -m bench report "$out" --out "$plots" || exit $?
"$py" -m bench answer "$out" > "$results/answer.txt" || exit $?
if [ -n "$gpus" ] && [ "$gpus" != cpu ]; then
  # Four at a time where pytest-xdist is there (GPU tests of 2 H200s: 224 s so, tests/gpu-logs/h200x2.log).
  parallel=(); "$py" -c "import xdist" 2>/dev/null && parallel=(-n 4)
  CUDA_VISIBLE_DEVICES="$gpus" "$py" -m pytest -m gpu tests -q -rs -p no:cacheprovider "${parallel[@]}" 2>&1 \
    | tee "$results/gpu-tests.log"
  exit "${PIPESTATUS[0]}"
fi
