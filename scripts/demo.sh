#!/usr/bin/env bash
# `make demo`: the whole pipeline end to end on the embedded default — fixture datasets in the
# real Hub layouts, served by the project's hub emulator — printing where every output went.
#   fixtures → hub-emulator → fetch (base model, stage1, mcq, eval-reference) → pack → mcq
#   → decontam → distill (tiny teacher, CPU) → lineage (three stages) → audit of the whole chain
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/debug/dlm-data}
OUT=${DEMO_OUT:-demo-out}
rm -rf "$OUT"; mkdir -p "$OUT/manifests"
OUT=$(cd "$OUT" && pwd)
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "fixtures (datasets in the real layouts, a trained tokenizer, a tiny random teacher)"
$BIN fixtures --out "$OUT/fixtures"

say "hub emulator"
$BIN hub-emulator --root "$OUT/fixtures/hub" > "$OUT/emulator.url" 2> "$OUT/emulator.log" &
EMU=$!
trap 'kill $EMU 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do [ -s "$OUT/emulator.url" ] && break; sleep 0.1; done
export HF_ENDPOINT=$(head -1 "$OUT/emulator.url")
export HF_HOME="$OUT/hf-home"
unset HF_TOKEN
echo "HF_ENDPOINT=$HF_ENDPOINT (pid $EMU)"

# The shipped manifests, copied so the demo's locks do not touch manifests/.
cp manifests/base.toml manifests/stage1.toml manifests/mcq.toml manifests/eval-reference.toml "$OUT/manifests/"
CACHE="$OUT/cache"

say "fetch: the base model at its pinned commit (lock, download.log, architecture.json, --local-dir)"
$BIN fetch --manifest "$OUT/manifests/base.toml" --cache "$CACHE" --local-dir "$OUT/models/base"
python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['models'][0]; print(m['repo'], m['commit'], len(m['tensors']), 'tensors,', m['parameters'], 'parameters')" "$OUT/manifests/architecture.json"

say "fetch: stage 1, MCQ and eval-reference sources (pinned commits, eval splits refused)"
for m in stage1 mcq eval-reference; do
  $BIN fetch --manifest "$OUT/manifests/$m.toml" --cache "$CACHE" --jobs 4
done
echo "lock: $OUT/manifests/stage1.lock   download log: $CACHE/download.log"

say "fetch again offline: verified from cache + lock, zero requests"
HF_HUB_OFFLINE=1 $BIN fetch --manifest "$OUT/manifests/stage1.toml" --cache "$CACHE"

say "fetch refuses an evaluation split before any download (exit 2 expected)"
cat > "$OUT/manifests/bad.toml" <<'TOML'
[[source]]
name = "mmlu-test-as-training"
repo = "cais/mmlu"
revision = "main"
config = "all"
split = "test"
format = "parquet"
TOML
set +e; $BIN fetch --manifest "$OUT/manifests/bad.toml" --cache "$CACHE"; rc=$?; set -e
echo "exit code: $rc"; [ "$rc" = 2 ]

say "pack: tokenize + pack stage 1 into parquet shards"
$BIN pack --manifest "$OUT/manifests/stage1.toml" --cache "$CACHE" \
  --tokenizer "$OUT/fixtures/tokenizer" --out "$OUT/shards/stage1" --seq-len 256 --json

say "text is text: a fineweb-edu document quotes the mask <unused_token_0> and </s>; packed as plain text, counted"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['totals']['added_token_text']))" "$OUT/shards/stage1/index.json"

say "pack --stream: the same shards read straight from the Hub by HTTP Range"
$BIN pack --manifest "$OUT/manifests/stage1.toml" --stream --log "$OUT/stream.log" \
  --tokenizer "$OUT/fixtures/tokenizer" --out "$OUT/shards/stage1-stream" --seq-len 256
cmp "$OUT/shards/stage1-stream/data/part-00000.parquet" "$OUT/shards/stage1/data/part-00000.parquet" && echo "stream == fetch + pack"

say "mcq: stage-2 SFT shards + stage-3 prompts.jsonl"
$BIN mcq --manifest "$OUT/manifests/mcq.toml" --cache "$CACHE" \
  --tokenizer "$OUT/fixtures/tokenizer" --out "$OUT/mcq"
head -c 600 "$OUT/mcq/prompts.jsonl"; echo
echo "a sciq option holds the mask's text; the SFT rows encode it as plain text:"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['totals']['added_token_text']))" "$OUT/mcq/sft/index.json"

say "decontam: benchmark n-gram overlap (prompts and stage-1 shards)"
$BIN decontam --against "$OUT/manifests/eval-reference.toml" --cache "$CACHE" --prompts "$OUT/mcq/prompts.jsonl"
$BIN decontam --against "$OUT/manifests/eval-reference.toml" --cache "$CACHE" --shards "$OUT/shards/stage1"
$BIN decontam --against "$OUT/manifests/eval-reference.toml" --cache "$CACHE" --shards "$OUT/mcq/sft"

say "distill: tiny teacher on the CPU over a few prompts"
$BIN distill --teacher "$OUT/fixtures/teacher" --prompts "$OUT/mcq/prompts.jsonl" \
  --out "$OUT/distilled.json" --limit 6 --gen-length 16 --block-length 8 --steps 16 --batch-size 3
python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(json.dumps({k: r[k] for k in ('id','answer','answer_probs','gold','correct','response')}, indent=1))" "$OUT/distilled.json"

say "lineage: each training stage records its parent, output and data (fixture checkpoints stand in for training)"
CK="$OUT/fixtures/checkpoints"
$BIN lineage add --lineage "$OUT/lineage.json" --stage stage1 --from "$OUT/models/base" \
  --data "$OUT/shards/stage1" --to "$CK/stage1"
$BIN lineage add --lineage "$OUT/lineage.json" --stage stage2 --from "$CK/stage1" \
  --data "$OUT/mcq/sft" --to "$OUT/fixtures/teacher"
$BIN lineage add --lineage "$OUT/lineage.json" --stage stage3 --from "$OUT/fixtures/teacher" \
  --data "$OUT/distilled.json" --to "$CK/stage3"
cp -r "$CK/stage3" "$OUT/shipped"

say "audit: the provenance chain, from the pinned base to the shipped model"
$BIN audit --manifest "$OUT/manifests/base.toml" --manifest "$OUT/manifests/stage1.toml" \
  --manifest "$OUT/manifests/mcq.toml" --cache "$CACHE" \
  --shards "$OUT/shards/stage1" --shards "$OUT/mcq/sft" \
  --prompts "$OUT/mcq/prompts.jsonl" --distilled "$OUT/distilled.json" \
  --teacher "$OUT/fixtures/teacher" --lineage "$OUT/lineage.json" --shipped "$OUT/shipped"

say "outputs"
cat <<TXT
  fixtures        $OUT/fixtures/{hub,tokenizer,teacher}
  cache + log     $CACHE  ($CACHE/download.log)
  locks           $OUT/manifests/{base,stage1,mcq,eval-reference}.lock
  base model      $OUT/models/base  (architecture: $OUT/manifests/architecture.json)
  lineage         $OUT/lineage.json  (shipped: $OUT/shipped)
  stage-1 shards  $OUT/shards/stage1/  (index.json)
  stage-2 SFT     $OUT/mcq/sft/
  stage-3 prompts $OUT/mcq/prompts.jsonl
  distilled       $OUT/distilled.json
TXT
