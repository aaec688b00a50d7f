#!/usr/bin/env bash
# usage: t1-ab.sh BASE NEW CORPUS TOKJSON THREADS REPS [EOS]
set -u
base=$1 new=$2 corpus=$3 tok=$4 th=$5 reps=$6 eos=${7:-<|endoftext|>}
w=/tmp/t1-ab; mkdir -p $w
for r in $(seq $reps); do for v in base new; do
  bin=$new; [ $v = base ] && bin=$base
  rm -rf $w/out-$v
  /usr/bin/time -f "%e %U %S" -o $w/time env RAYON_NUM_THREADS=$th DLM_PACK_PROFILE=1 $bin pack --input $corpus \
    --text-column text --tokenizer $tok --eos-token "$eos" --no-bos --out $w/out-$v --seq-len 2048 --json >$w/json 2>$w/err-$v
  read -r wall u s < $w/time
  echo "thr=$th $v wall=$wall user=$u sys=$s cpu=$(python3 -c "print(round($u+$s,2))") load=$(cut -d' ' -f1 /proc/loadavg)"
  grep "pack profile" $w/err-$v | sed 's/^/    /'
done
for f in $w/out-base/data/*.parquet; do cmp -s $f $w/out-new/data/$(basename $f) || echo "DIFFER: $(basename $f)"; done
echo "shards: $(ls $w/out-base/data | wc -l) vs $(ls $w/out-new/data | wc -l)"
done
