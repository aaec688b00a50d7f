#!/usr/bin/env bash
# A/B of two dlm-data builds on one corpus, same run, alternating: wall, CPU (user+sys) and
# Mtok/s of `pack` per family and thread count. For changes inside pack whose effect is smaller
# than run-to-run noise; the Python reference comparison is `make bench-pack-scale`.
#
# usage: bench/pack/ab.sh BASE_BIN NEW_BIN CORPUS.parquet "THREADS..." [REPEATS]
#   FAMS="tok1.json tok2.json" overrides the tokenizers (default: the scale bench's Llama-3-shaped
#   under /tmp/bps, the real Mistral-7B and phi-2 under ../shared/tokenizers)
set -euo pipefail
base=$1 new=$2 corpus=$3 threads=$4 reps=${5:-2}
shared=${DLM_SHARED_TOKENIZERS:-$(cd "$(dirname "$0")/../../.." && pwd)/shared/tokenizers}
fams=${FAMS:-/tmp/bps/tok/llama3-shaped/tokenizer.json $shared/mistral-7b-v0.1/tokenizer.json $shared/phi-2/tokenizer.json}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for f in $fams; do
  eos='<|endoftext|>'; [[ $f == *mistral* ]] && eos='</s>'
  for th in $threads; do for r in $(seq "$reps"); do for v in base new; do
    bin=$new; [ $v = base ] && bin=$base
    rm -rf "$work/out"
    /usr/bin/time -f "%e %U %S" -o "$work/time" env RAYON_NUM_THREADS="$th" "$bin" pack --input "$corpus" \
      --text-column text --tokenizer "$f" --eos-token "$eos" --out "$work/out" --seq-len 2048 --json \
      > "$work/json" 2>/dev/null
    read -r w u s < "$work/time"
    tok=$(python3 -c "import json,sys;print(json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])['tokens'])" "$work/json")
    python3 -c "import sys;f,th,v,w,u,s,t=sys.argv[1:];print(f'{f} thr={th} {v} wall={float(w):.2f} cpu={float(u)+float(s):.2f} Mtok/s={int(t)/float(w)/1e6:.1f}')" \
      "$(basename "$(dirname "$f")")" "$th" "$v" "$w" "$u" "$s" "$tok"
  done; done; done
done
