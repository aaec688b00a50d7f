#!/bin/bash
# usage: ab.sh FAMILY CORPUS ROUNDS BIN_A BIN_B   (1-thread pack, A and B alternating; shards compared)
fam=$1; c=$2; n=$3; A=$4; B=$5
tok=/tmp/t4-bench/tok/$fam/tokenizer.json
[ -f $tok ] || tok=/work/shared/tokenizers/$fam/tokenizer.json
eos="<|endoftext|>"
for r in $(seq $n); do
  for side in A B; do
    bin=${!side}; out=/tmp/t4-out-$side; rm -rf $out
    RAYON_NUM_THREADS=1 /usr/bin/time -f "%U %S %e" -o /tmp/t4-time-$side.txt $bin pack --input $c --text-column text --tokenizer $tok --eos-token "$eos" --no-bos --out $out --seq-len 2048 --json >/dev/null 2>/tmp/t4-err-$side.txt || { echo FAIL $side; tail -3 /tmp/t4-err-$side.txt; }
    echo "$fam $side round $r: user/sys/wall $(cat /tmp/t4-time-$side.txt)"
  done
  if [ $r = 1 ]; then
    diff -rq /tmp/t4-out-A/data /tmp/t4-out-B/data && echo "shards identical: $(ls /tmp/t4-out-A/data | wc -l) files"
  fi
done
