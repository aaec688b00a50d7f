#!/usr/bin/env bash
# Byte-identity proof (issue 44): sha256 of every `make demo` output and of fixed CPU `distill`
# runs on the fixture teacher, compared with tests/golden/output-digests.txt.
#   scripts/digests.sh --write   record the digests (after a change that is MEANT to change bytes)
#   scripts/digests.sh --check   fail (exit 1, the differing files listed) on any difference
# Contents are normalised before hashing: the output folder's absolute path becomes <OUT> and
# the hub emulator's address <HF_ENDPOINT>, so the digests do not depend on the checkout's path
# or the emulator's port, every ISO-8601 UTC timestamp (decontam.json's "time") <TIME> and every JSON
# timing field (`"…seconds": 0.02`, `"…_per_s": 156.6`, decontam's report) `<T>`, the commit of
# every `tool_build` (the build that wrote the file, issue 59) `<COMMIT>`, and the sha256 of a
# file holding one, where another output quotes it, `<sha256:FILE>`.
# Files that differ between two runs of one commit (clocks, timings,
# process ids) are listed in VOLATILE below with why, and not hashed.
# The outputs are written under one fixed absolute path (default /tmp/dlm-data-digests, one run
# at a time: flock): index.json embeds the output's absolute path and the sha256 fields that
# digest it (decontam.json `scanned.sha256`, lineage.json) would otherwise change with the
# checkout's path, so golden digests recorded in one worktree would not hold in another.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:---check}
GOLDEN=tests/golden/output-digests.txt
BIN=${BIN:-target/debug/dlm-data}
OUT=${DIGEST_OUT:-/tmp/dlm-data-digests}
mkdir -p "$(dirname "$OUT")"
exec 9> "$OUT.lock"
flock 9
# DIGEST_REUSE_DEMO=1: keep a finished demo-out from an earlier run of the same binary.
if [ "${DIGEST_REUSE_DEMO:-0}" = 1 ] && [ -f "$OUT/demo-out/distilled.json" ]; then
  rm -rf "$OUT/distill" "$OUT/distill.log"
  OUT=$(cd "$OUT" && pwd)
else
  rm -rf "$OUT"; mkdir -p "$OUT"
  OUT=$(cd "$OUT" && pwd)
  DEMO_OUT="$OUT/demo-out" BIN="$BIN" scripts/demo.sh > "$OUT/demo.log" 2>&1 || { tail -n 30 "$OUT/demo.log"; exit 1; }
fi

# Fixed CPU distills on the demo's fixture teacher and MCQ prompts: continuous batching
# (default), fixed batches, two workers + merge, jsonl, an approximate mode.
D="$OUT/distill"; mkdir -p "$D"
T="$OUT/demo-out/fixtures/teacher"; P="$OUT/demo-out/mcq/prompts.jsonl"
G=(--teacher "$T" --prompts "$P" --limit 10 --gen-length 16 --block-length 8 --steps 16 --batch-size 3)
run() { "$BIN" distill "${G[@]}" "$@" >> "$OUT/distill.log" 2>&1; }
run --out "$D/default.json"
run --out "$D/fixed.json" --no-early-exit
run --out "$D/window.json" --window-prompts 4
run --out "$D/sharded.json" --shard 0/2
run --out "$D/sharded.json" --shard 1/2
"$BIN" merge "$D/sharded.json" >> "$OUT/distill.log" 2>&1
run --out "$D/lines.jsonl" --format jsonl
run --out "$D/threshold.json" --threshold 0.5 --seed 7 --temperature 1

# Clocks, timings, pids and logs: differ between two runs of one commit.
VOLATILE='^digests\.txt$|(^|/)(emulator\.url|emulator\.log|download\.log|stream\.log|demo\.log|distill\.log|pipeline\.run\.json|[^/]*\.lock\.json|[^/]*\.pid)$'
endpoint=$(head -1 "$OUT/demo-out/emulator.url")
# The normaliser (python3): file list on stdin, one `<sha256>  <file>` line out per file.
NORMALISE=$(cat <<'PY'
import hashlib, re, sys
out, endpoint = sys.argv[1], sys.argv[2]
files = [l.rstrip("\n") for l in sys.stdin if l.strip()]
raw = {f: open(f"{out}/{f}", "rb").read() for f in files}
# The tool build's commit changes with every commit (issue 59): `"tool_build": {"version": …,
# "commit": "<40 hex>"` becomes <COMMIT>, and the sha256 of a file that records it, wherever
# another output quotes it (lineage.json's data, decontam.json's scanned), <sha256:FILE> —
# that file's own digest below still covers every other byte of it.
BUILD = re.compile(rb'("tool_build"\s*:\s*\{\s*"version"\s*:\s*"[^"]*"\s*,\s*"commit"\s*:\s*)"(?:[0-9a-f]{40}|unknown)"')
quoted = {hashlib.sha256(b).hexdigest().encode(): f"<sha256:{f}>".encode()
          for f, b in raw.items() if BUILD.search(b)}
for f in files:
    b = raw[f].replace(out.encode(), b"<OUT>").replace(endpoint.encode(), b"<HF_ENDPOINT>")
    b = re.sub(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", b"<TIME>", b)
    b = re.sub(rb'("[A-Za-z_]*(?:seconds|_per_s)"\s*:\s*)-?[0-9][0-9.eE+-]*', rb"\1<T>", b)
    b = BUILD.sub(rb'\1"<COMMIT>"', b)
    if quoted:
        b = re.sub(rb"[0-9a-f]{64}", lambda m: quoted.get(m.group(0), m.group(0)), b)
    print(f"{hashlib.sha256(b).hexdigest()}  {f}")
PY
)
list() {
  (cd "$OUT" && find . -type f | sed 's|^\./||' | LC_ALL=C sort | grep -Ev "$VOLATILE") \
    | python3 -c "$NORMALISE" "$OUT" "$endpoint"
}
list > "$OUT/digests.txt"
case "$mode" in
  --write) cp "$OUT/digests.txt" "$GOLDEN"; echo "recorded $(wc -l < "$GOLDEN") digests in $GOLDEN" ;;
  --check)
    if diff -u "$GOLDEN" "$OUT/digests.txt"; then
      echo "output bytes unchanged: $(wc -l < "$GOLDEN") files match $GOLDEN"
    else
      echo "output bytes CHANGED (above: - recorded, + now); outputs kept in $OUT" >&2; exit 1
    fi ;;
  *) echo "usage: $0 --write|--check" >&2; exit 2 ;;
esac
