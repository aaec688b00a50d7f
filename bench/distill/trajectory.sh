#!/usr/bin/env bash
# Issue 55 on the GPU box, one device command, over what bench/distill/stage.sh staged:
#   1. the trained teacher (bench/teacher/train.py, TRAIN_SECONDS=460) unless $CKPT holds one;
#      the 2B shape (make_teacher.py: random MiniCPM5-2B-shaped weights, the trained teacher's
#      tokenizer) unless $T2B holds one;
#   2. per teacher, plain vs --trajectory vs --trajectory --top-k 32, early exit on (the
#      default), batch 64, gen 256 / block 32 / 256 steps, in the same run, ROUNDS times
#      interleaved; the overhead % of each against plain (best of the rounds);
#   3. CUDA vs CPU top-k (K 32) on the trained teacher's MCQ set (compare_topk.py: ids equal,
#      log-prob differences against docs/gpu.md's tolerance).
# STEPS (default "train make2b time compare"); env: LIMIT (prompts per timed run, 256 for the
# trained teacher, LIMIT2B 64 for the 2B shape), ROUNDS (2), CMP_LIMIT (64 MCQ prompts compared),
# OUT (default /tmp/out: trajectory.txt, overhead.json, compare.json).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${OUT:-/tmp/out}; mkdir -p "$dest"
log="$dest/trajectory.txt"
export DLM_KERNEL_CACHE=/tmp/dlm-kernels PYTHONUNBUFFERED=1
CKPT=${CKPT:-/tmp/teacher-ckpt}
T2B=${T2B:-/tmp/teacher-2b}
cd "$here"
for b in dlm-data; do [ -x $b ] || { [ -f $b.xz ] && xz -dk $b.xz && chmod +x $b; }; done
steps=" ${STEPS:-train make2b time compare} "
has() { [[ "$steps" == *" $1 "* ]]; }
{
echo "commit $(cat COMMIT) dirty=$(wc -l < DIRTY) $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if has train && [ ! -f "$CKPT/model.safetensors" ]; then
  echo "=== train the teacher $(date -u +%H:%M:%S)"
  python3 train.py --data data --out "$CKPT" --seconds "${TRAIN_SECONDS:-460}" 2>&1 | grep -v Warning | tail -n 3
fi
if has make2b && [ ! -f "$T2B/model.safetensors" ]; then
  echo "=== the 2B shape $(date -u +%H:%M:%S)"
  python3 make_teacher.py --out "$T2B" 2>&1 | grep -v Warning | tail -n 2
  cp "$CKPT"/tokenizer.json "$CKPT"/tokenizer_config.json "$T2B/"
fi
grep '"options"' data/prompts.jsonl > /tmp/mcq.jsonl
G="--gen-length 256 --block-length 32 --steps 256 --batch-size 64 --device cuda --json"
run() {  # run NAME TEACHER PROMPTS LIMIT FLAGS...: prints seconds
  local name=$1 t=$2 p=$3 n=$4; shift 4
  rm -rf "/tmp/tr_$name.json" "/tmp/tr_$name.json.parts" "/tmp/tr_$name.json.topk.parquet"
  ./dlm-data distill --teacher "$t" --prompts "$p" --out "/tmp/tr_$name.json" --limit "$n" $G "$@" 2>/dev/null \
    | python3 -c 'import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])["seconds"])'
}
if has time; then
  echo "=== overhead $(date -u +%H:%M:%S)"
  res="{"
  for spec in "trained:$CKPT:${LIMIT:-256}" "2b:$T2B:${LIMIT2B:-64}"; do
    IFS=: read -r tag t n <<< "$spec"
    [ -f "$t/model.safetensors" ] || { echo "no teacher $t: skipped"; continue; }
    run "${tag}_warm" "$t" /tmp/mcq.jsonl 8 >/dev/null  # kernel cache, clocks
    declare -A best=()
    for round in $(seq "${ROUNDS:-2}"); do
      for mode in plain traj topk; do
        case $mode in plain) f=();; traj) f=(--trajectory);; topk) f=(--trajectory --top-k 32);; esac
        s=$(run "${tag}_$mode" "$t" /tmp/mcq.jsonl "$n" "${f[@]}")
        echo "$tag round $round $mode ${s}s"
        if [ -z "${best[$mode]:-}" ] || python3 -c "import sys; sys.exit(not $s < ${best[$mode]})"; then best[$mode]=$s; fi
      done
    done
    ot=$(python3 -c "print(round(100*(${best[traj]}/${best[plain]}-1),2))")
    ok=$(python3 -c "print(round(100*(${best[topk]}/${best[plain]}-1),2))")
    echo "$tag: plain ${best[plain]}s, --trajectory ${best[traj]}s (+$ot %, goal <= 2 %), --top-k 32 ${best[topk]}s (+$ok %, goal <= 10 %)"
    res="$res\"$tag\":{\"prompts\":$n,\"plain_s\":${best[plain]},\"trajectory_s\":${best[traj]},\"topk32_s\":${best[topk]},\"trajectory_pct\":$ot,\"topk32_pct\":$ok},"
    unset best
  done
  echo "${res%,}}" > "$dest/overhead.json"
fi
if has compare; then
  echo "=== CUDA vs CPU top-k on the trained teacher's MCQ set $(date -u +%H:%M:%S)"
  C="--gen-length 128 --block-length 32 --steps 128 --trajectory --top-k 32 --limit ${CMP_LIMIT:-64}"
  for d in cpu cuda; do
    rm -rf /tmp/cmp_$d.json /tmp/cmp_$d.json.parts /tmp/cmp_$d.json.topk.parquet
    ./dlm-data distill --teacher "$CKPT" --prompts /tmp/mcq.jsonl --out /tmp/cmp_$d.json --device $d $C 2>&1 | tail -n 1
  done
  python3 compare_topk.py /tmp/cmp_cpu.json /tmp/cmp_cuda.json --out "$dest/compare.json"
fi
echo "done $(date -u +%H:%M:%S)"
} 2>&1 | tee "$log"
