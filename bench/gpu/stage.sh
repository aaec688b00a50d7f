#!/usr/bin/env bash
# Stage what a device run needs into the lead's checkout (/work/main/.dev/gpu, git-ignored
# there): the device tool sends that checkout, not this worktree. Run from the repo root:
#   bench/gpu/stage.sh [PROFILE]   (PROFILE: debug (default; candle-core, gemm and the other hot deps are opt-level 3, Cargo.toml) or release)
set -euo pipefail
prof=${1:-debug}
dst=${DLM_STAGE_DIR:-/work/main/.dev/gpu}
bins=${STAGE_BINS:-dlm-gpu dlm-data}
args=(); for b in $bins; do args+=(--bin "$b"); done
if [ "$prof" = release ]; then cargo build --release --features cuda "${args[@]}"; else cargo build --features cuda "${args[@]}"; fi
mkdir -p "$dst"
for b in $bins; do
  strip -o "$dst/$b" "target/$prof/$b"
done
cp bench/gpu/*.py bench/gpu/run.sh "$dst/"
cp ../shared/bench/torch_sampler_ref.py "$dst/"
git rev-parse HEAD > "$dst/COMMIT"
git status --porcelain | head -n 20 > "$dst/DIRTY" || true
du -sh "$dst"
