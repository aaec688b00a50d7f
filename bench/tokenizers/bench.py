"""`make bench-tokenizers`: `dlm-data pack` vs the Python pipeline (../shared/bench/py_pack_ref.py:
pyarrow + `tokenizers` encode_batch on all cores + numpy + parquet) on the same corpus, for every
tokenizer family, in one run. Per family: ids identical, the ratio, Mtok/s on all cores and on
one thread (RAYON_NUM_THREADS=1), and the path `pack` took (index.json `tokenizer_encoder`).
`pack` runs in its default `--special-tokens-in-text plain` mode; the same binary is also timed
with `--special-tokens-in-text split` (the `tokenizers` behaviour, what the Python reference
does) in the same interleaved rounds: `plain/split` is the time ratio (issue 28: no family may be
slower by more than 5 % in plain mode). `ids` compares split mode's stream with the reference's,
and plain's with split's when no document held added-token text (else it is `n/a`).

Families: every real tokenizer.json in ../shared/tokenizers/ (read in place), plus Llama-3-,
Qwen2-, o200k-, DeepSeek-V3- and MiniCPM5-shaped byte-level BPEs trained here on the corpus with
the real files' pre-tokenizer/normalizer settings (tests/py/tokenizer_shapes.py), 32k vocab.
Corpora (bench/pack/corpus.py, from this machine's files), --mb MB each (default 8): prose
(natural English) and code (the stdlib's .py sources whole, interleaved with docs: long
whitespace runs, indentation, long identifiers, markup). Both are reported, each with its own
table and summary; --corpus prose|code runs one.

usage: bench.py BIN WORKDIR [--mb N] [--only a,b] [--repeat R] [--corpus prose|code]
"""
import glob, json, math, os, subprocess, sys, time

import numpy as np
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "pack"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "py"))
from corpus import code_and_docs, corpus, natural_docs  # noqa: E402

BIN, WORK = sys.argv[1], sys.argv[2]
MB = int(sys.argv[sys.argv.index("--mb") + 1]) if "--mb" in sys.argv else 8
ONLY = sys.argv[sys.argv.index("--only") + 1].split(",") if "--only" in sys.argv else None
# Best of REPEAT interleaved runs per side: on a shared machine the load moves between runs.
REPEAT = int(sys.argv[sys.argv.index("--repeat") + 1]) if "--repeat" in sys.argv else 2
CORPORA = [sys.argv[sys.argv.index("--corpus") + 1]] if "--corpus" in sys.argv else ["prose", "code"]
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SHARED = os.environ.get("DLM_SHARED_TOKENIZERS", os.path.join(ROOT, "..", "shared", "tokenizers"))
REF = os.path.join(ROOT, "..", "shared", "bench", "py_pack_ref.py")
SEQ = 2048
os.makedirs(WORK, exist_ok=True)

# EOS per family (py_pack_ref.py hard-codes "<|endoftext|>"; the wrapper below maps it).
EOS = {"mistral-7b-v0.1": "</s>", "minicpm5-shaped": "</s>", "phi-3-mini": "<|endoftext|>", "t5-small": "</s>", "falcon-7b": "<|endoftext|>",
       "bert-base-uncased": "[SEP]", "bert-base-chinese": "[SEP]", "roberta-base": "</s>", "clip": "<|endoftext|>"}
KIND = {"bert-base-uncased": "WordPiece", "bert-base-chinese": "WordPiece", "t5-small": "Unigram"}

# Runs the reference program unchanged, with token_to_id("<|endoftext|>") answered by the family's EOS.
WRAP = """import runpy, sys, tokenizers
eos, ref = sys.argv.pop(1), sys.argv.pop(1)   # argv: wrap.py EOS REF CORPUS TOKENIZER OUT SEQ
_Real = tokenizers.Tokenizer
class Tokenizer:
    def __init__(self, t):
        self._t, self._eos = t, t.token_to_id(eos)
    @staticmethod
    def from_file(p):
        return Tokenizer(_Real.from_file(p))
    def token_to_id(self, x):
        return self._eos if x == "<|endoftext|>" else self._t.token_to_id(x)
    def __getattr__(self, k):
        return getattr(self._t, k)
tokenizers.Tokenizer = Tokenizer
runpy.run_path(ref, run_name="__main__")
"""


