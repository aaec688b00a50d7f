#!/usr/bin/env bash
# One device command: parity (tiny teacher vs CPU reference; teacher-shaped model vs PyTorch)
# and the speed table (dlm-gpu vs torch_sampler_ref.py eager and --compile, batch 1/16/64).
# On the device:  bash .dev/gpu/run.sh [parity|bench|all]   (results under $OUT)
set -uo pipefail
what=${1:-all}
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/out}; mkdir -p "$out"
export DLM_KERNEL_CACHE=/tmp/dlm-kernels PYTHONUNBUFFERED=1 RUST_LOG=info
cd "$here"
echo "commit $(cat COMMIT) dirty=$(wc -l < DIRTY)"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
T=/tmp/teacher
if [ "$what" != bench-torch ]; then
  ./dlm-gpu tiny --out /tmp/tiny && ./dlm-gpu parity-tiny --teacher /tmp/tiny --out "$out/parity_tiny.json" 2>&1 | tail -n 20
  [ -f $T/config.json ] || python3 make_teacher.py --out $T
fi
if [ "$what" = parity ] || [ "$what" = all ]; then
  python3 torch_parity.py --teacher $T --bin ./dlm-gpu --out "$out/parity_teacher.json" 2>&1 | grep -v Warning
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  B=${BATCHES:-1,16,64}
  ./dlm-gpu bench --teacher $T --batches $B --out "$out/bench_dlm.json"
  if [ "${SKIP_EAGER:-0}" != 1 ]; then
    python3 torch_sampler_ref.py --modes block --batches $B --out "$out/bench_torch_eager.json" | tail -n 4
  fi
  if [ "${SKIP_COMPILE:-0}" != 1 ]; then
    python3 torch_sampler_ref.py --modes block --batches $B --compile --out "$out/bench_torch_compile.json" 2>&1 | grep -v Warning | tail -n 4
  fi
  python3 table.py "$out" | tee "$out/table.md"
fi
