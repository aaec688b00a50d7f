#!/usr/bin/env bash
# `make bench-fetch`: dlm-data fetch vs curl on the same file from the project's hub emulator
# on loopback, in one run. Two scenarios:
#   1. one stream, unthrottled (goal: >= 0.9x curl's throughput; we also verify sha256),
#   2. a throttled CDN (per-connection cap, like real CDNs): our parallel ranges vs one curl stream.
# Prints the ratios and writes bench/results/raw/fetch-<UTC date>.md with the command (see bench/results/fetch.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/debug/dlm-data}
MB=${BENCH_FETCH_MB:-256}
THROTTLE_MBPS=${BENCH_FETCH_THROTTLE_MBPS:-40}
JOBS=${BENCH_FETCH_JOBS:-8}
REPS=${BENCH_FETCH_REPS:-3}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench-fetch.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT

start_emulator() { # args: extra flags; sets EP
  local out="$W/emu.$RANDOM"
  "$BIN" hub-emulator --root "$W/hub" "$@" >"$out" 2>"$out.err" &
  PIDS+=($!)
  for _ in $(seq 1 600); do [ -s "$out" ] && break; sleep 0.1; done
  EP=$(head -n1 "$out")
  [ -n "$EP" ] || { cat "$out.err"; echo "emulator did not start" >&2; exit 1; }
}

now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2-$1:.3f}')"; }
best() { printf '%s\n' "$@" | sort -g | head -n1; }

echo "== generating fixtures with a ${MB} MB file"
"$BIN" hub-emulator --root "$W/hub" --fixtures --large-mb "$MB" --port 0 >"$W/gen" 2>/dev/null &
GEN=$!; PIDS+=($GEN)
for _ in $(seq 1 600); do [ -s "$W/gen" ] && break; sleep 0.1; done
kill "$GEN"; wait "$GEN" 2>/dev/null || true
FILE="$W/hub/dlm-data/large/data/train-00000-of-00001.jsonl"
SIZE=$(stat -c %s "$FILE")
cat >"$W/large.toml" <<TOML
[[source]]
name = "large"
repo = "dlm-data/large"
revision = "main"
split = "train"
format = "jsonl"
TOML
URL_PATH="datasets/dlm-data/large/resolve/main/data/train-00000-of-00001.jsonl"

run_pair() { # label, fetch flags...; prints "curl_s ours_s"
  local label=$1; shift
  local c=() o=()
  for r in $(seq 1 "$REPS"); do
    rm -f "$W/curl.out"
    local t0; t0=$(now)
    curl -sS -L --fail -o "$W/curl.out" "$EP/$URL_PATH"
    c+=("$(secs "$t0" "$(now)")")
    rm -rf "$W/cache" "$W/large.lock"
    t0=$(now)
    HF_ENDPOINT=$EP DLM_NO_PROGRESS=1 RUST_LOG=warn "$BIN" fetch --manifest "$W/large.toml" --cache "$W/cache" "$@" 2>"$W/fetch.err" \
      || { cat "$W/fetch.err"; exit 1; }
    o+=("$(secs "$t0" "$(now)")")
  done
  cmp -s "$W/curl.out" "$FILE" || { echo "curl output differs" >&2; exit 1; }
  cmp -s "$(find "$W/cache" -path '*snapshots*' -name 'train-00000-of-00001.jsonl')" "$FILE" || { echo "fetch output differs" >&2; exit 1; }
  echo "$(best "${c[@]}") $(best "${o[@]}") ${c[*]} | ${o[*]}"
}

echo "== 1. one stream, unthrottled loopback"
start_emulator
read -r C1 O1 REST1 <<<"$(run_pair one-stream --jobs 1)"
R1=$(python3 -c "print(f'{$C1/$O1:.2f}')")
MBS_C1=$(python3 -c "print(f'{$SIZE/1e6/$C1:.0f}')"); MBS_O1=$(python3 -c "print(f'{$SIZE/1e6/$O1:.0f}')")
echo "curl ${C1}s (${MBS_C1} MB/s)  dlm-data fetch --jobs 1 ${O1}s (${MBS_O1} MB/s)  ratio ${R1}x   [runs: $REST1]"

echo "== 2. throttled CDN (${THROTTLE_MBPS} MB/s per connection), parallel ranges"
start_emulator --throttle-mbps "$THROTTLE_MBPS"
read -r C2 O2 REST2 <<<"$(run_pair throttled --jobs "$JOBS" --chunk-mb 16)"
R2=$(python3 -c "print(f'{$C2/$O2:.2f}')")
MBS_C2=$(python3 -c "print(f'{$SIZE/1e6/$C2:.0f}')"); MBS_O2=$(python3 -c "print(f'{$SIZE/1e6/$O2:.0f}')")
echo "curl ${C2}s (${MBS_C2} MB/s)  dlm-data fetch --jobs $JOBS ${O2}s (${MBS_O2} MB/s)  ratio ${R2}x   [runs: $REST2]"

STAMP=$(date -u +%Y-%m-%dT%H%MZ)
OUT=bench/results/raw/fetch-$(date -u +%Y-%m-%d).md
mkdir -p bench/results/raw
{
  echo "# fetch throughput vs curl ($STAMP)"
  echo
  echo "Command: \`make bench-fetch\` (bench/fetch/run.sh; BIN=$BIN, BENCH_FETCH_MB=$MB, BENCH_FETCH_THROTTLE_MBPS=$THROTTLE_MBPS, BENCH_FETCH_JOBS=$JOBS, BENCH_FETCH_REPS=$REPS)"
  echo
  echo "Machine: $(nproc) cores, $(uname -sr); $(curl --version | head -n1 | cut -d' ' -f1-2). File: ${SIZE} bytes from the hub emulator on loopback (LFS: Hub 302 → CDN). Best of $REPS; dlm-data time includes the revision/listing/README requests, sha256 verification, cache rename and lock."
  echo
  echo "| scenario | curl s (MB/s) | dlm-data fetch s (MB/s) | ratio (ours/curl throughput) |"
  echo "|---|---|---|---|"
  echo "| one stream, unthrottled (--jobs 1) | $C1 ($MBS_C1) | $O1 ($MBS_O1) | ${R1}x |"
  echo "| throttled CDN ${THROTTLE_MBPS} MB/s/conn (--jobs $JOBS --chunk-mb 16) | $C2 ($MBS_C2) | $O2 ($MBS_O2) | ${R2}x |"
  echo
  echo "Raw runs (curl | ours): one stream [$REST1]; throttled [$REST2]"
} >"$OUT"
echo "results: $OUT"
