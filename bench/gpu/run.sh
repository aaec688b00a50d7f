#!/usr/bin/env bash
# One device command over the staged binaries (bench/gpu/stage.sh): parity, end-to-end distill
# CPU vs CUDA, profile, speed table against torch_sampler_ref.py, approximate modes.
# On the device:  bash .dev/gpu/run.sh STEP...   (results under $OUT)
# Steps: parity (tiny teacher: GPU vs CPU, device vs host sampler, cache windows)
#        e2e (dlm-data distill --device cpu vs cuda on the project's tiny teacher)
#        resume-tune (the same with --gemm-tune), bench-tune (bench with DLM_GEMM_TUNE=1)
#        resume (distill --device cuda killed -9 mid-run, resumed: byte-identical; --logits-shift 1)
#        fold (experimental DLM_FOLD_NORM=1: parity + profile; run after `teacher`)
#        ceiling (the step's GEMMs alone on cuBLAS, burst vs sustained at the power cap)
#        profile-hot (profile after HOT s of steps; PROFILE_TAG names it)
#        wg (the wgmma attention with Q in registers, DLM_ATTN=wg: teacher parity + hot profile; after `teacher`)
#        wgab / wgbits (wgmma variants: parity + hot profiles / logits bit A-B against m2; after `teacher`)
#        teacher (make the teacher-shaped random checkpoint) torch-parity profile bench approx
#        approx-peaked torch-eager torch-compile torch-dual table; bench-refresh (dual with
#        --cache-refresh K for K in $REFRESH, default "4 8").  Env: BATCHES (1,16,64), APPROX_BATCH (16).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
export DLM_KERNEL_CACHE=/tmp/dlm-kernels PYTHONUNBUFFERED=1 RUST_LOG=${RUST_LOG:-warn}
cd "$here"
echo "commit $(cat COMMIT) dirty=$(wc -l < DIRTY)"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
T=/tmp/teacher
B=${BATCHES:-1,16,64}
ts() { date +%H:%M:%S; }
# Run a command while sampling SM clock / power every 0.5 s; prints their mean and min after
# (a sustained run at the matmul ceiling is power-limited: its clock is below a short run's).
clocks() {
  local name=$1; shift
  nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader,nounits -lms 500 > "$out/clocks_$name.csv" 2>/dev/null &
  local mon=$!
  "$@"; local rc=$?
  kill $mon 2>/dev/null; wait $mon 2>/dev/null
  awk -F', *' -v n="$name" '$1+0>0 {c+=$1; p+=$2; k++; if (min==""||$1<min) min=$1; if ($2>pm) pm=$2}
    END {if (k) printf "clocks %s: SM mean %.0f MHz (min %d), power mean %.0f W (max %.0f), %d samples\n", n, c/k, min, p/k, pm, k}' "$out/clocks_$name.csv"
  return $rc
}
for step in "$@"; do
  echo "=== $step $(ts)"
  case $step in
    parity)
      ./dlm-gpu tiny --out /tmp/tiny && ./dlm-gpu parity-tiny --teacher /tmp/tiny --out "$out/parity_tiny.json"
      # Peaked distributions (embedding and LM head ×8): T=0 end to end should agree exactly.
      ./dlm-gpu tiny --out /tmp/tiny8 --head-scale 8 && ./dlm-gpu parity-tiny --teacher /tmp/tiny8 --out "$out/parity_tiny_peaked.json"
      # head_dim 128: the wgmma attention (Hopper) against the CPU reference too.
      ./dlm-gpu tiny --out /tmp/tiny128 --head-dim 128 && ./dlm-gpu parity-tiny --teacher /tmp/tiny128 --out "$out/parity_tiny_hd128.json" ;;
    e2e)
      ./dlm-gpu teacher-fixture --out /tmp/tt >/dev/null
      G="--gen-length 64 --block-length 16 --steps 32 --batch-size 4"
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/cpu.json --device cpu $G
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/cuda.json --device cuda $G
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/cuda_t1.json --device cuda $G --temperature 1 --seed 3
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/cpu_t1.json --device cpu $G --temperature 1 --seed 3
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/dual.json --device cuda $G --cache dual --threshold 0.9
      ./dlm-data distill --teacher /tmp/tt --prompts /tmp/tt/prompts.jsonl --out /tmp/e2e/refuse.json --device cpu $G --cache dual; echo "cpu --cache dual exit $? (want 2)"
      python3 e2e_compare.py /tmp/e2e | tee "$out/e2e.txt" ;;
    fold)
      # Experimental folded RMSNorm (DLM_FOLD_NORM=1): parity, then the step profile.
      [ -f /tmp/tiny/config.json ] || ./dlm-gpu tiny --out /tmp/tiny
      DLM_FOLD_NORM=1 ./dlm-gpu parity-tiny --teacher /tmp/tiny --out "$out/parity_tiny_fold.json"
      [ -f $T/config.json ] && DLM_FOLD_NORM=1 ./dlm-gpu profile --teacher $T --batch ${PROFILE_BATCH:-64} --out "$out/profile_fold.json" ;;
    nonfinite)
      # Overflowing logits on the device sampler: exit 1 naming the prompt (issue 18).
      [ -f /tmp/tt/config.json ] || ./dlm-gpu teacher-fixture --out /tmp/tt >/dev/null
      python3 nonfinite_check.py ./dlm-data /tmp/tt /tmp/nonfinite | tee "$out/nonfinite.txt" ;;
    resume)
      [ -f /tmp/tt/config.json ] || ./dlm-gpu teacher-fixture --out /tmp/tt >/dev/null
      python3 resume_check.py ./dlm-data /tmp/tt /tmp/resume | tee "$out/resume.txt" ;;
    resume-tune)
      # The same with --gemm-tune (tuned cuBLASLt GEMMs, choices saved beside the parts).
      [ -f /tmp/tt/config.json ] || ./dlm-gpu teacher-fixture --out /tmp/tt >/dev/null
      EXTRA=--gemm-tune python3 resume_check.py ./dlm-data /tmp/tt /tmp/resume-tune | tee "$out/resume_tune.txt" ;;
    teacher)
      [ -f $T/config.json ] || python3 make_teacher.py --out $T ;;
    wg)
      # The wgmma attention with Q in registers (DLM_ATTN=wg, kernels/attention_wgmma.cu):
      # teacher-shaped logits vs PyTorch (≈ 2.0e-2 / 97.7 % like every variant), then the hot
      # step profile (attention line).
      DLM_ATTN=wg python3 torch_parity.py --teacher $T --bin ./dlm-gpu --out "$out/parity_teacher_wg.json" 2>&1 | grep -v Warning
      DLM_ATTN=wg clocks hotwg ./dlm-gpu profile --teacher $T --batch ${PROFILE_BATCH:-64} --hot ${HOT:-8} --out "$out/profile_hotwg.json" | head -n 17 ;;
    wgab)
      # The wgmma attention variants (WG_VARIANTS, default wgs2 wgh) against PyTorch on the
      # teacher shape, then the hot step profile of each (WG_PROFILE, default m2 wgs2 wgh).
      for v in ${WG_VARIANTS:-wgs2 wgh}; do
        echo "--- DLM_ATTN=$v"
        DLM_ATTN=$v python3 torch_parity.py --teacher $T --bin ./dlm-gpu --out "$out/parity_teacher_$v.json" 2>&1 | grep -v Warning | grep -v Loading
      done
      for v in ${WG_PROFILE:-m2 wgs2 wgh}; do
        echo "--- profile DLM_ATTN=$v"
        DLM_ATTN=$v clocks "hot$v" ./dlm-gpu profile --teacher $T --batch ${PROFILE_BATCH:-64} --hot ${HOT:-8} --out "$out/profile_hot$v.json" | grep -E 'step|attention'
      done ;;
    wgbits)
      # Bit-level A/B of the attention kernels: last-block logits of the teacher shape (the
      # prompts torch_parity.py wrote to /tmp/parity) under each DLM_ATTN, against m2.
      for v in ${WG_BITS:-m2 w4 wg wgs wgs2 wgh}; do
        DLM_ATTN=$v ./dlm-gpu logits --teacher $T --prompts /tmp/parity/p_logits.json \
          --out /tmp/parity/logits_$v.npy --gen-length 256 --block-length 32 2>&1 | grep -v INFO
      done
      python3 - ${WG_BITS:-m2 w4 wg wgs wgs2 wgh} <<'PY' | tee "$out/attn_bits.txt"
