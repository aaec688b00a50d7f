#!/usr/bin/env bash
# `make demo`: the whole pipeline end to end on the embedded default — generated fixtures
# served by the project's hub emulator — printing where every output went.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/debug/dlm-data}
OUT=${DEMO_OUT:-demo-out}
rm -rf "$OUT"; mkdir -p "$OUT"
echo "== fixtures"
$BIN fixtures --out "$OUT/fixtures"
echo
echo "demo outputs are under $OUT/"
