#!/usr/bin/env bash
# GPU distill preemption (issue 41): SIGTERM a `distill --device cuda` in the middle of its run,
# as Slurm does to a preempted job, and check what the docs promise (docs/commands/distill.md,
# "Output, resume, workers"): exit 143 within a few seconds of the signal, no temp file left,
# no final output, the committed units kept; the rerun with the same arguments completes, and
# its distilled.json is byte-identical to an uninterrupted run's. Runs over what stage.sh
# staged (dlm-data built with --features cuda, dlm-gpu); ~1 min. Prints PASS or FAIL lines.
set -uo pipefail
export DLM_KERNEL_CACHE=${DLM_KERNEL_CACHE:-/tmp/dlm-kernels}
cd "$(dirname "$0")"
for b in dlm-data dlm-gpu; do [ -x $b ] || { xz -dk $b.xz && chmod +x $b; }; done
w=/tmp/preempt; rm -rf "$w"; mkdir -p "$w"
[ -d /tmp/fx ] || ./dlm-gpu teacher-fixture --out /tmp/fx >/dev/null
python3 - "$w/prompts.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(1536):
        r = {"id": f"p-{i:04}", "source": "fixture", "repo": "fixture/prompts", "commit": "0" * 40,
             "file": "p.jsonl", "row": i, "prompt": f"Question {i}: explain topic {i % 37} briefly." + " more" * (i % 11)}
        if i % 3:
            k = 2 + i % 4
            r.update(options=[f"option {o} of {i}" for o in range(k)], gold="ABCDE"[i % k])
        f.write(json.dumps(r) + "\n")
PY
fail=0
for sched in "--no-early-exit" "--early-exit --window-prompts 128"; do
  G="--gen-length 64 --block-length 16 --steps 64 --batch-size 64 --device cuda $sched"
  tag=$(echo "$sched" | tr -c 'a-z0-9' _)
  ref=$w/ref_$tag.json out=$w/int_$tag.json
  t0=$(date +%s.%N)
  ./dlm-data distill --teacher /tmp/fx --prompts "$w/prompts.jsonl" --out "$ref" $G 2>"$w/ref_$tag.err" >/dev/null \
    || { echo "FAIL [$sched] reference run: $(tail -n 2 "$w/ref_$tag.err")"; fail=1; continue; }
  full=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)")
  ./dlm-data distill --teacher /tmp/fx --prompts "$w/prompts.jsonl" --out "$out" $G 2>"$w/int_$tag.err" >/dev/null &
  pid=$!
  # Signal once at least one unit is committed (so the kept-parts promise is tested too).
  for _ in $(seq 1 600); do
    ls "$out.parts"/*.jsonl >/dev/null 2>&1 && break
    sleep 0.1
  done
  sleep 0.5
  ts=$(date +%s.%N); kill -TERM $pid; wait $pid; rc=$?; te=$(date +%s.%N)
  stop=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$ts" "$te")
  parts=$(cat "$out.parts"/*.jsonl 2>/dev/null | wc -l)
  tmps=$(find "$w" -name '*.tmp-*' | wc -l)
  [ -e "$out" ] && final=yes || final=no
  ./dlm-data distill --teacher /tmp/fx --prompts "$w/prompts.jsonl" --out "$out" $G 2>"$w/re_$tag.err" >/dev/null; rrc=$?
  same=no; cmp -s "$ref" "$out" && same=yes
  verdict=PASS
  if [ $rc -ne 143 ] || [ "$final" = yes ] || [ "$tmps" -ne 0 ] || [ $rrc -ne 0 ] || [ $same = no ] \
     || ! python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= 6 else 1)" "$stop"; then
    verdict=FAIL; fail=1
  fi
  echo "$verdict [$sched]: 1536 prompts, uninterrupted ${full}s; SIGTERM → exit $rc after ${stop}s," \
       "$parts committed part line(s) kept, final output written: $final, temp files: $tmps;" \
       "rerun exit $rrc, distilled.json equal to the uninterrupted run: $same"
  [ $verdict = FAIL ] && tail -n 3 "$w/int_$tag.err" "$w/re_$tag.err"
done
exit $fail
