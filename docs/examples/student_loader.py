"""Turn `distill --trajectory --top-k K` output into a student's training examples: for each
record and each step s of its trajectory, the masked input the teacher saw (prompt_ids + the
positions committed before s, the mask elsewhere) and, at the positions step s committed, the
teacher's top-k soft labels. Usage: python student_loader.py distilled.json MASK_ID"""
import json, sys
import pyarrow.parquet as pq
import torch

def examples(out, mask_id):
    recs = json.load(open(out))
    side = pq.ParquetFile(out + ".topk.parquet")
    for k, r in enumerate(recs):  # row group k holds record k's positions
        g = side.read_row_group(k).to_pydict()
        topk = {p: (i, l) for p, i, l in zip(g["position"], g["ids"], g["logprobs"])}
        span = r["response_ids"] + r["tail_ids"]
        steps = r["commit_step"] + r["tail_commit_step"]
        n = len(r["prompt_ids"])
        for s in sorted({t for t in steps if t >= 0}):
            x = torch.tensor(r["prompt_ids"] + [t if 0 <= c < s else mask_id
                                                 for t, c in zip(span, steps)])
            at = [i for i, c in enumerate(steps) if c == s]
            ids = torch.tensor([topk[i][0] for i in at])        # [n_at, K]
            probs = torch.tensor([topk[i][1] for i in at]).exp()  # teacher's p(id)
            yield r["id"], x, torch.tensor(at) + n, ids, probs / probs.sum(-1, keepdim=True)

if __name__ == "__main__":
    n = 0
    for rid, x, pos, ids, q in examples(sys.argv[1], int(sys.argv[2])):
        assert (x[pos] == int(sys.argv[2])).all() and torch.allclose(q.sum(-1), torch.ones(len(pos)))
        n += 1
    print(f"{n} training steps")
