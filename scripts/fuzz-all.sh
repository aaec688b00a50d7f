#!/usr/bin/env bash
# Run fuzz targets of a prebuilt fuzz test binary (tests/fuzz/, `cargo test --test fuzz
# --no-run`), JOBS at a time, SECS seconds each, and print a markdown table: cases, Ok, Err,
# panics, seconds and verdict per target. Exit 1 when any target failed (a panic, abort, hang
# or a seed that stopped parsing); its log names the saved input and the replay command.
#
#   scripts/fuzz-all.sh BIN SECS JOBS [TARGET...]      # no TARGET: every target BIN lists
#
# Environment: FUZZ_SEED (default 1), FUZZ_LOGS (default target/fuzz-logs), DLM_FUZZ_ROOT
# (default: this checkout — the corpus and seed files are read from there).
set -euo pipefail
if [ $# -lt 3 ]; then
  echo "usage: $0 BIN SECS JOBS [TARGET...]" >&2
  exit 2
fi
bin=$(realpath "$1"); secs=$2; jobs=$3; shift 3
root=$(cd "$(dirname "$0")/.." && pwd)
export DLM_FUZZ_ROOT=${DLM_FUZZ_ROOT:-$root}
logs=${FUZZ_LOGS:-$root/target/fuzz-logs}
mkdir -p "$logs"
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <("$bin" --list --format terse 2>/dev/null | sed -n 's/: test$//p')
fi
[ ${#targets[@]} -gt 0 ] || { echo "fuzz-all: $bin lists no targets" >&2; exit 2; }
export bin secs logs
export FUZZ_SEED=${FUZZ_SEED:-1}
run_one() {
  local t=$1 rc=0
  DLM_FUZZ_SECS=$secs DLM_FUZZ_SEED=$FUZZ_SEED DLM_FUZZ_KEEP_GOING=1 \
    "$bin" "$t" --exact --nocapture --test-threads=1 >"$logs/$t.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$t.rc"
}
export -f run_one
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {}
failed=0
echo "| target | cases | Ok | Err | panics | seconds | result |"
echo "|---|---:|---:|---:|---:|---:|---|"
for t in "${targets[@]}"; do
  rc=$(cat "$logs/$t.rc" 2>/dev/null || echo 1)
  # "fuzz T: N cases in S s (seed K): A Ok, B Err, C panics; ..."
  line=$(grep -o "fuzz $t: [0-9]* cases in [0-9.]*s.*" "$logs/$t.log" | tail -1 || true)
  read -r cases secs_run ok err panics < <(echo "$line" |
    sed -E 's/.*: ([0-9]+) cases in ([0-9.]+)s \(seed [0-9]+\): ([0-9]+) Ok, ([0-9]+) Err, ([0-9]+) panics.*/\1 \2 \3 \4 \5/;t;s/.*/- - - - -/')
  if [ "$rc" = 0 ]; then result=pass; else result="FAIL (rc $rc, $logs/$t.log)"; failed=1; fi
  echo "| $t | $cases | $ok | $err | $panics | $secs_run | $result |"
done
exit $failed
