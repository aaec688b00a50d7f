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

gigatoken (issue 43): beside the Python pipeline, gigatoken's `encode_files(ParquetFileSource)`
(bench/tokenizers/giga.py, pinned in mk/pack.mk) is timed on the same corpus, cold, whole process
(interpreter + import + tokenizer load + encode; tokenize only: no packing, nothing written),
interleaved with `pack` at all cores and at RAYON_NUM_THREADS=1 (`--threads` sets the counts,
e.g. 1,2 or 1,16). `pack/gig` = gigatoken's seconds ÷ pack's (pack's speed over gigatoken's: ≥ 1
means the whole `pack` pipeline is at least as fast as gigatoken tokenizing alone); `cpu p/g` =
the same over CPU seconds (user + sys of the whole process, fastest run each; with --vs-giga the
seconds themselves are printed too, `p cpu` and `g cpu`): on a loaded box the
wall clock of a 1-thread run depends on its share of the cores, and pack's reader and writer
threads are extra threads, so the CPU ratio is the per-core cost compared. `gig ids` =
gigatoken's ids of the first --check documents equal HF `tokenizers`' `encode_batch(...,
add_special_tokens=False)`. `--vs-giga` (for corpora of hundreds of MB) skips the Python pipeline
and the split-mode runs: `ids` is then pack's stream over the first --check documents against HF
`tokenizers` (`n/a` when it differs and documents held added-token text: pack's default plain mode
reads that text as text).

Paths: DLM_SHARED_TOKENIZERS (default ../shared/tokenizers) and DLM_PY_PACK_REF (default
../shared/bench/py_pack_ref.py), for checkouts where ../shared is elsewhere (a git worktree).

HF tokenizers 1.0 (issue 58): `tokenizers==1.0.0rc3` in its own venv (`.venv-tok1`, mk/pack.mk;
`--hf1 PYTHON` for another, `--no-hf1` to leave it out), timed the same way by hf1.py (cold whole
process, `encode_batch(..., add_special_tokens=False)`): `pack/hf1` and `cpu p/h` as for
gigatoken, `pack/best` and `cpu p/b` against the faster of the two peers in that cell (wall and
CPU seconds each), `hf1 ids` = its ids of the first --check documents equal 0.22's; a summary
line per thread count gives the geo-mean and the worst family against the best peer.

usage: bench.py BIN WORKDIR [--mb N] [--only a,b] [--repeat R] [--corpus prose|code]
                [--threads 1,2] [--vs-giga] [--no-giga] [--hf1 PYTHON] [--no-hf1] [--check N]
"""
import glob, json, math, os, resource, subprocess, sys, time

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
THREADS = [int(t) for t in sys.argv[sys.argv.index("--threads") + 1].split(",")] if "--threads" in sys.argv else [None, 1]
VS_GIGA = "--vs-giga" in sys.argv
GIGA = "--no-giga" not in sys.argv
CHECK = int(sys.argv[sys.argv.index("--check") + 1]) if "--check" in sys.argv else 1000
GIGA_PY = os.path.join(HERE, "giga.py")
HF1_PY = os.path.join(HERE, "hf1.py")
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
# HF tokenizers 1.0 (issue 58): its own venv (.venv-tok1: the tests' .venv keeps 0.22), --hf1 PYTHON
# or the default; --no-hf1 leaves the column out.
HF1 = (sys.argv[sys.argv.index("--hf1") + 1] if "--hf1" in sys.argv else os.path.join(ROOT, ".venv-tok1", "bin", "python"))
HF1 = HF1 if "--no-hf1" not in sys.argv and os.path.exists(HF1) else None
SHARED = os.environ.get("DLM_SHARED_TOKENIZERS", os.path.join(ROOT, "..", "shared", "tokenizers"))
REF = os.environ.get("DLM_PY_PACK_REF", os.path.join(ROOT, "..", "shared", "bench", "py_pack_ref.py"))
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


CPU = [0.0]  # CPU seconds (user + sys) of the last timed child process


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd, env=None):
    c0 = child_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    CPU[0] = child_cpu() - c0
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


def peer(py, script, label, c, tokp, threads=None, dump=0):
    """A peer tokenizer's cold whole-process seconds (less its own dump time) and its JSON, or
    None when it refuses the tokenizer (the error is printed once)."""
    env = dict(os.environ)
    if threads:
        env["RAYON_NUM_THREADS"] = str(threads)
    c0 = child_cpu()
    t0 = time.perf_counter()
    p = subprocess.run([py, script, tokp, c] + (["--dump", str(dump)] if dump else []),
                       capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    CPU[0] = child_cpu() - c0
    if p.returncode != 0:
        print(f"  {label} failed on {tokp}: {p.stderr.strip().splitlines()[-1:]}", flush=True)
        return None, None
    res = json.loads(p.stdout.strip().splitlines()[-1])
    return dt - res["dump_s"], res


def giga(c, tokp, threads=None, dump=0):
    return peer(sys.executable, GIGA_PY, "gigatoken", c, tokp, threads, dump)


def hf1(c, tokp, threads=None, dump=0):
    return peer(HF1, HF1_PY, "tokenizers 1.0", c, tokp, threads, dump)


def hf_ids(tokp, texts):
    """HF `tokenizers`' ids of texts (the identity reference)."""
    from tokenizers import Tokenizer
    t = Tokenizer.from_file(tokp)
    return t, [e.ids for e in t.encode_batch(texts, add_special_tokens=False)]


