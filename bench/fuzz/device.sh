#!/usr/bin/env bash
# The 10-minute run of every fuzz target (issue 42), all targets in parallel on a many-core
# machine, from a fuzz test binary built beforehand (the device has no registry access):
#
#   # here: a release build that keeps overflow checks and debug assertions (a wrap must panic)
#   CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=true CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=true \
#     cargo test --release --test fuzz --no-run --message-format=json \
#     | grep -o '"executable":"[^"]*fuzz-[0-9a-f]*"' | cut -d'"' -f4   # → BIN
#   mkdir -p bench/fuzz/bin && cp BIN bench/fuzz/bin/fuzz
#   # on the device (repository root):
#   bench/fuzz/device.sh bench/fuzz/bin/fuzz [SECS=600] [JOBS=nproc]
#
# Prints the table for bench/results/fuzz.md (and writes it to $OUT/fuzz-table.md when OUT is
# set, with every target's log under $OUT/fuzz-logs/).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-bench/fuzz/bin/fuzz}
secs=${2:-600}
jobs=${3:-$(nproc)}
if [ -n "${OUT:-}" ]; then
  export FUZZ_LOGS=$OUT/fuzz-logs
fi
echo "fuzz: $(basename "$bin"), ${secs}s per target, $jobs at a time, seed ${FUZZ_SEED:-1}, $(nproc) cores" >&2
rc=0
table=$(scripts/fuzz-all.sh "$bin" "$secs" "$jobs") || rc=$?
echo "$table"
if [ -n "${OUT:-}" ]; then
  echo "$table" >"$OUT/fuzz-table.md"
fi
exit $rc
