"""What the batch-64 goal asks of the GPU: the GEMMs of one exact sampler step, alone, on cuBLAS.

One exact step at batch 64 (prompt 256 + gen 256 = 512 rows a sequence, teacher shape) runs
42 layers of [q;k;v], o_proj, [gate;up] and down_proj GEMMs over 32,768 rows, the last layer's
o/gate-up/down and the LM head over the block's 64 x 32 rows only (what the engine does).
This script times exactly that GEMM sequence with torch.matmul (cuBLAS, bf16, fp32 accumulate)
twice: a short burst (boost clock) and a sustained run of SECONDS seconds (the clock the card
holds under its power cap, which is what a two-day distill sees). It prints ms/step and
TFLOP/s for both and the share of the goal's step budget (64 tokens / 323 tok/s = 198.1 ms)
that the GEMMs alone use: everything else (attention, norms, RoPE, SwiGLU, sampler) must fit
in the rest.  Usage: python3 gemm_ceiling.py [--seconds 25] [--out ceiling.json]
"""
import argparse
import json
import time

import torch

H, I, V, L = 2048, 6144, 130560, 42
KV = 2 * 256  # 2 KV heads x head_dim 128, for K and V
BATCH, SEQ, BLOCK = 64, 512, 32
GOAL_TOKS = 323.0


def shapes():
    """(name, M, K, N) for every GEMM of one exact step."""
    rows, tail = BATCH * SEQ, BATCH * BLOCK
    out = []
    for layer in range(L):
        m = rows if layer < L - 1 else tail
        out += [("qkv", rows, H, H + KV), ("o", m, H, H), ("gate_up", m, H, 2 * I), ("down", m, I, H)]
    out.append(("lm_head", tail, H, V))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--out", default="ceiling.json")
    a = ap.parse_args()
    dev = torch.device("cuda")
    seq = shapes()
    flops = sum(2.0 * m * k * n for _, m, k, n in seq)
    # One weight per distinct (K, N) and one input/output per (M, K)/(M, N): the same memory
    # footprint class as the engine (weights re-read every layer from HBM: 42 x 4 distinct
    # tensors would only add L2 misses the engine has too, so give each layer its own weights).
    ws = [torch.randn(n, k, device=dev, dtype=torch.bfloat16) * 0.02 for _, _, k, n in seq]
    xs, ys = {}, {}
    for _, m, k, n in seq:
        xs.setdefault((m, k), torch.randn(m, k, device=dev, dtype=torch.bfloat16))
        ys.setdefault((m, n), torch.empty(m, n, device=dev, dtype=torch.bfloat16))

    def step():
        for (_, m, k, n), w in zip(seq, ws):
            torch.matmul(xs[(m, k)], w.t(), out=ys[(m, n)])

    per_op = {}
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    # Burst: 5 steps right after warm-up, per-op events on the last.
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    for _ in range(5):
        step()
    ev[1].record()
    torch.cuda.synchronize()
    burst_ms = ev[0].elapsed_time(ev[1]) / 5
    evs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in seq]
    for ((name, m, k, n), w), (e0, e1) in zip(zip(seq, ws), evs):
        e0.record()
        torch.matmul(xs[(m, k)], w.t(), out=ys[(m, n)])
        e1.record()
    torch.cuda.synchronize()
    for (name, m, k, n), (e0, e1) in zip(seq, evs):
        d = per_op.setdefault(name, [0.0, 0.0])
        d[0] += e0.elapsed_time(e1)
        d[1] += 2.0 * m * k * n
    # Sustained: step after step for --seconds, each timed; keep the last third.
    times = []
    t_end = time.time() + a.seconds
    while time.time() < t_end:
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    tail = sorted(times[len(times) * 2 // 3:])
    sus_ms = tail[len(tail) // 2]
    budget = 1000.0 * BATCH / GOAL_TOKS
    res = {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "step_gemm_tflop": flops / 1e12, "burst_ms": burst_ms, "burst_tflops": flops / burst_ms / 1e9,
        "sustained_ms": sus_ms, "sustained_tflops": flops / sus_ms / 1e9, "sustained_steps": len(times),
        "goal_step_ms": budget, "left_for_the_rest_ms": budget - sus_ms,
        "per_op_burst": {k: {"ms": v[0], "tflops": v[1] / v[0] / 1e9} for k, v in per_op.items()},
    }
    print(f"GEMMs of one exact batch-64 step: {flops/1e12:.1f} TFLOP")
    print(f"  burst     {burst_ms:7.1f} ms/step  {res['burst_tflops']:5.0f} TFLOP/s")
    print(f"  sustained {sus_ms:7.1f} ms/step  {res['sustained_tflops']:5.0f} TFLOP/s  ({len(times)} steps, median of the last third)")
    for k, v in res["per_op_burst"].items():
        print(f"    {k:8s} {v['ms']:7.1f} ms  {v['tflops']:5.0f} TFLOP/s")
    print(f"  goal 323 tok/s = {budget:.1f} ms/step -> {budget - sus_ms:.1f} ms left (sustained) for attention, norms, RoPE, SwiGLU, head sampler")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
