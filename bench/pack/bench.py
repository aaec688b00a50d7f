"""`make bench-pack`: dlm-data pack vs ../shared/bench/py_pack_ref.py, same corpus, same
tokenizer, one run. Prints both Mtok/s, the ratio, peak RSS of both, whether the ids are
identical, and dlm-data's peak RSS on a 10x larger corpus.

Corpus: natural English generated locally, no downloads: every docstring of the Python
standard library installed here (parsed with `ast`, nothing imported), the license texts in
/usr/share/common-licenses, and the Debian copyright/changelog files under /usr/share/doc.
Tokenizer: a 32k byte-level BPE (GPT-2 style, `<|endoftext|>` + `<|pad|>`) trained on it
with Python `tokenizers`.

usage: bench.py BIN WORKDIR [--mb N]   (N = corpus size in MB, default 40)
"""
import glob, json, os, subprocess, sys, time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corpus import corpus as _corpus, natural_docs  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
MB = int(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 40
REF = os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "bench", "py_pack_ref.py")
if not os.path.exists(REF):
    REF = "/work/shared/bench/py_pack_ref.py"
SEQ = 2048
os.makedirs(WORK, exist_ok=True)


def tokenizer():
    d = os.path.join(WORK, "tok32k")
    p = os.path.join(d, "tokenizer.json")
    if os.path.exists(p):
        return d
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=32000, special_tokens=["<|endoftext|>", "<|pad|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    t.train_from_iterator(natural_docs(), trainer=tr)
    os.makedirs(d, exist_ok=True)
    t.save(p)
    json.dump({"eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}, open(os.path.join(d, "tokenizer_config.json"), "w"))
    return d


def timed(cmd):
    """Wall seconds, peak RSS (MiB, by /usr/bin/time: the forked Python parent's pages would
    inflate wait4's ru_maxrss), stdout."""
    rss_file = os.path.join(WORK, "rss.txt")
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", rss_file] + cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return dt, int(open(rss_file).read().split()[-1]) / 1024, p.stdout


def ours(path, tok, out):
    subprocess.run(["rm", "-rf", out])
    return timed([BIN, "pack", "--input", path, "--text-column", "text", "--tokenizer", tok,
                  "--out", out, "--seq-len", str(SEQ), "--json"])


def ids(files):
    return np.concatenate([np.concatenate(pq.read_table(f, columns=["input_ids"]).column(0).to_numpy(zero_copy_only=False)) for f in files])


tok = tokenizer()
corpus = lambda *a, **k: _corpus(WORK, *a, **k)
c1 = corpus(MB, f"corpus-{MB}mb.parquet")
text_mb = sum(len(t.encode()) for t in pq.read_table(c1, columns=["text"]).column(0).to_pylist()) / 1e6
print("command: " + " ".join(sys.argv))
print(f"corpus: {c1} ({text_mb:.1f} MB of text), tokenizer: {tok} (32k byte-level BPE)")

dt_py, rss_py, out_py = timed([sys.executable, REF, c1, os.path.join(tok, "tokenizer.json"), os.path.join(WORK, "ref.parquet"), str(SEQ)])
dt_rs, rss_rs, out_rs = ours(c1, tok, os.path.join(WORK, "out"))
summary = json.loads(out_rs.strip().splitlines()[-1])
mine = ids([os.path.join(WORK, "out", s["file"]) for s in json.load(open(os.path.join(WORK, "out", "index.json")))["shards"]])
ref = ids([os.path.join(WORK, "ref.parquet")])
same = mine.shape == ref.shape and bool((mine == ref).all())
tokens = len(mine)
print(f"py_pack_ref.py : {dt_py:7.2f} s  {tokens / dt_py / 1e6:6.2f} Mtok/s  peak RSS {rss_py:7.0f} MiB   ({out_py.strip()})")
print(f"dlm-data pack  : {dt_rs:7.2f} s  {tokens / dt_rs / 1e6:6.2f} Mtok/s  peak RSS {rss_rs:7.0f} MiB")
print(f"ratio          : {dt_py / dt_rs:.2f}x   ids identical: {same} ({tokens} tokens in {tokens // SEQ} rows)")

# 10x: the same documents as the 1x corpus, ten times (same mix, 10x the size).
c10 = corpus(MB * 10, f"corpus-{MB}mb-x10.parquet", base=pq.read_table(c1, columns=["text"]).column(0).to_pylist())
dt10, rss10, out10 = ours(c10, tok, os.path.join(WORK, "out10"))
s10 = json.loads(out10.strip().splitlines()[-1])
print(f"10x corpus     : {dt10:7.2f} s  {s10['tokens'] / dt10 / 1e6:6.2f} Mtok/s  peak RSS {rss10:7.0f} MiB (1x: {rss_rs:.0f} MiB)")
if not same:
    sys.exit("ids differ")
