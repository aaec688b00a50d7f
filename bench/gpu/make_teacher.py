"""Create a random bf16 model of the teacher's exact shape (MiniCPM5-2B: hidden 2048, 42 layers,
16 heads, 2 KV heads, head_dim 128, intermediate 6144, vocab 130,560, untied, rope_theta 5e6)
with PyTorch/transformers on the GPU and save it as an HF checkpoint (config.json with
is_causal false and mask_token_id 130082, model.safetensors). Speed and parity only: the
weights are random (transformers' default init, std 0.02).

usage: python3 make_teacher.py --out DIR [--layers N] [--head-scale S]
"""
import argparse, json, os, time
import torch
from transformers import LlamaConfig, LlamaForCausalLM

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--layers", type=int, default=42)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--head-scale", type=float, default=1.0,
               help="multiply the LM head: > 1 gives peaked output distributions (e.g. 16), so "
                    "approximate-mode agreement is measured where confidences separate")
a = p.parse_args()

t0 = time.time()
torch.manual_seed(a.seed)
cfg = LlamaConfig(
    hidden_size=2048, num_hidden_layers=a.layers, num_attention_heads=16, num_key_value_heads=2,
    head_dim=128, intermediate_size=6144, vocab_size=130560, max_position_embeddings=131072,
    rms_norm_eps=1e-6, rope_theta=5e6, tie_word_embeddings=False, bos_token_id=0, eos_token_id=1,
    pad_token_id=1,
)
cfg.is_causal = False
cfg.mask_token_id = 130082
with torch.device("cuda"):
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
if a.head_scale != 1.0:
    with torch.no_grad():
        model.lm_head.weight.mul_(a.head_scale)
model.save_pretrained(a.out, safe_serialization=True, max_shard_size="20GB")
# Spell the fields every reader needs at the top level, whatever this transformers version writes.
cp = os.path.join(a.out, "config.json")
c = json.load(open(cp))
c.update(rope_theta=5e6, is_causal=False, mask_token_id=130082, head_dim=128, torch_dtype="bfloat16")
json.dump(c, open(cp, "w"), indent=1)
n = sum(t.numel() for t in model.parameters())
print(json.dumps({"made_teacher": a.out, "params": n, "seconds": round(time.time() - t0, 1),
                  "files": sorted(os.listdir(a.out))}), flush=True)
