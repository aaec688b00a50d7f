"""Print the speed table from run.sh's JSON results: generated tokens/s, model TFLOP/s, peak
memory and dlm-gpu's ratio to each PyTorch variant (same shape, same GPU, same run). A batch
listed twice (torch.compile: first run recompiles, second is the steady state) keeps its last
entry."""
import json, os, sys

d = sys.argv[1]
def load(n):
    p = os.path.join(d, n)
    return {r["batch"]: r for r in json.load(open(p))["runs"]} if os.path.exists(p) else {}
eager, comp = load("bench_torch_eager.json"), load("bench_torch_compile.json")
for label, fname in [("dlm-gpu", "bench_dlm.json"), ("dlm-gpu --gemm-tune", "bench_dlm_tune.json")]:
    ours = load(fname)
    if not ours:
        continue
    print(f"\n| batch | {label} tok/s | TFLOP/s | peak GiB | torch eager tok/s | torch.compile tok/s | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|")
    for b in sorted(ours):
        o = ours[b]
        e, c = eager.get(b), comp.get(b)
        f = lambda r: f"{r['gen_tok_per_s']:.1f}" if r else "–"
        ratio = lambda r: f"{o['gen_tok_per_s'] / r['gen_tok_per_s']:.2f}×" if r else "–"
        print(f"| {b} | {o['gen_tok_per_s']:.1f} | {o['tflops']:.0f} | {o['peak_mem_gib']:.1f} | {f(e)} | {f(c)} | {ratio(e)} | {ratio(c)} |")
