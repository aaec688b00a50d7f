#!/usr/bin/env bash
# per-thread CPU seconds (perf cpu-clock samples at 1000 Hz) of a 1-thread pack, bins alternating
# usage: ab.sh CORPUS TOKENIZER REPS BIN... ; env: EXTRA (env assignments for the run)
set -u
corpus=$1 tok=$2 reps=$3; shift 3; bins="$@"
cd /tmp/t3
for r in $(seq $reps); do for bin in $bins; do
  rm -rf pp
  /usr/bin/time -f "%e %U %S" -o tt env RAYON_NUM_THREADS=1 ${EXTRA:-} perf record -q -o pp.data -F 1000 $bin pack --input $corpus --text-column text --tokenizer $tok --eos-token '<|endoftext|>' --no-bos --out pp --seq-len 2048 >/dev/null 2>err.log || { echo FAIL; tail -3 err.log; }
  perf script -i pp.data -F comm,tid,ip,sym 2>/dev/null > ps.txt
  awk '{n[$1" "$2]++; t++} END {for (k in n) print n[k], k; print t, "TOTAL"}' ps.txt | sort -rn > per-tid
  wtid=$(awk 'NR==2{print $3}' per-tid)
  w_s=$(awk 'NR==2{print $1/1000}' per-tid)
  w_clear=$(awk -v t=$wtid '$2==t && $4=="clear_page_erms"{n++} END{print n/1000}' ps.txt)
  pf_s=$(awk '$1=="pack-prefault"{n++} END{print n/1000}' ps.txt)
  tot_s=$(awk '/TOTAL/{print $1/1000}' per-tid)
  echo "$(basename $bin) wall=$(cut -d' ' -f1 tt) user+sys=$(awk '{print $2+$3}' tt) | worker $w_s s (clear_page $w_clear s) | prefault thread $pf_s s | all $tot_s s | load $(cut -d' ' -f1 /proc/loadavg)"
  cp -r pp out-$(basename $bin)
done
[ $r = 1 ] && { set -- $bins; diff -r out-$(basename $1)/data out-$(basename $2)/data >/dev/null && echo "shards identical"; }
done
