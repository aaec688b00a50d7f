#!/usr/bin/env bash
# `make demo`: the whole pipeline end to end on the embedded default — fixture datasets in the
# real Hub layouts, served by the project's hub emulator — printing where every output went.
#   fixtures → hub-emulator → `dlm-data run pipeline.toml` (fetch of base model, stage1, mcq,
#   eval-reference → pack → mcq → decontam → distill with the tiny teacher on the CPU → audit),
#   run again (all complete) → lineage (three stages) → audit of the whole chain
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

# The whole job as one pipeline file (docs/commands/run.md): paths relative to the file.
cat > "$OUT/pipeline.toml" <<'TOML'
version = 1
tokenizer = "fixtures/tokenizer"
cache = "cache"

[base]
manifest = "manifests/base.toml"
local_dir = "models/base"

[fetch]
jobs = 4

[pack]
manifest = "manifests/stage1.toml"
out = "shards/stage1"
seq_len = 256

[mcq]
manifest = "manifests/mcq.toml"
out = "mcq"

[decontam]
against = ["manifests/eval-reference.toml"]

[distill]
teacher = "fixtures/teacher"
out = "distilled.json"
limit = 6
gen_length = 16
block_length = 8
steps = 16
batch_size = 3
TOML

say "run: fetch (base at its pinned commit, stage 1, MCQ, eval-reference) → pack → mcq → decontam (stage-1 shards, SFT shards, prompts) → distill (tiny teacher, CPU) → audit"
$BIN run "$OUT/pipeline.toml"
python3 -c "import json,sys; m=json.load(open(sys.argv[1]))['models'][0]; print('base:', m['repo'], m['commit'], len(m['tensors']), 'tensors,', m['parameters'], 'parameters')" "$OUT/manifests/architecture.json"
echo "lock: $OUT/manifests/stage1.lock   download log: $CACHE/download.log"

say "run again (what tomorrow night's cron does): every step complete, skipped; the audit re-checks"
$BIN run "$OUT/pipeline.toml" --json | python3 -c "import json,sys; v=json.load(sys.stdin); print('run --json:', ', '.join(s['step']+' '+s['status'] for s in v['steps']), '| verdict:', v['verdict'])"

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

say "text is text: a fineweb-edu document quotes the mask <unused_token_0> and </s>; packed as plain text, counted"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['totals']['added_token_text']))" "$OUT/shards/stage1/index.json"

say "pack --stream: the same shards read straight from the Hub by HTTP Range"
$BIN pack --manifest "$OUT/manifests/stage1.toml" --stream --log "$OUT/stream.log" \
  --tokenizer "$OUT/fixtures/tokenizer" --out "$OUT/shards/stage1-stream" --seq-len 256
cmp "$OUT/shards/stage1-stream/data/part-00000.parquet" "$OUT/shards/stage1/data/part-00000.parquet" && echo "stream == fetch + pack"

say "mcq wrote stage-2 SFT shards + stage-3 prompts.jsonl"
head -c 600 "$OUT/mcq/prompts.jsonl"; echo
echo "a sciq option holds the mask's text; the SFT rows encode it as plain text:"
python3 -c "import json,sys; print(json.dumps(json.load(open(sys.argv[1]))['totals']['added_token_text']))" "$OUT/mcq/sft/index.json"

say "distill wrote the tiny teacher's records"
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
  pipeline        $OUT/pipeline.toml  (run journal: $OUT/pipeline.run.json)
  locks           $OUT/manifests/{base,stage1,mcq,eval-reference}.lock
  base model      $OUT/models/base  (architecture: $OUT/manifests/architecture.json)
  lineage         $OUT/lineage.json  (shipped: $OUT/shipped)
  stage-1 shards  $OUT/shards/stage1/  (index.json)
  stage-2 SFT     $OUT/mcq/sft/
  stage-3 prompts $OUT/mcq/prompts.jsonl
  distilled       $OUT/distilled.json
TXT
