#!/usr/bin/env bash
# Several GPUs in one box, no scheduler: one distill worker per GPU (CUDA_VISIBLE_DEVICES),
# each its own disjoint slice (--shard I/N), then one merge into OUT.
#   deploy/multi-gpu.sh TEACHER_DIR prompts.jsonl distilled.json [extra distill flags...]
# GPUS (default: every GPU nvidia-smi lists). Rerunning resumes every worker's own part.
set -euo pipefail
TEACHER=${1:?teacher}; PROMPTS=${2:?prompts}; OUT=${3:?out}; shift 3
BIN=${DLM_DATA:-dlm-data}
GPUS=${GPUS:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
IFS=, read -ra ids <<<"$GPUS"
n=${#ids[@]}
mkdir -p logs
pids=()
for i in "${!ids[@]}"; do
  CUDA_VISIBLE_DEVICES=${ids[$i]} "$BIN" distill --device cuda --teacher "$TEACHER" \
    --prompts "$PROMPTS" --out "$OUT" --shard "$i/$n" "$@" >"logs/distill-gpu$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { echo "worker $i/$n (GPU ${ids[$i]}) failed: logs/distill-gpu$i.log" >&2; rc=1; }
done
[ $rc -eq 0 ] || exit $rc
exec "$BIN" merge "$OUT" --json
