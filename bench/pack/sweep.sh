#!/usr/bin/env bash
# Sweep pack's pipeline sizes (DLM_PACK_CHUNK_KB / DLM_PACK_AHEAD / DLM_PACK_BATCH_KB, see
# docs/environment.md) at one thread count: per setting and tokenizer, the profile's timeline,
# pool busy % and Mtok/s. For choosing defaults on a many-core box; output bytes never depend
# on these settings (tests/pack.rs).
#
# usage: bench/pack/sweep.sh BIN CORPUS.parquet THREADS "TOK.json[:EOS] ..." ["ENV SETTINGS" ...]
#   default settings: the defaults, then AHEAD=32/64, CHUNK_KB=64/1024, BATCH_KB=1024 + AHEAD=64
set -euo pipefail
bin=$1 corpus=$2 threads=$3 toks=$4; shift 4
cfgs=("$@")
[ ${#cfgs[@]} -gt 0 ] || cfgs=("X=0" "DLM_PACK_AHEAD=32" "DLM_PACK_AHEAD=64" "DLM_PACK_CHUNK_KB=64"
  "DLM_PACK_CHUNK_KB=1024" "DLM_PACK_BATCH_KB=1024 DLM_PACK_AHEAD=64")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for cfg in "${cfgs[@]}"; do
  for t in $toks; do
    tok=${t%%:*} eos='<|endoftext|>'; [[ $t == *:* ]] && eos=${t#*:}
    rm -rf "$work/out"
    # shellcheck disable=SC2086
    env $cfg RAYON_NUM_THREADS="$threads" DLM_PACK_PROFILE=1 "$bin" pack --input "$corpus" --text-column text \
      --tokenizer "$tok" --eos-token "$eos" --out "$work/out" --seq-len 2048 --json 2> "$work/err" > /dev/null
    echo "$(basename "$(dirname "$tok")") threads=$threads [$cfg] $(grep -o 'timeline[^|]*| wall [0-9.]* s' "$work/err") |" \
      "$(grep -o 'pool busy [0-9]* %' "$work/err") | $(grep -o 'achieved [0-9.]*' "$work/err") Mtok/s"
  done
done
