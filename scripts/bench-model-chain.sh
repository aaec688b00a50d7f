#!/usr/bin/env bash
# `make bench-model-chain`: what the model chain costs on a real-sized checkpoint. Writes a
# MiniCPM5-2B-shaped model.safetensors (real header: 381 BF16 tensors, 5.03 GB; the data is a
# sparse hole, so no disk is used) and times `dlm-data lineage add` (which hashes --from and
# --to, every file) against `sha256sum` of the same file, in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/dlm-data}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
python3 - "$D/ck" <<'PY'
import json, os, struct, sys
V, H, I, L, NH, KV, HD = 130560, 2048, 6144, 42, 16, 2, 128
ts = [("model.embed_tokens.weight", [V, H])]
for l in range(L):
    p = f"model.layers.{l}"
    ts += [(f"{p}.input_layernorm.weight", [H]), (f"{p}.self_attn.q_proj.weight", [NH * HD, H]),
           (f"{p}.self_attn.k_proj.weight", [KV * HD, H]), (f"{p}.self_attn.v_proj.weight", [KV * HD, H]),
           (f"{p}.self_attn.o_proj.weight", [H, NH * HD]), (f"{p}.post_attention_layernorm.weight", [H]),
           (f"{p}.mlp.gate_proj.weight", [I, H]), (f"{p}.mlp.up_proj.weight", [I, H]),
           (f"{p}.mlp.down_proj.weight", [H, I])]
ts += [("model.norm.weight", [H]), ("lm_head.weight", [V, H])]
hdr, off = {}, 0
for n, s in ts:
    k = 1
    for d in s:
        k *= d
    hdr[n] = {"dtype": "BF16", "shape": s, "data_offsets": [off, off + 2 * k]}
    off += 2 * k
h = json.dumps(hdr).encode()
h += b" " * ((8 - len(h) % 8) % 8)
os.makedirs(sys.argv[1])
with open(os.path.join(sys.argv[1], "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(h)))
    f.write(h)
    f.truncate(8 + len(h) + off)
json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V},
          open(os.path.join(sys.argv[1], "config.json"), "w"))
PY
echo '[{"id": "x", "teacher": {"weights_sha256": "ab"}}]' > "$D/distilled.json"
BYTES=$(stat -c %s "$D/ck/model.safetensors")
t0=$(date +%s.%N); sha256sum "$D/ck/model.safetensors" > /dev/null; t1=$(date +%s.%N)
"$BIN" lineage add --lineage "$D/l.json" --stage s --from "$D/ck" --data "$D/distilled.json" --to "$D/ck" 2> /dev/null
t2=$(date +%s.%N)
python3 - "$BYTES" "$t0" "$t1" "$t2" <<'PY'
import sys
b, t0, t1, t2 = int(sys.argv[1]), *map(float, sys.argv[2:])
ref, ours = t1 - t0, (t2 - t1) / 2  # lineage add hashes the directory twice (--from, --to)
print(f"| checkpoint | sha256sum | lineage add (per directory) | ratio |")
print(f"|---|---|---|---|")
print(f"| MiniCPM5-2B shape, {b/1e9:.2f} GB | {ref:.1f} s ({b/ref/1e6:.0f} MB/s) | {ours:.1f} s ({b/ours/1e6:.0f} MB/s) | **{ref/ours:.2f}x** |")
PY