def table(which, c, fams, wrap):
    texts = pq.read_table(c, columns=["text"]).column(0).to_pylist()
    text_mb = sum(len(t.encode()) for t in texts) / 1e6
    what = "English prose" if which == "prose" else "code and docs (stdlib sources + docs)"
    print(f"\ncorpus {which}: {c} ({text_mb:.1f} MB of {what}), {os.cpu_count()} cores, seq_len {SEQ}")
    tl = [f"{t}t" if t else "all" for t in THREADS]
    head = f"{'family':28} {'kind':10} {'ids':>5} "
    if not VS_GIGA:
        head += f"{'python s':>9} {'ratio':>7} {'split s':>7} {'plain/split':>11} "
    for t in tl:
        head += f"{'pack ' + t:>9} " + (f"{'gig ' + t:>9} {'pack/gig':>8} {'cpu p/g':>7} " if GIGA else "")
        if GIGA and VS_GIGA:
            head += f"{'p cpu ' + t:>9} {'g cpu ' + t:>9} "
    if HF1:
        for t in tl:
            head += f"{'hf1 ' + t:>9} {'pack/hf1':>8} {'cpu p/h':>7} {'pack/best':>9} {'cpu p/b':>7} "
        head += f"{'hf1 ids':>7} "
    head += f"{'gig ids':>7} {'Mtok/s':>7} {'held':>5}  path" if GIGA else f"{'Mtok/s':>7} {'held':>5}  path"
    print(head)
    rows = []
    for name, p in fams.items():
        eos = EOS.get(name, "<|endoftext|>")
        refout = os.path.join(WORK, f"ref-{which}-{name}.parquet")
        out = os.path.join(WORK, f"out-{which}-{name}")
        dt_py = dt_sp = float("inf")
        dt_rs = {t: float("inf") for t in THREADS}
        dt_gg = {t: float("inf") for t in THREADS}
        cpu_rs = {t: float("inf") for t in THREADS}
        cpu_gg = {t: float("inf") for t in THREADS}
        gig_ok = GIGA
        dt_h1 = {t: float("inf") for t in THREADS}
        cpu_h1 = {t: float("inf") for t in THREADS}
        h1_ok = bool(HF1)
        for _ in range(REPEAT):
            if not VS_GIGA:
                dt_py = min(dt_py, timed([sys.executable, wrap, eos, REF, c, p, refout, str(SEQ)])[0])
            for t in THREADS:
                d, idx = ours(c, p, eos, out + (f"-{t}t" if t else ""), threads=t)
                dt_rs[t] = min(dt_rs[t], d)
                cpu_rs[t] = min(cpu_rs[t], CPU[0])
                if gig_ok:
                    d, _ = giga(c, p, t)
                    if d is None:
                        gig_ok = False
                    else:
                        dt_gg[t] = min(dt_gg[t], d)
                        cpu_gg[t] = min(cpu_gg[t], CPU[0])
                if h1_ok:
                    d, _ = hf1(c, p, t)
                    if d is None:
                        h1_ok = False
                    else:
                        dt_h1[t] = min(dt_h1[t], d)
                        cpu_h1[t] = min(cpu_h1[t], CPU[0])
            if not VS_GIGA:
                d, sidx = ours(c, p, eos, out + "-split", mode="split")
                dt_sp = min(dt_sp, d)
        t0 = THREADS[0]
        o0 = out + (f"-{t0}t" if t0 else "")
        idx = json.load(open(os.path.join(o0, "index.json")))
        mine = ids([os.path.join(o0, s["file"]) for s in idx["shards"]])
        held = idx["totals"].get("added_token_text", {}).get("documents", 0)
        hf, want = hf_ids(p, texts[:CHECK]) if (GIGA or VS_GIGA) else (None, None)
        if VS_GIGA:
            e = hf.token_to_id(eos)
            exp = np.fromiter((x for w in want for x in w + [e]), dtype=np.int64)
            same = len(mine) >= len(exp) and bool((mine[:len(exp)] == exp).all())
            if not same and held:
                same = "n/a"
        else:
            split_ids = ids([os.path.join(out + "-split", s["file"]) for s in sidx["shards"]])
            ref = ids([refout])
            same = split_ids.shape == ref.shape and bool((split_ids == ref).all())
            if held == 0:
                same = same and mine.shape == split_ids.shape and bool((mine == split_ids).all())
        gsame = "-"
        if gig_ok:
            _, res = giga(c, p, THREADS[-1], dump=CHECK)
            gsame = res is not None and res["ids"] == want
        hsame = "-"
        if h1_ok:
            if want is None:
                hf, want = hf_ids(p, texts[:CHECK])
            _, res = hf1(c, p, THREADS[-1], dump=CHECK)
            hsame = res is not None and res["ids"] == want
        tokens = len(mine)
        enc = idx.get("tokenizer_encoder", "?")
        kind = KIND.get(name, "SP BPE" if "SentencePiece" in enc or name.startswith(("mistral", "phi-3")) else "BPE")
        tall = dt_rs[THREADS[0]]
        r = dt_py / tall
        gr = {t: dt_gg[t] / dt_rs[t] for t in THREADS} if gig_ok else {}
        rows.append((name, kind, same, r, enc, tall / dt_sp, gr, gsame, {}, hsame))
        line = f"{name:28} {kind:10} {str(same):>5} "
        if not VS_GIGA:
            line += f"{dt_py:9.2f} {r:6.2f}x {dt_sp:7.2f} {tall / dt_sp:10.3f}x "
        for t in THREADS:
            line += f"{dt_rs[t]:9.2f} " + ((f"{dt_gg[t]:9.2f} {gr[t]:7.2f}x {cpu_gg[t] / cpu_rs[t]:6.2f}x " if gig_ok
                                            else f"{'-':>9} {'-':>8} {'-':>7} ") if GIGA else "")
            if GIGA and VS_GIGA:
                line += f"{cpu_rs[t]:9.2f} " + (f"{cpu_gg[t]:9.2f} " if gig_ok else f"{'-':>9} ")
        if HF1:
            for t in THREADS:
                if h1_ok:
                    # The best peer: the faster of gigatoken and tokenizers 1.0 in this cell.
                    bw = min(dt_h1[t], dt_gg[t] if gig_ok else float("inf"))
                    bc = min(cpu_h1[t], cpu_gg[t] if gig_ok else float("inf"))
                    line += (f"{dt_h1[t]:9.2f} {dt_h1[t] / dt_rs[t]:7.2f}x {cpu_h1[t] / cpu_rs[t]:6.2f}x "
                             f"{bw / dt_rs[t]:8.2f}x {bc / cpu_rs[t]:6.2f}x ")
                    rows[-1][8][t] = (bw / dt_rs[t], bc / cpu_rs[t])
                else:
                    line += f"{'-':>9} {'-':>8} {'-':>7} {'-':>9} {'-':>7} "
            line += f"{str(hsame):>7} "
        line += (f"{str(gsame):>7} " if GIGA else "") + f"{tokens / tall / 1e6:7.2f} {held:5}  {enc}"
        print(line, flush=True)
    bpe = [r for r in rows if r[1] != "WordPiece" and r[1] != "Unigram"]
    fast_bpe = [r for r in bpe if r[4].startswith("exact fast")]
    for label, sel in [("all families", rows), ("BPE families (fast path)", fast_bpe)]:
        if sel and not VS_GIGA:
            g = math.exp(sum(math.log(r[3]) for r in sel) / len(sel))
            w = min(sel, key=lambda r: r[3])
            print(f"{which} corpus, {label}: geo-mean {g:.2f}x, worst {w[3]:.2f}x ({w[0]})")
            ws = max(sel, key=lambda r: r[5])
            gs = math.exp(sum(math.log(r[5]) for r in sel) / len(sel))
            print(f"{which} corpus, {label}: plain/split time geo-mean {gs:.3f}, worst {ws[5]:.3f} ({ws[0]})")
        for t, tn in zip(THREADS, tl):
            gsel = [r for r in sel if t in r[6]]
            if gsel:
                g = math.exp(sum(math.log(r[6][t]) for r in gsel) / len(gsel))
                w = min(gsel, key=lambda r: r[6][t])
                print(f"{which} corpus, {label}, {tn}: pack/gigatoken geo-mean {g:.2f}x, worst {w[6][t]:.2f}x ({w[0]})")
        for t, tn in zip(THREADS, tl):
            bsel = [r for r in sel if t in r[8]]
            if bsel:
                gw = math.exp(sum(math.log(r[8][t][0]) for r in bsel) / len(bsel))
                gc = math.exp(sum(math.log(r[8][t][1]) for r in bsel) / len(bsel))
                w = min(bsel, key=lambda r: min(r[8][t]))
                print(f"{which} corpus, {label}, {tn}: pack/best peer (gigatoken, tokenizers 1.0) geo-mean "
                      f"wall {gw:.2f}x, CPU {gc:.2f}x; worst {min(w[8][t]):.2f}x ({w[0]})")
    for r in rows:
        if r[9] is False:
            print(f"note: tokenizers 1.0's ids differ from tokenizers 0.22 on {r[0]} ({which})")
        if r[7] is False:
            print(f"note: gigatoken's ids differ from HF tokenizers on {r[0]} ({which})")
    return [f"{r[0]} ({which})" for r in rows if r[2] is False]


main()
