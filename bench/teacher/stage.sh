#!/usr/bin/env bash
# Stage the trained-teacher benchmark for a GPU box without Rust or a corpus: builds the data
# (build_data.py, from this machine's /usr/share/doc and Python stdlib), dlm-data with
# --features cuda (release, stripped), and checks the checkpoint format on the CPU with a random
# tiny teacher (tiny_check.py). Run from the repo root:  bench/teacher/stage.sh
# DLM_STAGE_DIR (default /work/main/.dev/teacher: the device tool sends the lead's checkout).
set -euo pipefail
dst=${DLM_STAGE_DIR:-/work/main/.dev/teacher}
py=${PYTHON:-.venv/bin/python}
mkdir -p "$dst"
[ -f "$dst/data/meta.json" ] || "$py" bench/teacher/build_data.py --out "$dst/data"
cargo build --release --features cuda --bin dlm-data --bin dlm-gpu
strip -o "$dst/dlm-data" target/release/dlm-data
strip -o "$dst/dlm-gpu" target/release/dlm-gpu
cp bench/teacher/*.py bench/teacher/run.sh bench/teacher/gpu_sanity.sh bench/gpu/nonfinite_check.py bench/gpu/make_teacher.py "$dst/"
"$py" bench/teacher/tiny_check.py --data "$dst/data" --bin "$dst/dlm-data"
git rev-parse HEAD > "$dst/COMMIT"
git status --porcelain | head -n 20 > "$dst/DIRTY" || true
du -sh "$dst"
