#!/bin/bash
# usage: t2-ab.sh FAMILY CORPUS ROUNDS BIN_A BIN_B
fam=$1; c=$2; n=$3; A=$4; B=$5
tok=/tmp/t2-bench/tok/$fam/tokenizer.json
[ -f $tok ] || tok=/work/shared/tokenizers/$fam/tokenizer.json
eos="<|endoftext|>"; [ -n "$ONE" ] && sides=A || sides="A B"
for r in $(seq $n); do
  for side in $sides; do
    bin=${!side}; out=/tmp/t2-out-$side; rm -rf $out
    RAYON_NUM_THREADS=1 /usr/bin/time -f "%U %S %e" -o /tmp/t2-time-$side.txt $bin pack --input $c --text-column text --tokenizer $tok --eos-token "$eos" --no-bos --out $out --seq-len 2048 --json >/dev/null 2>/tmp/t2-err-$side.txt || { echo FAIL $side; tail -3 /tmp/t2-err-$side.txt; }
    echo "$fam $side round $r: user/sys/wall $(cat /tmp/t2-time-$side.txt)"
  done
  if [ $r = 1 ]; then
    diff -rq /tmp/t2-out-A/data /tmp/t2-out-B/data && echo "shards identical: $(ls /tmp/t2-out-A/data | wc -l) files"
  fi
done
