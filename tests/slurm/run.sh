#!/usr/bin/env bash
# `make test-slurm`: the array + merge contract on a real one-node Slurm (scripts/slurm/up.sh).
# 1. pack: single process vs an sbatch array of 4 tasks + `merge` (--dependency=afterok): the
#    output trees are byte-identical (diff -r).
# 2. distill on the tiny teacher (CPU): single vs an array of 3 + merge: cmp.
# 3. requeue: a slowed pack array task is requeued while running (scontrol requeue); it resumes
#    its own slice and the merged output is still byte-identical.
# The daemons it started are stopped by pid on exit, pass or fail. With DLM_SLURM_EXISTING=1 it
# uses the cluster SLURM_CONF already points at and starts/stops nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$(pwd)/target/debug/dlm-data
W=$(mktemp -d /tmp/dlm-slurm-test.XXXXXX)
EMU=
cleanup() {
  rc=$?
  [ -n "$EMU" ] && kill "$EMU" 2>/dev/null || true
  if [ "${DLM_SLURM_EXISTING:-0}" != 1 ]; then scripts/slurm/down.sh || true; fi
  if [ $rc -ne 0 ]; then
    echo "test-slurm: FAILED (rc $rc); logs under $W/logs" >&2
    tail -n 20 "$W"/logs/* 2>/dev/null >&2 || true
  else
    rm -rf "$W"
  fi
  exit $rc
}
trap cleanup EXIT
if [ "${DLM_SLURM_EXISTING:-0}" != 1 ]; then
  eval "$(scripts/slurm/up.sh)"
fi
: "${SLURM_CONF:?SLURM_CONF not set}"
export SLURM_CONF
unset HF_TOKEN SLURM_ARRAY_TASK_ID SLURM_ARRAY_TASK_COUNT SLURM_ARRAY_TASK_MIN JOB_COMPLETION_INDEX
export RUST_LOG=warn
mkdir -p "$W/logs"
step() { echo "== test-slurm: $*"; }

wait_jobs() { # wait until none of the given job ids is in the queue
  local t=0
  while [ -n "$(squeue -h -j "$(IFS=,; echo "$*")" 2>/dev/null)" ]; do
    sleep 1; t=$((t + 1))
    [ $t -lt 240 ] || { echo "timeout waiting for jobs $*" >&2; squeue >&2; return 1; }
  done
}

step "fixtures + hub emulator + fetch"
"$BIN" fixtures --out "$W/fx" >/dev/null 2>&1
"$BIN" hub-emulator --root "$W/fx/hub" >"$W/emu.url" 2>"$W/logs/emu.log" &
EMU=$!
for i in $(seq 1 100); do [ -s "$W/emu.url" ] && break; sleep 0.1; done
export HF_ENDPOINT=$(head -1 "$W/emu.url")
cp manifests/stage1.toml "$W/stage1.toml"
"$BIN" fetch --manifest "$W/stage1.toml" --cache "$W/cache" >/dev/null 2>"$W/logs/fetch.log"

PACK="$BIN pack --manifest $W/stage1.toml --cache $W/cache --tokenizer $W/fx/tokenizer --seq-len 64 --shard-bytes 4KiB --format mds --shuffle-seed 11"
cat >"$W/prompts.jsonl" <<P
{"id":"q-000","source":"t","repo":"t/t","commit":"$(printf 'a%.0s' {1..40})","file":"p","row":0,"prompt":"Which is a planet?","options":["Mars","Salt","Blue","Nine"],"gold":"A"}
{"id":"q-001","source":"t","repo":"t/t","commit":"$(printf 'a%.0s' {1..40})","file":"p","row":1,"prompt":"Water boils at?","options":["10 C","100 C"],"gold":"B"}
{"id":"q-002","source":"t","repo":"t/t","commit":"$(printf 'a%.0s' {1..40})","file":"p","row":2,"prompt":"Explain energy in five words."}
{"id":"q-003","source":"t","repo":"t/t","commit":"$(printf 'a%.0s' {1..40})","file":"p","row":3,"prompt":"Pick the prime.","options":["4","6","7"],"gold":"C"}
{"id":"q-004","source":"t","repo":"t/t","commit":"$(printf 'a%.0s' {1..40})","file":"p","row":4,"prompt":"Name a gas.","options":["Iron","Oxygen"],"gold":"B"}
P
DISTILL="$BIN distill --teacher $W/fx/teacher --prompts $W/prompts.jsonl --gen-length 8 --block-length 4 --steps 4 --batch-size 1"

step "submit: pack array of 4 + merge, distill array of 3 + merge"
pj=$(sbatch --parsable --array=0-3 -J dlm-pack -o "$W/logs/pack-%A_%a.out" --wrap "$PACK --out $W/pack-arr")
pm=$(sbatch --parsable --dependency=afterok:$pj -J dlm-merge -o "$W/logs/pack-merge-%j.out" --wrap "$BIN merge $W/pack-arr --json")
dj=$(sbatch --parsable --array=0-2 -J dlm-distill -o "$W/logs/distill-%A_%a.out" --wrap "$DISTILL --out $W/d-arr.json")
dm=$(sbatch --parsable --dependency=afterok:$dj -J dlm-merge -o "$W/logs/distill-merge-%j.out" --wrap "$BIN merge $W/d-arr.json --json")

step "single-process references (while the arrays run)"
$PACK --out "$W/pack-single" >/dev/null 2>"$W/logs/pack-single.log"
$DISTILL --out "$W/d-single.json" >/dev/null 2>"$W/logs/distill-single.log"

wait_jobs "$pj" "$pm" "$dj" "$dm"
test -f "$W/pack-arr/index.json" || { echo "pack merge produced no index" >&2; exit 1; }
diff -r "$W/pack-single" "$W/pack-arr"
echo "pack: array of 4 + merge == single process ($(ls "$W/pack-arr" | wc -l) files)"
cmp "$W/d-single.json" "$W/d-arr.json"
echo "distill: array of 3 + merge == single process ($(wc -c <"$W/d-arr.json") bytes)"

step "requeue: kill a running pack task mid-way, requeue it, merge"
rj=$(sbatch --parsable --array=0-3 --requeue -J dlm-pack-rq -o "$W/logs/rq-%A_%a.out" \
  --export=ALL,DLM_PACK_THROTTLE_MS=150 --wrap "$PACK --out $W/pack-rq")
rm_=$(sbatch --parsable --dependency=afterok:$rj -J dlm-merge -o "$W/logs/rq-merge-%j.out" --wrap "$BIN merge $W/pack-rq --json")
part="$W/pack-rq/parts/00001-of-00004/index.json"
t=0
until [ "$(squeue -h -j "${rj}_1" -o %T 2>/dev/null)" = RUNNING ] && [ -f "$part" ] \
  && grep -q '"file"' "$part"; do
  sleep 0.2; t=$((t + 1)); [ $t -lt 600 ] || { echo "task ${rj}_1 never got going" >&2; exit 1; }
done
grep -q '"complete": false' "$part" || { echo "task 1 finished before the requeue; slow it more" >&2; exit 1; }
scontrol requeue "${rj}_1"
echo "requeued ${rj}_1 mid-way"
wait_jobs "$rj" "$rm_"
test -f "$W/pack-rq/index.json" || { echo "requeue merge produced no index" >&2; exit 1; }
diff -r "$W/pack-single" "$W/pack-rq"
echo "requeue: merged output unchanged"
step "PASS"
