"""Why: measure what each approximate `dlm-data distill` mode costs on the trained teacher:
every setting runs the real CLI on the same held-out prompts (text continuations + MCQ) and is
compared with the exact sampler of the same gen/steps config.

    python3 eval.py --bin ./dlm-data --teacher CKPT --prompts prompts.jsonl --out DIR [--budget S]
    python3 eval.py --table DIR            # re-print the table from DIR/results.json

Per setting: tok/s (generated positions / seconds, from distill's own timer, kernels already
compiled by a warm-up run), speed-up over exact, token agreement with exact (per position of
the gen_length span, a response cut at its EOS counts as EOS to the end; and whole-response
exact match), MCQ letter agreement with exact, MCQ accuracy against gold, mean total-variation
distance of answer_probs to exact's. Writes DIR/results.json and DIR/table.md.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

# g128 first: the cheaper config completes even when a time budget cuts the run short.
CONFIGS = [("g128", ["--gen-length", "128", "--block-length", "32", "--steps", "64"], 128),
           ("g256", ["--gen-length", "256", "--block-length", "32", "--steps", "256"], 256)]
MODES = [("exact", []),
         ("thr0.9", ["--threshold", "0.9"]), ("thr0.7", ["--threshold", "0.7"]), ("thr0.5", ["--threshold", "0.5"]),
         ("prefix", ["--cache", "prefix"]), ("dual", ["--cache", "dual"]),
         ("dual+thr0.9", ["--cache", "dual", "--threshold", "0.9"]),
         ("dual+thr0.7", ["--cache", "dual", "--threshold", "0.7"]),
         # Faithfulness (issue 16 item 4): the cache refreshed by a full pass every K steps.
         ("dual+r2", ["--cache", "dual", "--cache-refresh", "2"]),
         ("dual+r4", ["--cache", "dual", "--cache-refresh", "4"]),
         ("dual+r8", ["--cache", "dual", "--cache-refresh", "8"]),
         ("prefix+r4", ["--cache", "prefix", "--cache-refresh", "4"]),
         ("dual+thr0.9+r4", ["--cache", "dual", "--threshold", "0.9", "--cache-refresh", "4"])]


def load(path):
    with open(path) as f:
        return {r["id"]: r for r in json.load(f)}


def padded(ids, n):
    return list(ids[:n]) + [None] * (n - len(ids))


def compare(ref, got, g):
    out = {}
    for kind in ("text", "mcq"):
        ids = [k for k, r in ref.items() if (r["gold"] is not None) == (kind == "mcq")]
        if not ids:
            continue
        pos = same = 0
        for k in ids:
            a, b = padded(ref[k]["response_ids"], g), padded(got[k]["response_ids"], g)
            pos += sum(x == y for x, y in zip(a, b))
            same += ref[k]["response_ids"] == got[k]["response_ids"]
        out[f"{kind}_pos_agree"] = pos / (g * len(ids))
        out[f"{kind}_exact_match"] = same / len(ids)
        if kind == "mcq":
            out["letter_agree"] = sum(ref[k]["answer"] == got[k]["answer"] for k in ids) / len(ids)
            out["mcq_acc"] = sum(bool(got[k]["correct"]) for k in ids) / len(ids)
            for kind2 in ("arith", "unit", "fact"):
                ks = [k for k in ids if k.startswith(f"mcq-{kind2}-")]
                if ks:
                    out[f"acc_{kind2}"] = sum(bool(got[k]["correct"]) for k in ks) / len(ks)
            out["tv"] = sum(0.5 * sum(abs(ref[k]["answer_probs"][L] - got[k]["answer_probs"].get(L, 0.0))
                                      for L in ref[k]["answer_probs"]) for k in ids) / len(ids)
    return out


def run(bin_, teacher, prompts, out, name, args, extra_env=None):
    env = dict(os.environ, RUST_LOG="info")
    env.update(extra_env or {})
    dst = os.path.join(out, name + ".json")
    cmd = [bin_, "distill", "--teacher", teacher, "--prompts", prompts, "--out", dst, "--device", "cuda",
           "--batch-size", "64"] + args
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.time() - t0
    with open(os.path.join(out, name + ".log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + p.stderr[-20000:])
    if p.returncode != 0:
        print(f"{name}: exit {p.returncode}\n{p.stderr[-2000:]}", flush=True)
        return None
    m = re.search(r"generated in ([\d.]+)s \(([\d.]+) prompts/s, ([\d.]+) tok/s\)", p.stderr + p.stdout)
    return {"wall_s": round(wall, 2), "secs": float(m.group(1)) if m else None,
            "tok_s": float(m.group(3)) if m else None}


def table(res):
    lines = ["| config | setting | tok/s | speed-up | text pos agree | text exact match | MCQ pos agree | "
             "MCQ exact match | letter agree | MCQ acc (arith/unit/fact) | mean TV |", "|" + "---|" * 11]
    f = lambda v, p=3: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
    for r in res:
        lines.append(f"| {r['config']} | {r['setting']} | {f(r.get('tok_s'), 0)} | {f(r.get('speedup'), 2)}× | "
                     f"{f(r.get('text_pos_agree'))} | {f(r.get('text_exact_match'))} | {f(r.get('mcq_pos_agree'))} | "
                     f"{f(r.get('mcq_exact_match'))} | {f(r.get('letter_agree'))} | {f(r.get('mcq_acc'))} "
                     f"({f(r.get('acc_arith'), 2)}/{f(r.get('acc_unit'), 2)}/{f(r.get('acc_fact'), 2)}) | "
                     f"{f(r.get('tv'), 4)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin")
    ap.add_argument("--teacher")
    ap.add_argument("--prompts")
    ap.add_argument("--out")
    ap.add_argument("--budget", type=float, default=1e9, help="stop starting settings after S seconds")
    ap.add_argument("--configs", default=None, help="comma list of g256,g128 (default: both)")
    ap.add_argument("--modes", default=None, help="comma list of setting names (default: all)")
    ap.add_argument("--extra", default="", help="NAME=ARGS;... more settings, e.g. 'dual+r4=--cache dual --cache-refresh 4'")
    ap.add_argument("--table")
    a = ap.parse_args()
    if a.table:
        res = json.load(open(os.path.join(a.table, "results.json")))
        sys.stdout.write(table(res))
        return
    os.makedirs(a.out, exist_ok=True)
    modes = [m for m in MODES if a.modes is None or m[0] in a.modes.split(",")]
    for item in filter(None, a.extra.split(";")):
        n, _, s = item.partition("=")
        modes.append((n.strip(), s.split()))
    t0 = time.time()
    # Warm-up: compiles the kernels into the cache, loads the checkpoint once.
    run(a.bin, a.teacher, a.prompts, a.out, "warmup", ["--gen-length", "32", "--block-length", "32",
                                                       "--steps", "32", "--limit", "64"])
    res = []
    for cname, cargs, g in CONFIGS:
        if a.configs and cname not in a.configs.split(","):
            continue
        ref = None
        exact_tps = None
        for mname, margs in modes:
            if time.time() - t0 > a.budget:
                print(f"budget spent: skipping {cname} {mname}", flush=True)
                continue
            name = f"{cname}_{mname}"
            r = run(a.bin, a.teacher, a.prompts, a.out, name, cargs + margs)
            row = {"config": cname, "setting": mname, "args": " ".join(cargs + margs)}
            if r is None:
                row["error"] = True
                res.append(row)
                continue
            row.update(r)
            got = load(os.path.join(a.out, name + ".json"))
            if mname == "exact":
                ref, exact_tps = got, r["tok_s"]
            if ref is not None:
                row.update(compare(ref, got, g))
            if exact_tps and r["tok_s"]:
                row["speedup"] = r["tok_s"] / exact_tps
            res.append(row)
            print(json.dumps(row), flush=True)
            if mname != "exact":  # keep the results small; exact kept
                os.remove(os.path.join(a.out, name + ".json"))
                shutil.rmtree(os.path.join(a.out, name + ".json.parts"), ignore_errors=True)
            with open(os.path.join(a.out, "results.json"), "w") as f:
                json.dump(res, f, indent=1)
    with open(os.path.join(a.out, "table.md"), "w") as f:
        f.write(table(res))
    sys.stdout.write(table(res))


if __name__ == "__main__":
    main()
