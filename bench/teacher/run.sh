#!/usr/bin/env bash
# The trained-teacher benchmark in one device command (issue 16), over what
# bench/teacher/stage.sh staged (dlm-data built with --features cuda, the data, these scripts):
#   1. train.py: the masked-diffusion teacher, TRAIN_SECONDS (460) on the GPU, saved as an HF
#      checkpoint in $CKPT; held-out masked-token loss by mask ratio before/after (train.json)
#   2. dlm-data distill loads it unchanged on CPU and CUDA (16 prompts, cpu_cuda.json)
#   3. eval.py: every distill setting on the held-out prompts against exact (eval/table.md)
#   4. nonfinite: the trained teacher with overflowing logits must stop distill (issue 18)
#   5. earlyexit: early exit + continuous batching vs --no-early-exit (issue 26, early_exit.py)
# STEPS (default "train quick cpucuda eval nonfinite"; train is skipped when $CKPT holds a
# checkpoint, so a warm box can train in one call and evaluate in the next; quick = exact
# MCQ accuracy at gen 128 only, a few seconds).
# Env: TRAIN_SECONDS, TRAIN_ARGS, EVAL_BUDGET (s after which no new setting starts), CONFIGS, MODES, EXTRA
# (eval.py --configs/--modes/--extra), OUT (default /tmp/out: teacher-run.tar.gz with every
# log and result, plus table.md, train.log, cpu_cuda.txt, results.json beside it; the device
# tool brings back at most 8 files).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dest=${OUT:-/tmp/out}; mkdir -p "$dest"
out=/tmp/teacher-res; rm -rf "$out"; mkdir -p "$out"
pack() {
  tar czf "$dest/teacher-run.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
  for f in eval/table.md train.log cpu_cuda.txt eval/results.json quick.txt nonfinite.txt; do [ -f "$out/$f" ] && cp "$out/$f" "$dest/"; done
  for f in table.md results.json stop_lengths.json lengths.md; do [ -f "$out/ee/$f" ] && cp "$out/ee/$f" "$dest/ee_$f"; done
}
trap pack EXIT
export DLM_KERNEL_CACHE=/tmp/dlm-kernels PYTHONUNBUFFERED=1
CKPT=${CKPT:-/tmp/teacher-ckpt}
cd "$here"
# The device tool carries the binaries xz-compressed (gpu_sanity.sh unpacks them too).
for b in dlm-data dlm-gpu; do [ -x $b ] || { [ -f $b.xz ] && xz -dk $b.xz && chmod +x $b; }; done
echo "commit $(cat COMMIT) dirty=$(wc -l < DIRTY) $(date -u +%H:%M:%S)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
steps=" ${STEPS:-train quick cpucuda eval nonfinite earlyexit} "
has() { [[ "$steps" == *" $1 "* ]]; }
G128="--gen-length 128 --block-length 32 --steps 64"
if has train; then
  echo "=== train $(date -u +%H:%M:%S)"
  if [ ! -f "$CKPT/model.safetensors" ]; then
    python3 train.py --data data --out "$CKPT" --seconds "${TRAIN_SECONDS:-460}" --log "$out/train.json" ${TRAIN_ARGS:-} 2>&1 \
      | grep -v Warning | tee "$out/train.log"
  fi
fi
if [ ! -f "$CKPT/model.safetensors" ]; then
  echo "no checkpoint in $CKPT (a fresh box? STEPS=\"$steps\" has no train step): nothing to evaluate" >&2
  exit 3
fi
cp "$CKPT"/config.json "$CKPT"/tokenizer_config.json "$CKPT"/training.json "$out/" 2>/dev/null
ls -la "$CKPT" | tee "$out/ckpt_ls.txt"
if has quick; then
  echo "=== quick MCQ accuracy $(date -u +%H:%M:%S)"
  grep '"options"' data/prompts.jsonl > /tmp/mcq.jsonl
  rm -rf /tmp/quick.json /tmp/quick.json.parts
  ./dlm-data distill --teacher "$CKPT" --prompts /tmp/mcq.jsonl --out /tmp/quick.json --device cuda $G128 --batch-size 64 2>&1 | tail -n 1
  python3 - <<'PY' | tee "$out/quick.txt"
