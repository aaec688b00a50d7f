#!/bin/bash
# ab3.sh FAM CORPUS THREADS ROUNDS BIN... : wall of each pack binary and gigatoken, alternating
fam=$1; cor=$2; t=$3; n=$4; shift 4
c=/tmp/bt2/code-corpus-200mb.parquet; [ $cor = prose ] && c=/tmp/bt2/corpus-200mb.parquet
tok=/tmp/bt2/tok/$fam/tokenizer.json; [ -f $tok ] || tok=/work/shared/tokenizers/$fam/tokenizer.json
eos="<|endoftext|>"; [[ $fam == mistral* || $fam == phi-3* ]] && eos="</s>"
for r in $(seq $n); do
  for b in "$@"; do rm -rf /tmp/abo; /usr/bin/time -f "$(basename $b) %e %U %S" env RAYON_NUM_THREADS=$t $b pack --input $c --text-column text --tokenizer $tok --eos-token "$eos" --no-bos --out /tmp/abo --seq-len 2048 2>&1 >/dev/null | tail -1; done
  /usr/bin/time -f "giga %e %U %S" env RAYON_NUM_THREADS=$t /work/main/.venv/bin/python /work/main/bench/tokenizers/giga.py $tok $c 2>&1 >/dev/null | tail -1
done | awk '{w[$1]=w[$1]" "$2; c[$1]=c[$1]" "($3+$4)} END {for (k in w) print k, "wall:" w[k], " cpu:" c[k]}'