import sys, numpy as np
vs = sys.argv[1:]
ref = np.load(f"/tmp/parity/logits_{vs[0]}.npy")
for v in vs[1:]:
    x = np.load(f"/tmp/parity/logits_{v}.npy")
    d = np.abs(x - ref)
    print(f"{v} vs {vs[0]}: identical {np.array_equal(x, ref)}, max abs diff {d.max():.3e}, rel {np.linalg.norm(x - ref) / np.linalg.norm(ref):.3e}, argmax agree {(x.argmax(-1) == ref.argmax(-1)).mean():.4f}")
PY
      ;;
    torch-parity)
      python3 torch_parity.py --teacher $T --bin ./dlm-gpu --out "$out/parity_teacher.json" 2>&1 | grep -v Warning ;;
    profile)
      ./dlm-gpu profile --teacher $T --batch ${PROFILE_BATCH:-64} --out "$out/profile${DLM_ATTN:-}.json" ;;
    profile-hot)
      # The step profile after HOT seconds of back-to-back steps (the power-capped clock a
      # sustained run holds); PROFILE_TAG names the output (for env A/B runs).
      clocks "hot${PROFILE_TAG:-}" ./dlm-gpu profile --teacher $T --batch ${PROFILE_BATCH:-64} --hot ${HOT:-8} --out "$out/profile_hot${PROFILE_TAG:-}.json" | head -n 17 ;;
    bench)
      clocks dlm ./dlm-gpu bench --teacher $T --batches $B --out "$out/bench_dlm.json" ;;
    bench-tune)
      DLM_GEMM_TUNE=1 clocks dlm_tune ./dlm-gpu bench --teacher $T --batches $B --out "$out/bench_dlm_tune.json" ;;
    bench-dual)
      ./dlm-gpu bench --teacher $T --batches $B --cache dual --out "$out/bench_dlm_dual.json" ;;
    bench-refresh)
      # The stage-3 recommendation (bench/results/teacher.md, run 10): dual, refreshed every K.
      for k in ${REFRESH:-4 8}; do
        ./dlm-gpu bench --teacher $T --batches $B --cache dual --cache-refresh $k --out "$out/bench_dlm_dual_r$k.json"
      done ;;
    bench-prefix)
      ./dlm-gpu bench --teacher $T --batches $B --cache prefix --out "$out/bench_dlm_prefix.json" ;;
    approx)
      ./dlm-gpu approx --teacher $T --batch ${APPROX_BATCH:-16} --out "$out/approx.json" ;;
    approx-peaked)
      # The same shape with the LM head x16: peaked distributions, so threshold decoding fires
      # and the caches' agreement with the exact sampler means something.
      [ -f /tmp/teacher16/config.json ] || python3 make_teacher.py --out /tmp/teacher16 --head-scale 16
      ./dlm-gpu approx --teacher /tmp/teacher16 --batch ${APPROX_BATCH:-16} --out "$out/approx_peaked.json" ;;
    torch-eager)
      clocks torch_eager python3 torch_sampler_ref.py --modes block --batches $B --out "$out/bench_torch_eager.json" | tail -n 4 ;;
    torch-dual)
      python3 torch_sampler_ref.py --modes dual --batches $B --out "$out/bench_torch_dual.json" | tail -n 4 ;;
    torch-compile)
      # Each batch twice: the reference warms up at sequence prompt+block and times prompt+gen,
      # so a batch's first timed run includes a recompilation; the second is the steady state
      # (table.py keeps the last entry per batch).
      B2=$(echo "$B" | sed -E 's/([0-9]+)/\1,\1/g')
      clocks torch_compile python3 torch_sampler_ref.py --modes block --batches "$B2" --compile --out "$out/bench_torch_compile.json" 2>&1 | grep -v Warning | tail -n 8 ;;
    ceiling)
      # The step's GEMMs alone on cuBLAS, burst and sustained (power cap): what is left of the
      # goal's 198 ms step budget for everything else.
      clocks gemm_ceiling python3 gemm_ceiling.py --seconds ${CEIL_SECONDS:-25} --out "$out/ceiling.json" ;;
    table)
      python3 table.py "$out" | tee "$out/table.md" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
  echo "=== $step done rc=$? $(ts)"
done
