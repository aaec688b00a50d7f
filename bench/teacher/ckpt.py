"""Why: one writer for the trained teacher's HF checkpoint directory (config.json,
model.safetensors, tokenizer files), shared by the device trainer (torch) and the local
format check (numpy), so what `dlm-data distill` is tested on locally is what the GPU writes.

Tensors are passed as numpy arrays: float32 (stored as BF16, round-to-nearest-even) or
uint16 holding bf16 bits already. The safetensors writer is ~20 lines (no extra package)."""
import json
import os
import struct

import numpy as np

# Special tokens: ids 0.. in this order in the trained tokenizer (build_data.py).
SPECIALS = ["<|endoftext|>", "<|pad|>", "<|mask|>", "<|user|>", "<|assistant|>", "<|end|>"]
EOS_ID, PAD_ID, MASK_ID = 0, 1, 2
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def render(prompt):
    """The chat template above for one user message with add_generation_prompt (what
    distill's minijinja renders)."""
    return "<|user|>\n" + prompt + "<|end|>\n<|assistant|>\n"


def f32_to_bf16_bits(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    u = a.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name]
        if a.dtype == np.float32:
            a = f32_to_bf16_bits(a)
        assert a.dtype == np.uint16, (name, a.dtype)
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": "BF16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def config(vocab, hidden, inter, layers, heads, kv_heads, head_dim, max_pos=4096):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "max_position_embeddings": max_pos,
        "tie_word_embeddings": False,
        "is_causal": False,
        "use_cache": False,
        "mask_token_id": MASK_ID,
        "pad_token_id": PAD_ID,
        "eos_token_id": EOS_ID,
        "bos_token_id": None,
        "torch_dtype": "bfloat16",
    }


def tokenizer_config():
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|pad|>",
        "mask_token": "<|mask|>",
        "bos_token": None,
        "unk_token": None,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 4096,
    }


def save(out_dir, cfg, tensors, tokenizer_json_path, extra=None):
    """Write the checkpoint directory; tensors: HF Llama names -> numpy arrays."""
    os.makedirs(out_dir, exist_ok=True)
    write_safetensors(os.path.join(out_dir, "model.safetensors"), tensors)
    for name, obj in [("config.json", cfg), ("tokenizer_config.json", tokenizer_config()),
                      ("generation_config.json", {"eos_token_id": EOS_ID, "pad_token_id": PAD_ID})]:
        with open(os.path.join(out_dir, name), "w") as f:
            json.dump(obj, f, indent=1)
    with open(tokenizer_json_path, "rb") as f, open(os.path.join(out_dir, "tokenizer.json"), "wb") as g:
        g.write(f.read())
    if extra:
        with open(os.path.join(out_dir, "training.json"), "w") as f:
            json.dump(extra, f, indent=1)


def param_names(layers):
    """HF Llama tensor names and the role of each (for shapes)."""
    names = ["model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"]
    for i in range(layers):
        p = f"model.layers.{i}."
        names += [p + s for s in ("self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                  "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                  "mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight",
                                  "input_layernorm.weight", "post_attention_layernorm.weight")]
    return names
