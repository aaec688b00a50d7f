"""Why: issue #26 on the trained teacher — early exit at EOS + continuous batching against the
fixed batches of `--no-early-exit`, the same binary, the same prompts, in the same run:

    python3 early_exit.py --bin ./dlm-data --teacher CKPT --prompts prompts.jsonl --out DIR

For each prompt set (the MCQ items, the text continuations) and each mode (exact; dual+r4),
runs `distill --no-early-exit` then the default (early exit), both at gen 256 / block 32 /
256 steps, batch 64, and reports: seconds (distill's own timer, teacher load excluded),
speed-up, identical response_ids / response / stop / answer (counts), the largest
|answer_probs| and |answer_logprobs| difference, rows finished early, mean blocks decoded,
row forward passes against a full decode and under the coarser block rule. Also writes
DIR/stop_lengths.json (MCQ response lengths of the exact run, for `dlm-gpu bench-rows` on the
2B shape) and DIR/lengths.md (response length distribution, block of the first EOS).
"""
import argparse
import json
import os
import subprocess
import sys

G256 = ["--gen-length", "256", "--block-length", "32", "--steps", "256", "--batch-size", "64"]
MODES = [("exact", []), ("dual+r4", ["--cache", "dual", "--cache-refresh", "4"])]


def distill(bin_, teacher, prompts, out, args):
    for p in (out, out + ".parts"):
        subprocess.run(["rm", "-rf", p])
    cmd = [bin_, "distill", "--teacher", teacher, "--prompts", prompts, "--out", out,
           "--device", "cuda", "--json"] + G256 + args
    p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, RUST_LOG="info"))
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stderr[-3000:]}")
    summary = json.loads(p.stdout.strip().splitlines()[-1])
    with open(out) as f:
        return summary, json.load(f), p.stderr


def compare(a, b):
    n = len(a)
    assert [r["id"] for r in a] == [r["id"] for r in b]
    out = {"records": n}
    for k in ("response_ids", "response", "stop", "answer"):
        out[f"same_{k}"] = sum(x[k] == y[k] for x, y in zip(a, b))
    for k in ("answer_probs", "answer_logprobs"):
        d = 0.0
        for x, y in zip(a, b):
            if x[k] is not None:
                d = max(d, max(abs(x[k][L] - y[k][L]) for L in x[k]))
        out[f"max_abs_diff_{k}"] = d
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--teacher", required=True)
    ap.add_argument("--prompts", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    lines = open(a.prompts).read().splitlines()
    sets = {"mcq": [l for l in lines if '"options"' in l], "text": [l for l in lines if '"options"' not in l]}
    for name, ls in sets.items():
        with open(os.path.join(a.out, f"{name}.jsonl"), "w") as f:
            f.write("\n".join(ls) + "\n")
    # Warm-up: kernels compiled and cached before anything is timed.
    distill(a.bin, a.teacher, os.path.join(a.out, "mcq.jsonl"), "/tmp/ee-warm.json", ["--limit", "64", "--early-exit"])
    results = []
    for mode, margs in MODES:
        for name in sets:
            src = os.path.join(a.out, f"{name}.jsonl")
            s0, r0, _ = distill(a.bin, a.teacher, src, f"/tmp/ee-{mode}-{name}-fixed.json", margs + ["--no-early-exit"])
            s1, r1, log = distill(a.bin, a.teacher, src, f"/tmp/ee-{mode}-{name}-early.json", margs + ["--early-exit"])
            row = {"mode": mode, "set": name, "prompts": len(r0), "fixed_s": s0["seconds"], "early_s": s1["seconds"],
                   "speedup": s0["seconds"] / s1["seconds"]}
            row.update(compare(r0, r1))
            for k in ("rows_finished_early", "mean_blocks_decoded", "row_forward_passes", "row_forward_passes_full",
                      "row_forward_passes_block_rule", "batch_forward_passes", "forward_passes_saved"):
                row[k] = s1[k]
            row["fixed_batch_forward_passes"] = s0["batch_forward_passes"]
            print(json.dumps(row), flush=True)
            results.append(row)
            if mode == "exact" and name == "mcq":
                lens = [len(r["response_ids"]) for r in r0]
                blocks = [len(r["response_ids"]) // 32 + 1 for r in r0 if r["stop"] == "eos"]
                with open(os.path.join(a.out, "stop_lengths.json"), "w") as f:
                    json.dump(lens, f)
                with open(os.path.join(a.out, "lengths.md"), "w") as f:
                    f.write(f"MCQ exact g256: {len(lens)} responses, mean length {sum(lens) / len(lens):.1f}, "
                            f"longest {max(lens)}, stopped at EOS {len(blocks)}; first EOS in block "
                            + ", ".join(f"{b}: {blocks.count(b)}" for b in sorted(set(blocks))) + "\n")
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    cols = ["mode", "set", "prompts", "fixed_s", "early_s", "speedup", "same_response_ids", "same_answer",
            "max_abs_diff_answer_probs", "rows_finished_early", "mean_blocks_decoded", "row_forward_passes",
            "row_forward_passes_block_rule", "row_forward_passes_full", "batch_forward_passes",
            "fixed_batch_forward_passes"]
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in results:
            f.write("| " + " | ".join(f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |\n")
    print(open(os.path.join(a.out, "table.md")).read())


if __name__ == "__main__":
    main()