def trained(docs):
    """The byte-level shapes, trained on the corpus (32k vocab), with their real special tokens."""
    import tokenizer_shapes as ts
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    split = lambda p: pre_tokenizers.Split(Regex(p), behavior="isolated", invert=False)
    shapes = {
        "llama3-shaped": (pre_tokenizers.Sequence([split(ts.LLAMA3), bl]), None, True),
        "qwen2-shaped": (pre_tokenizers.Sequence([split(ts.QWEN2), bl]), normalizers.NFC(), False),
        "o200k-shaped": (pre_tokenizers.Sequence([split(ts.O200K), bl]), None, False),
        "deepseek3-shaped": (pre_tokenizers.Sequence([split(p) for p in ts.DEEPSEEK3] + [bl]), None, False),
        "minicpm5-shaped": (None, None, False),  # built by tokenizer_shapes.minicpm5_shaped
    }
    out = {}
    for name, (pre, norm, ignore) in shapes.items():
        if ONLY and name not in ONLY:
            continue
        d = os.path.join(WORK, "tok", name)
        p = os.path.join(d, "tokenizer.json")
        if not os.path.exists(p) and name == "minicpm5-shaped":
            # The real file's structure (chained Splits, 510 added tokens; tests/py/tokenizer_shapes.py).
            os.makedirs(d, exist_ok=True)
            ts.minicpm5_shaped(docs, 32000).save(p)
        if not os.path.exists(p):
            t = Tokenizer(models.BPE(ignore_merges=ignore))
            t.normalizer, t.pre_tokenizer, t.decoder = norm, pre, decoders.ByteLevel()
            specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
            tr = trainers.BpeTrainer(vocab_size=32000, special_tokens=specials, show_progress=False,
                                     initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
            t.train_from_iterator(docs, trainer=tr)
            os.makedirs(d, exist_ok=True)
            t.save(p)
        out[name] = p
    return out


def timed(cmd, env=None):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return dt, p.stdout


def ids(files):
    return np.concatenate([np.concatenate(pq.read_table(f, columns=["input_ids"]).column(0).to_numpy(zero_copy_only=False)) for f in files])


def ours(c, tokp, eos, out, threads=None, mode=None):
    subprocess.run(["rm", "-rf", out])
    env = dict(os.environ)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    extra = ["--special-tokens-in-text", mode] if mode else []
    # --no-bos: the reference encodes with add_special_tokens=False (no BOS), whatever
    # tokenizer_config.json's add_bos_token says (pack follows it by default, e.g. Mistral).
    dt, _ = timed([BIN, "pack", "--input", c, "--text-column", "text", "--tokenizer", tokp, "--eos-token", eos,
                   "--no-bos", "--out", out, "--seq-len", str(SEQ), "--json"] + extra, env)
    idx = json.load(open(os.path.join(out, "index.json")))
    return dt, idx


def main():
    docs = natural_docs()
    fams = {}
    if os.path.isdir(SHARED):
        for f in sorted(os.listdir(SHARED)):
            p = os.path.join(SHARED, f, "tokenizer.json")
            if os.path.isfile(p) and (not ONLY or f in ONLY):
                fams[f] = p
    else:
        print(f"note: {SHARED} not found: trained shapes only")
    fams.update(trained(docs))
    wrap = os.path.join(WORK, "ref_wrap.py")
    open(wrap, "w").write(WRAP)
    print("command: " + " ".join(sys.argv))
    bad = []
    for which in CORPORA:
        if which == "prose":
            c = corpus(WORK, MB, f"corpus-{MB}mb.parquet")
        else:
            c = corpus(WORK, MB, f"code-corpus-{MB}mb.parquet", base=code_and_docs())
        bad += table(which, c, fams, wrap)
    if bad:
        sys.exit("ids differ: " + ", ".join(bad))


def table(which, c, fams, wrap):
    texts = pq.read_table(c, columns=["text"]).column(0).to_pylist()
    text_mb = sum(len(t.encode()) for t in texts) / 1e6
    what = "English prose" if which == "prose" else "code and docs (stdlib sources + docs)"
    print(f"\ncorpus {which}: {c} ({text_mb:.1f} MB of {what}), {os.cpu_count()} cores, seq_len {SEQ}")
    print(f"{'family':28} {'kind':10} {'ids':>5} {'python s':>9} {'ours s':>7} {'ratio':>7} {'Mtok/s':>7} {'1-thr':>6} "
          f"{'split s':>7} {'plain/split':>11} {'held':>5}  path")
    rows = []
    for name, p in fams.items():
        eos = EOS.get(name, "<|endoftext|>")
        refout = os.path.join(WORK, f"ref-{which}-{name}.parquet")
        out = os.path.join(WORK, f"out-{which}-{name}")
        dt_py = dt_rs = dt_sp = float("inf")
        for _ in range(REPEAT):
            dt_py = min(dt_py, timed([sys.executable, wrap, eos, REF, c, p, refout, str(SEQ)])[0])
            d, idx = ours(c, p, eos, out)
            dt_rs = min(dt_rs, d)
            d, sidx = ours(c, p, eos, out + "-split", mode="split")
            dt_sp = min(dt_sp, d)
        mine = ids([os.path.join(out, s["file"]) for s in idx["shards"]])
        split_ids = ids([os.path.join(out + "-split", s["file"]) for s in sidx["shards"]])
        ref = ids([refout])
        held = idx["totals"].get("added_token_text", {}).get("documents", 0)
        same = split_ids.shape == ref.shape and bool((split_ids == ref).all())
        if held == 0:
            same = same and mine.shape == split_ids.shape and bool((mine == split_ids).all())
        dt_1 = min(ours(c, p, eos, out + "-1t", threads=1)[0] for _ in range(REPEAT))
        tokens = len(mine)
        enc = idx.get("tokenizer_encoder", "?")
        kind = KIND.get(name, "SP BPE" if "SentencePiece" in enc or name.startswith(("mistral", "phi-3")) else "BPE")
        r = dt_py / dt_rs
        rows.append((name, kind, same, r, enc, dt_rs / dt_sp))
        print(f"{name:28} {kind:10} {str(same):>5} {dt_py:9.2f} {dt_rs:7.2f} {r:6.2f}x {tokens / dt_rs / 1e6:7.2f} {tokens / dt_1 / 1e6:6.2f} "
              f"{dt_sp:7.2f} {dt_rs / dt_sp:10.3f}x {held:5}  {enc}", flush=True)
    bpe = [r for r in rows if r[1] != "WordPiece" and r[1] != "Unigram"]
    fast_bpe = [r for r in bpe if r[4].startswith("exact fast")]
    for label, sel in [("all families", rows), ("BPE families (fast path)", fast_bpe)]:
        if sel:
            g = math.exp(sum(math.log(r[3]) for r in sel) / len(sel))
            w = min(sel, key=lambda r: r[3])
            print(f"{which} corpus, {label}: geo-mean {g:.2f}x, worst {w[3]:.2f}x ({w[0]})")
            ws = max(sel, key=lambda r: r[5])
            gs = math.exp(sum(math.log(r[5]) for r in sel) / len(sel))
            print(f"{which} corpus, {label}: plain/split time geo-mean {gs:.3f}, worst {ws[5]:.3f} ({ws[0]})")
    return [f"{r[0]} ({which})" for r in rows if not r[2]]


main()
