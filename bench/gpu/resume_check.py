"""`dlm-data distill --device cuda` killed with SIGKILL mid-run and resumed must give the bytes
of an uninterrupted run (bench/gpu/run.sh step `resume`). Also `--logits-shift 1` on cpu vs
cuda (agreement, same answers). Usage: resume_check.py DLM_DATA TEACHER_DIR WORKDIR"""
import json, os, signal, subprocess, sys, time

exe, teacher, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
base = [json.loads(l) for l in open(os.path.join(teacher, "prompts.jsonl"))]
prompts = os.path.join(work, "prompts.jsonl")
with open(prompts, "w") as f:
    for i in range(int(os.environ.get("N", "160"))):
        r = dict(base[i % len(base)], id=f"resume-{i:06d}", row=i)
        f.write(json.dumps(r) + "\n")
DEV = os.environ.get("DEV", "cuda")  # DEV=cpu checks the script itself without a GPU
G = ["--gen-length", "64", "--block-length", "16", "--steps", "32", "--batch-size", "2", "--device", DEV]
G += os.environ.get("EXTRA", "").split()  # e.g. EXTRA=--gemm-tune
def cmd(out, extra=()):
    return [exe, "distill", "--teacher", teacher, "--prompts", prompts, "--out", out, *G, *extra]

full = os.path.join(work, "full.json")
subprocess.run(cmd(full), check=True, capture_output=True)
out = os.path.join(work, "killed.json")
part = out + ".parts/00000-of-00001.jsonl"
if "--gemm-tune" in G:
    # The same GEMM kernels as the uninterrupted run: its saved choices (a run tuning
    # afresh may pick others, which round differently). The killed run and its resume
    # must both load them.
    os.makedirs(out + ".parts", exist_ok=True)
    plans = open(full + ".parts/00000-of-00001.gemm-plans.json", "rb").read()
    open(out + ".parts/00000-of-00001.gemm-plans.json", "wb").write(plans)
p = subprocess.Popen(cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
lines = 0
while p.poll() is None:
    try:
        lines = sum(1 for _ in open(part))
    except FileNotFoundError:
        lines = 0
    if lines >= 20:
        p.send_signal(signal.SIGKILL)
        break
    time.sleep(0.002)
p.wait()
killed = p.returncode == -signal.SIGKILL
left = os.path.exists(out)
subprocess.run(cmd(out), check=True, capture_output=True)
same = open(full, "rb").read() == open(out, "rb").read()
if "--gemm-tune" in G:
    kept = open(out + ".parts/00000-of-00001.gemm-plans.json", "rb").read() == plans
    print(f"--gemm-tune: {len(json.loads(plans)['plans'])} tuned GEMM shapes; plans file reused unchanged: {kept}")
    same = same and kept
print(f"resume on {DEV}: killed={killed} after {lines} part lines (final output present after kill: {left}); "
      f"resumed output byte-identical to an uninterrupted run: {same}")

def load(path):
    return {r["id"]: r for r in json.load(open(path))}
res = {}
for dev in ["cpu", DEV]:
    o = os.path.join(work, f"shift1_{dev}.json")
    c = [a if a != DEV else dev for a in cmd(o, ["--logits-shift", "1", "--limit", "8"])]
    if dev == "cpu":
        c = [a for a in c if a != "--gemm-tune"]  # refused on the CPU (exit 2)
    subprocess.run(c, check=True, capture_output=True)
    res[dev] = load(o)
same = tot = ans = 0
for k, x in res["cpu"].items():
    y = res[DEV][k]
    a, b = x["response_ids"], y["response_ids"]
    tot += max(len(a), len(b)); same += sum(1 for i in range(min(len(a), len(b))) if a[i] == b[i])
    ans += x["answer"] == y["answer"]
print(f"--logits-shift 1, cpu vs {DEV}: {len(res['cpu'])} records, response tokens equal {same}/{tot}, same answer {ans}/{len(res['cpu'])}")
sys.exit(0 if (killed and not left and same) else 1)
