#!/usr/bin/env bash
# `make test-wheel` (issue 59, part of `make test`): install dist/dlm_data-*.whl with
# `pip install --no-index` into a fresh venv and run the installed `dlm-data` with PATH holding
# only that venv's bin/ (no Rust toolchain): --version (this commit, feature cuda), fixtures,
# a pack of a fixture dataset, a distill with the default device (here the CPU: this machine
# has no libcuda, so one warning line), and `--device cuda` refused at once (exit 2).
# PYTHON: the python3 the venv is made from.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
wheel=$(ls dist/dlm_data-*.whl)
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
"$PYTHON" -m venv "$W/venv"
"$W/venv/bin/pip" install -q --no-index "$wheel"
# Only the venv on PATH: whatever dlm-data needs must come with the wheel.
d() { env PATH="$W/venv/bin" dlm-data "$@"; }
fail() { echo "wheel-test: $*" >&2; exit 1; }
for t in cargo rustc; do (PATH="$W/venv/bin"; ! command -v "$t" >/dev/null) || fail "$t is on the test PATH"; done
[ -x "$W/venv/bin/dlm-data" ] || fail "the wheel put no dlm-data in the venv's bin/"
[ ! -e "$W/venv/bin/dlm-gpu" ] || fail "the wheel carries dlm-gpu (the GPU harness): only dlm-data belongs in it"

v=$(d --version)
echo "$v"
commit=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ "$v" == "dlm-data "*" (commit $commit, features: cuda)" ]] || fail "--version: expected commit $commit and features: cuda"

d --quiet fixtures --out "$W/fx"
d --quiet pack --input "$W/fx/hub/HuggingFaceFW/fineweb-edu/sample/10BT" \
  --tokenizer "$W/fx/tokenizer" --out "$W/shards" --seq-len 64
"$PYTHON" -c "import json,sys; i=json.load(open(sys.argv[1])); assert i['complete'] and i['tool_build']['features']==['cuda'], i['tool_build']; print('pack:', i['totals'].get('rows'), 'rows,', len(i['shards']), 'shard(s)')" "$W/shards/index.json"

G=(--teacher "$W/fx/teacher" --prompts "$W/fx/teacher-prompts.jsonl" --limit 4 --gen-length 8 --block-length 4 --steps 4 --batch-size 2)
d distill "${G[@]}" --out "$W/distilled.json" 2> "$W/distill.err" || { cat "$W/distill.err"; fail "distill failed"; }
"$PYTHON" -c "import json,sys; r=json.load(open(sys.argv[1])); assert len(r)==4 and all(x['gen']['tool_build']['features']==['cuda'] for x in r); print('distill:', len(r), 'records on the CPU')" "$W/distilled.json"
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; then
  [ "$(grep -c 'WARN' "$W/distill.err")" = 1 ] && grep -q -- '--device auto: running on the CPU' "$W/distill.err" \
    || { cat "$W/distill.err"; fail "expected one warning line for the CPU fallback"; }
  set +e; d distill "${G[@]}" --device cuda --out "$W/cuda.json" 2> "$W/cuda.err"; rc=$?; set -e
  [ "$rc" = 2 ] && grep -q 'libcuda.so.1' "$W/cuda.err" && [ ! -e "$W/cuda.json.parts" ] \
    || { cat "$W/cuda.err"; fail "--device cuda without libcuda: expected exit 2 naming libcuda.so.1, got $rc"; }
  echo "distill --device cuda: refused (exit 2): $(tail -1 "$W/cuda.err")"
fi
echo "wheel-test: $(basename "$wheel") installs and runs without Rust"
