#!/usr/bin/env bash
# Device sanity for issue 26 before the long runs (bench/teacher/stage.sh copies it; run it first
# on a fresh box: ~1 min): parity of the lockstep path (dlm-gpu
# parity-tiny), then early exit vs --no-early-exit on the fixture teacher (exact, threshold,
# dual+r4), records compared.
set -uo pipefail
export DLM_KERNEL_CACHE=/tmp/dlm-kernels
cd "$(dirname "$0")"
for b in dlm-data dlm-gpu; do [ -x $b ] || { xz -dk $b.xz && chmod +x $b; }; done
# The whole parity-tiny log is kept (/tmp/parity-tiny.log); its verdict lines are printed.
./dlm-gpu tiny --out /tmp/tiny >/dev/null && ./dlm-gpu parity-tiny --teacher /tmp/tiny > /tmp/parity-tiny.log 2>&1
echo "parity-tiny exit $? ($(wc -l < /tmp/parity-tiny.log) lines)"; grep -Ei "identical|rows|parity|max" /tmp/parity-tiny.log | tail -n 12
./dlm-gpu teacher-fixture --out /tmp/fx >/dev/null
python3 - <<'PY'
import json
with open("/tmp/fx/prompts.jsonl", "w") as f:
    for i in range(40):
        q = f"Question {i}: explain {['energy', 'the cell', 'water and light', 'a prime number'][i % 4]} in {3 + i % 7} words." + " more" * (i % 9)
        r = {"id": f"p-{i:03}", "source": "fixture", "repo": "fixture/prompts", "commit": "0" * 40, "file": "p.jsonl", "row": i, "prompt": q}
        if i % 3:
            k = 2 + i % 4
            r.update(options=[f"option {o} of {i}" for o in range(k)], gold="ABCDE"[i % k])
        f.write(json.dumps(r) + "\n")
PY
G="--gen-length 32 --block-length 8 --steps 32 --batch-size 8 --device cuda"
rm -rf /tmp/probe.json*; ./dlm-data distill --teacher /tmp/fx --prompts /tmp/fx/prompts.jsonl --out /tmp/probe.json $G --no-early-exit 2>&1 | tail -n 1
EOT=$(python3 -c "
import json,collections
c=collections.Counter(t for r in json.load(open('/tmp/probe.json')) for t in r['response_ids']); print(c.most_common(1)[0][0])")
echo "eot $EOT; prompts $(wc -l < /tmp/fx/prompts.jsonl)"
for mode in "" "--threshold 0.3" "--cache dual --cache-refresh 4" "--cache prefix" "--temperature 1 --seed 3"; do
  for ee in "--no-early-exit" "--early-exit --window-prompts 12"; do
    n=$(echo "$mode $ee" | tr -c 'a-z0-9' _)
    rm -rf /tmp/s_$n.json*
    ./dlm-data distill --teacher /tmp/fx --prompts /tmp/fx/prompts.jsonl --out /tmp/s_$n.json $G --eot-id $EOT $mode $ee --json 2>/tmp/s_$n.err | tail -n 1 > /tmp/s_$n.sum || { echo "FAIL $mode $ee"; tail -n 5 /tmp/s_$n.err; }
  done
  a=/tmp/s_$(echo "$mode --no-early-exit" | tr -c 'a-z0-9' _).json; b=/tmp/s_$(echo "$mode --early-exit --window-prompts 12" | tr -c 'a-z0-9' _)
  python3 - "$a" "$b.json" "$b.sum" "$mode" <<'PY'
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2])); s = json.load(open(sys.argv[3]))
same = sum(x["response_ids"] == y["response_ids"] for x, y in zip(a, b))
ans = sum(x["answer"] == y["answer"] for x, y in zip(a, b))
d = max((abs(x["answer_probs"][k] - y["answer_probs"][k]) for x, y in zip(a, b) if x["answer_probs"] for k in x["answer_probs"]), default=0)
print(f"mode [{sys.argv[4]}]: {len(a)} records, response_ids equal {same}, answers equal {ans}, max dprob {d:.2e}; "
      f"early {s['rows_finished_early']}, blocks {s['mean_blocks_decoded']:.2f}, row steps {s['row_forward_passes']}/{s['row_forward_passes_full']}, batch fwd {s['batch_forward_passes']}")
PY
done
