"""CUDA vs CPU soft labels (issue 55): two `distill --trajectory --top-k K` outputs of the same
prompts and settings. Records whose trajectories agree (same response, tail and commit steps:
the teacher saw the same states) are compared position by position: top-k ids equal (as lists;
and the top-1), and the largest |log-prob difference| over the ids both lists hold, against
docs/gpu.md's tolerance (5e-2). Records whose trajectories differ (near-tied confidences in
bf16) are counted, not compared.
usage: python3 compare_topk.py CPU.json CUDA.json [--out compare.json]"""
import argparse, json
import pyarrow.parquet as pq

TOL = 5e-2
ap = argparse.ArgumentParser()
ap.add_argument("cpu"); ap.add_argument("cuda"); ap.add_argument("--out")
a = ap.parse_args()

def load(path):
    recs = json.load(open(path))
    t = pq.read_table(path + ".topk.parquet").to_pydict()
    rows = {}
    for i, p, ids, lps in zip(t["id"], t["position"], t["ids"], t["logprobs"]):
        rows[(i, p)] = (ids, lps)
    return recs, rows

rc, tc = load(a.cpu)
rg, tg = load(a.cuda)
same_traj = diff_traj = pos = ids_eq = top1_eq = within = 0
worst = 0.0
for c, g in zip(rc, rg):
    assert c["id"] == g["id"], (c["id"], g["id"])
    key = lambda r: (r["response_ids"], r["tail_ids"], r["commit_step"], r["tail_commit_step"])
    if key(c) != key(g):
        diff_traj += 1
        continue
    same_traj += 1
    for p, s in enumerate(c["commit_step"] + c["tail_commit_step"]):
        if s < 0:
            continue
        (ci, cl), (gi, gl) = tc[(c["id"], p)], tg[(g["id"], p)]
        pos += 1
        ids_eq += ci == gi
        top1_eq += ci[0] == gi[0]
        gm = dict(zip(gi, gl))
        d = max((abs(l - gm[i]) for i, l in zip(ci, cl) if i in gm), default=0.0)
        worst = max(worst, d)
        within += d <= TOL
res = {
    "records": len(rc), "same_trajectory": same_traj, "different_trajectory": diff_traj,
    "positions": pos, "topk_ids_equal": ids_eq, "top1_equal": top1_eq,
    "logprob_within_tol": within, "tol": TOL, "max_abs_logprob_diff": worst,
}
print(json.dumps(res))
print(f"{same_traj}/{len(rc)} records with the same trajectory; over their {pos} positions: "
      f"top-k ids equal {ids_eq} ({ids_eq / max(pos, 1):.4f}), top-1 {top1_eq}, "
      f"log-probs within {TOL} {within}, max |diff| {worst:.3g}")
if a.out:
    json.dump(res, open(a.out, "w"))
