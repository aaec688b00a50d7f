#!/usr/bin/env python3
"""Reference: the decontamination a user would write in Python, after lm-eval-harness's
janitor (GPT-3 method): lowercase, strip punctuation, split on whitespace, a set of 13-gram
hashes from the benchmark, every corpus n-gram looked up. Same inputs and same document text
(prompt + options) as `dlm-data decontam --prompts`.

usage: py_decontam_ref.py BENCH.jsonl CORPUS.jsonl [N]   → one JSON line on stdout
"""
import json
import string
import sys
import time

N = int(sys.argv[3]) if len(sys.argv) > 3 else 13
TABLE = str.maketrans("", "", string.punctuation)


def norm_words(s):
    return s.lower().translate(TABLE).split()


def text_of(row):
    out = []
    for v in row.values():
        if isinstance(v, list):
            out.extend(str(x) for x in v)
        else:
            out.append(str(v))
    return "\n".join(out)


t0 = time.time()
index = set()
with open(sys.argv[1]) as f:
    for line in f:
        w = norm_words(text_of(json.loads(line)))
        for i in range(len(w) - N + 1):
            index.add(hash(tuple(w[i:i + N])))
t1 = time.time()
hits = 0
docs = 0
text_bytes = 0
with open(sys.argv[2]) as f:
    for line in f:
        r = json.loads(line)
        t = r["prompt"] + "\n" + "\n".join(r["options"])
        text_bytes += len(t.encode())
        w = norm_words(t)
        docs += 1
        for i in range(len(w) - N + 1):
            if hash(tuple(w[i:i + N])) in index:
                hits += 1
                break
t2 = time.time()
print(json.dumps({"index_seconds": t1 - t0, "scan_seconds": t2 - t1, "seconds": t2 - t0,
                  "documents": docs, "contaminated_documents": hits, "text_bytes": text_bytes,
                  "ngrams": len(index)}))
