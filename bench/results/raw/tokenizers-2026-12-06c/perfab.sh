#!/usr/bin/env bash
# per-thread CPU seconds (perf cpu-clock samples at 1000 Hz) of a 1-thread pack: base vs new
set -u
corpus=$1 tok=$2 reps=$3 th=${4:-1}; shift 4; bins="$@"
cd /tmp/t1-ab
for r in $(seq $reps); do for bin in $bins; do
  rm -rf pp
  /usr/bin/time -f "%e %U %S" -o tt env RAYON_NUM_THREADS=$th perf record -q -o pp.data -F 1000 $bin pack --input $corpus --text-column text --tokenizer $tok --eos-token '<|endoftext|>' --no-bos --out pp --seq-len 2048 >/dev/null 2>&1
  perf script -i pp.data -F tid,comm 2>/dev/null | awk '{n[$2" "$1]++; t++} END {for (k in n) print n[k], k; print t, "TOTAL"}' | sort -rn > per-tid
  tok_s=$(awk 'NR==2{print $1/1000}' per-tid)
  tot_s=$(awk '/TOTAL/{print $1/1000}' per-tid)
  echo "$(basename $bin) th=$th wall=$(cut -d' ' -f1 tt) user+sys=$(awk '{print $2+$3}' tt) | busiest thread $(sed -n 2p per-tid | awk '{print $2}') $tok_s s, all threads $tot_s s, others $(python3 -c "print(round($tot_s-$tok_s,2))") s | load $(cut -d' ' -f1 /proc/loadavg)"
done; done
