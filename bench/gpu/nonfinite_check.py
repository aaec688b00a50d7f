"""GPU non-finite check (issue 18): a teacher whose finite bf16 weights make the logits
overflow f32 (final norm and LM head at +-3e38) must stop `distill --device cuda` with exit 1,
naming the prompt and "non-finite logit", and write no output file.

Usage: python3 nonfinite_check.py DLM_DATA TEACHER_DIR WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

dlm, teacher, work = sys.argv[1:4]
big = os.path.join(work, "big")
shutil.rmtree(work, ignore_errors=True)
shutil.copytree(teacher, big)
path = os.path.join(big, "model.safetensors")
t = load_file(path)
t["model.norm.weight"] = torch.full_like(t["model.norm.weight"], 3.0e38)
h = t["lm_head.weight"]
sign = torch.where(torch.arange(h.numel()) % 2 == 0, 1.0, -1.0).reshape(h.shape)
t["lm_head.weight"] = (sign * 3.0e38).to(h.dtype)
save_file(t, path, metadata={"format": "pt"})
out = os.path.join(work, "o.json")
ok = True
for extra in ([], ["--cache", "dual", "--threshold", "0.9"]):
    r = subprocess.run(
        [dlm, "distill", "--teacher", big, "--prompts", os.path.join(teacher, "prompts.jsonl"),
         "--out", out, "--device", os.environ.get("DEV", "cuda"), "--gen-length", "32", "--block-length", "16",
         "--steps", "16", "--batch-size", "4"] + extra,
        capture_output=True, text=True)
    err = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
    good = r.returncode == 1 and "non-finite logit" in err and "prompt" in err \
        and not os.path.exists(out)
    ok &= good
    print(json.dumps({"extra": extra, "exit": r.returncode, "pass": good, "error": err}))
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
