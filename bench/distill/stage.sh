#!/usr/bin/env bash
# Stage the distillation-data benchmark (issue 55) for a GPU box without Rust: dlm-data built
# with --features cuda (release, stripped), the trained-teacher trainer and its data
# (bench/teacher), the 2B-shape maker (bench/gpu/make_teacher.py), trajectory.sh and
# compare_topk.py. Run from the repo root:  bench/distill/stage.sh
# DLM_STAGE_DIR (default /work/main/.dev/distill: the device tool sends the lead's checkout).
set -euo pipefail
dst=${DLM_STAGE_DIR:-/work/main/.dev/distill}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$dst"
if [ ! -f "$dst/data/meta.json" ]; then
  if [ -f /work/main/.dev/teacher/data/meta.json ]; then cp -r /work/main/.dev/teacher/data "$dst/";
  else "$py" bench/teacher/build_data.py --out "$dst/data"; fi
fi
cargo build --release --features cuda --bin dlm-data
strip -o "$dst/dlm-data" target/release/dlm-data
cp bench/teacher/train.py bench/teacher/ckpt.py bench/gpu/make_teacher.py \
   bench/distill/trajectory.sh bench/distill/compare_topk.py "$dst/"
git rev-parse HEAD > "$dst/COMMIT"
git status --porcelain | head -n 20 > "$dst/DIRTY" || true
du -sh "$dst"
