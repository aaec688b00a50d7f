"""Compare `dlm-data distill` outputs of the e2e step (bench/gpu/run.sh): CPU vs CUDA at T=0
and T=1 (token agreement of response_ids, identical records, answers), and the approximate
dual+threshold run (recorded as approximate in every record's gen)."""
import json, os, sys

d = sys.argv[1]
def load(n):
    p = os.path.join(d, n)
    if not os.path.exists(p):
        print(f"{n}: MISSING"); return None
    j = json.load(open(p))
    recs = j["records"] if isinstance(j, dict) else j
    return {r["id"]: r for r in recs}
for a, b in [("cpu.json", "cuda.json"), ("cpu_t1.json", "cuda_t1.json"), ("cuda.json", "dual.json")]:
    x, y = load(a), load(b)
    if x is None or y is None: continue
    same = tot = rows = ans = 0
    for k in x:
        p, q = x[k]["response_ids"], y[k]["response_ids"]
        n = max(len(p), len(q)); tot += n
        same += sum(1 for i in range(min(len(p), len(q))) if p[i] == q[i])
        rows += p == q
        ans += x[k]["answer"] == y[k]["answer"]
    print(f"{a} vs {b}: {len(x)} records, response tokens equal {same}/{tot}, identical responses {rows}/{len(x)}, same answer {ans}/{len(x)}")
y = load("dual.json")
if y:
    g = next(iter(y.values()))["gen"]
    print("dual run gen:", json.dumps(g))
