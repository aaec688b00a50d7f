#!/usr/bin/env python3
"""Generate the decontam benchmark inputs: a benchmark of N_ITEMS MCQ items (JSONL, like an
MMLU/ARC test set) and a prompts.jsonl corpus of about MB megabytes, with PLANT benchmark
items pasted into corpus documents (so the scan has known hits to find).

usage: gen.py OUT_DIR [--items 100000] [--mb 200] [--plant 50] [--seed 1]
"""
import argparse
import json
import os

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("out")
p.add_argument("--items", type=int, default=100_000)
p.add_argument("--mb", type=float, default=200)
p.add_argument("--plant", type=int, default=50)
p.add_argument("--seed", type=int, default=1)
a = p.parse_args()
os.makedirs(a.out, exist_ok=True)
rng = np.random.default_rng(a.seed)

# A 20k-word vocabulary of pronounceable pseudo-words, Zipf-distributed like English.
syll = ["ka", "to", "ri", "mi", "sun", "lo", "ve", "na", "qu", "el", "tra", "po", "de", "fi", "gor", "ax"]
vocab = np.array(["".join(rng.choice(syll, size=rng.integers(1, 4))) + str(i % 7 if i % 5 == 0 else "") for i in range(20_000)])
ranks = np.arange(1, len(vocab) + 1)
probs = (1.0 / ranks) / (1.0 / ranks).sum()


# Word indices drawn once in bulk (drawing per sentence with p= would be O(vocab) a call).
POOL = rng.choice(len(vocab), size=8_000_000, p=probs)
pos = 0


def words(n):
    global pos, POOL
    if pos + n > len(POOL):
        # A fresh draw: reusing the pool would repeat word sequences (false "overlaps").
        POOL = rng.choice(len(vocab), size=len(POOL), p=probs)
        pos = 0
    w = vocab[POOL[pos:pos + n]]
    pos += n
    return w


def sentence(n):
    w = words(n)
    return (" ".join(w)).capitalize() + "."


items = []
with open(os.path.join(a.out, "bench.jsonl"), "w") as f:
    for i in range(a.items):
        q = sentence(int(rng.integers(18, 40)))
        ch = [sentence(int(rng.integers(2, 6))) for _ in range(4)]
        items.append(q)
        f.write(json.dumps({"question": q, "choices": ch, "answer": int(i % 4)}) + "\n")

target = int(a.mb * 1e6)
planted = set(int(x) for x in rng.choice(10**9, size=a.plant, replace=False))
written = 0
n = 0
plant_rows = []
with open(os.path.join(a.out, "corpus.jsonl"), "w") as f:
    while written < target:
        body = " ".join(sentence(int(rng.integers(8, 30))) for _ in range(int(rng.integers(3, 12))))
        if len(plant_rows) < a.plant and n % 997 == 5:
            k = int(rng.integers(0, a.items))
            body = body + " " + items[k]
            plant_rows.append(n)
        rec = {
            "id": f"corpus-{n:08d}", "source": "bench", "repo": "bench/corpus", "commit": "0" * 40,
            "file": "corpus.parquet", "row": n,
            "prompt": body, "options": ["alpha", "beta", "gamma", "delta"], "gold": "A",
        }
        line = json.dumps(rec) + "\n"
        f.write(line)
        written += len(line)
        n += 1
with open(os.path.join(a.out, "planted.json"), "w") as f:
    json.dump({"rows": plant_rows, "documents": n, "bytes": written}, f)
print(f"gen: {a.items} benchmark items, {n} corpus documents, {written/1e6:.1f} MB, {len(plant_rows)} planted")
