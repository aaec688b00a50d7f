#!/usr/bin/env python3
"""Golden logits for the tiny fixture teacher from PyTorch/transformers.

Loads TEACHER_DIR (written by `dlm-data fixtures --out X`, X/teacher) with
transformers' LlamaForCausalLM in float32, runs it bidirectionally and writes
the logits of fixed input ids to OUT_JSON (committed as tests/golden/tiny_teacher_logits.json,
checked by tests/teacher_golden.rs).

Bidirectional attention: transformers >= 5.2 honours `is_causal: false` in the
config; older versions get an explicit 4-D additive mask of zeros (every query
sees every key). Either way the script checks bidirectionality numerically
(position 0 must change when the last token changes) before writing anything.

Usage: python3 scripts/golden_logits.py TEACHER_DIR OUT_JSON
Needs torch and transformers (the device machine has both; or a scratch venv).
"""
import hashlib
import json
import os
import sys

import torch
import transformers
from transformers import LlamaForCausalLM


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def version_tuple(v):
    out = []
    for p in v.split(".")[:2]:
        out.append(int("".join(c for c in p if c.isdigit()) or 0))
    return tuple(out)


def main():
    teacher, out = sys.argv[1], sys.argv[2]
    cfg = json.load(open(os.path.join(teacher, "config.json")))
    assert cfg.get("is_causal") is False, "the fixture teacher must say is_causal: false"
    model = LlamaForCausalLM.from_pretrained(
        teacher, torch_dtype=torch.float32, attn_implementation="eager"
    ).eval()
    native = version_tuple(transformers.__version__) >= (5, 2)
    mask_id = cfg["mask_token_id"]
    inputs = [
        [17, 250, mask_id, 3, mask_id, 101],
        [5, 6, 7, 8, mask_id, mask_id, 400, 2],
    ]

    def logits(ids):
        x = torch.tensor([ids])
        kw = {}
        if not native:
            kw["attention_mask"] = torch.zeros(1, 1, len(ids), len(ids))
        with torch.no_grad():
            return model(input_ids=x, **kw).logits[0].double()

    a = logits(inputs[1])
    b = logits(inputs[1][:-1] + [9])
    assert (a[0] - b[0]).abs().max().item() > 1e-4, "attention is still causal"
    res = {
        "what": "logits of the tiny fixture teacher (dlm-data fixtures) for fixed ids, "
        "bidirectional, float32, from transformers LlamaForCausalLM",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "bidirectional_via": "config is_causal" if native else "4-D zero mask",
        "config_sha256": sha256(os.path.join(teacher, "config.json")),
        "weights_sha256": sha256(os.path.join(teacher, "model.safetensors")),
        "vocab_size": cfg["vocab_size"],
        "inputs": inputs,
        "logits": [[[round(v, 6) for v in row.tolist()] for row in logits(ids)] for ids in inputs],
    }
    with open(out, "w") as f:
        json.dump(res, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out}: transformers {transformers.__version__}, {res['bidirectional_via']}")


if __name__ == "__main__":
    main()
