"""Why: check on a machine without a GPU or torch that the checkpoint format train.py writes
(through ckpt.py, the same code) is one `dlm-data distill` loads: a random tiny model of the
teacher's layout (GQA, untied head, head_dim 32/64) with the trained tokenizer, then distill on
a few held-out text and MCQ prompts. Exit 0 when every record has a response and every MCQ
record an answer over its letters.

    python3 bench/teacher/tiny_check.py --data DIR --bin target/debug/dlm-data [--work /tmp/tiny-teacher]
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ckpt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--bin", required=True)
    ap.add_argument("--work", default="/tmp/tiny-teacher")
    ap.add_argument("--device", default="cpu")
    a = ap.parse_args()
    meta = json.load(open(os.path.join(a.data, "meta.json")))
    V, D, I, L, H, KV, HD = meta["vocab"], 64, 128, 2, 2, 1, 32
    rng = np.random.default_rng(0)
    t = {}
    for n in ckpt.param_names(L):
        if n.endswith("norm.weight") or "layernorm" in n:
            t[n] = np.ones(D, np.float32)
            continue
        shape = {"embed_tokens": (V, D), "lm_head": (V, D), "q_proj": (H * HD, D), "k_proj": (KV * HD, D),
                 "v_proj": (KV * HD, D), "o_proj": (D, H * HD), "gate_proj": (I, D), "up_proj": (I, D),
                 "down_proj": (D, I)}
        key = next(k for k in shape if k in n)
        t[n] = (rng.standard_normal(shape[key]) * 0.05).astype(np.float32)
    ck = os.path.join(a.work, "ckpt")
    ckpt.save(ck, ckpt.config(V, D, I, L, H, KV, HD), t, os.path.join(a.data, "tokenizer.json"))
    lines = open(os.path.join(a.data, "prompts.jsonl")).read().splitlines()
    mcq = [x for x in lines if '"options"' in x]
    text = [x for x in lines if '"options"' not in x]
    p = os.path.join(a.work, "prompts.jsonl")
    with open(p, "w") as f:
        f.write("\n".join(text[:3] + mcq[:3]) + "\n")
    out = os.path.join(a.work, "out.json")
    for x in (out, out + ".parts"):
        if os.path.isdir(x):
            import shutil
            shutil.rmtree(x)
        elif os.path.exists(x):
            os.remove(x)
    cmd = [a.bin, "distill", "--teacher", ck, "--prompts", p, "--out", out, "--device", a.device,
           "--gen-length", "32", "--block-length", "16", "--steps", "8"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"distill failed ({r.returncode}): {r.stderr[-3000:]}")
    recs = json.load(open(out))
    assert len(recs) == 6, len(recs)
    for rec in recs:
        assert len(rec["response_ids"]) <= 32
        if rec["gold"] is not None:
            assert rec["answer"] in "ABCD" and set(rec["answer_probs"]) == set("ABCD"), rec
            assert abs(sum(rec["answer_probs"].values()) - 1) < 1e-6
        else:
            assert rec["answer"] is None
    print(f"tiny teacher: distill --device {a.device} read the checkpoint; 6 records, "
          f"3 MCQ answers {[r['answer'] for r in recs if r['gold']]}")


if __name__ == "__main__":
    main()