import json
r = json.load(open("/tmp/quick.json"))
for k in ("arith", "unit", "fact", ""):
    s = [x for x in r if f"-{k}-" in x["id"] or not k]
    print(f"exact g128 MCQ accuracy {k or 'all'}: {sum(bool(x['correct']) for x in s)}/{len(s)} = {sum(bool(x['correct']) for x in s) / len(s):.3f}")
for x in r[:6]:
    print(repr(x["prompt"][-110:]), "->", repr(x["response"][:120]), x["answer"], x["gold"])
PY
fi
if has cpucuda; then
  echo "=== cpu vs cuda $(date -u +%H:%M:%S)"
  { grep -v '"options"' data/prompts.jsonl | head -n 4; grep '"options"' data/prompts.jsonl | head -n 6; } > /tmp/p16.jsonl
  G="--gen-length 32 --block-length 32 --steps 16 --batch-size 10"
  for d in cpu cuda; do
    rm -rf /tmp/cc_$d.json /tmp/cc_$d.json.parts
    ./dlm-data distill --teacher "$CKPT" --prompts /tmp/p16.jsonl --out /tmp/cc_$d.json --device $d $G 2>&1 | tail -n 1
  done
  python3 - <<'PY' | tee "$out/cpu_cuda.txt"
import json
a = json.load(open("/tmp/cc_cpu.json")); b = json.load(open("/tmp/cc_cuda.json"))
tok = sum(x == y for r, s in zip(a, b) for x, y in zip(r["response_ids"], s["response_ids"]))
n = sum(max(len(r["response_ids"]), len(s["response_ids"])) for r, s in zip(a, b))
same = sum(r["response_ids"] == s["response_ids"] for r, s in zip(a, b))
ans = [(r["answer"], s["answer"], r["gold"]) for r, s in zip(a, b) if r["gold"]]
print(f"cpu vs cuda: {len(a)} records, tokens equal {tok}/{n}, responses equal {same}/{len(a)}, "
      f"MCQ answers equal {sum(x == y for x, y, _ in ans)}/{len(ans)}, cpu correct {sum(x == g for x, _, g in ans)}, "
      f"cuda correct {sum(y == g for _, y, g in ans)}")
for r in a[:2] + a[4:7]:
    print(repr(r["prompt"][-120:]), "->", repr(r["response"][:200]), r["answer"], r["gold"])
PY
fi
if has eval; then
  echo "=== eval $(date -u +%H:%M:%S)"
  python3 eval.py --bin ./dlm-data --teacher "$CKPT" --prompts data/prompts.jsonl --out "$out/eval" \
    --budget "${EVAL_BUDGET:-1e9}" ${CONFIGS:+--configs "$CONFIGS"} ${MODES:+--modes "$MODES"} --extra "${EXTRA:-}"
fi
if has earlyexit; then
  # Issue 26: early exit + continuous batching vs --no-early-exit, same binary, same run
  # (MCQ and text sets, exact and dual+r4, gen 256, batch 64); stop_lengths.json feeds
  # `dlm-gpu bench-rows` on the 2B shape.
  echo "=== early exit $(date -u +%H:%M:%S)"
  python3 early_exit.py --bin ./dlm-data --teacher "$CKPT" --prompts data/prompts.jsonl --out "$out/ee"
  cp "$out/ee/stop_lengths.json" /tmp/stop_lengths.json 2>/dev/null
fi
if has nonfinite; then
  echo "=== nonfinite $(date -u +%H:%M:%S)"
  rm -rf /tmp/nf-teacher && cp -r "$CKPT" /tmp/nf-teacher && head -n 4 data/prompts.jsonl > /tmp/nf-teacher/prompts.jsonl
  python3 nonfinite_check.py ./dlm-data /tmp/nf-teacher /tmp/nonfinite 2>&1 | tee "$out/nonfinite.txt"
fi
echo "=== done $(date -u +%H:%M:%S)"
