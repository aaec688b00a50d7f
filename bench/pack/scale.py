"""`make bench-pack-scale`: how `dlm-data pack` scales with threads, against the Python pipeline
(../shared/bench/py_pack_ref.py) in the same run, per tokenizer family.

Corpus (built here, no downloads): code and documentation from this machine's Python install —
every stdlib .py source file whole (indentation, long identifiers, docstrings), plus the
natural-English docs of bench/pack/corpus.py — repeated with a per-copy header line until it is
at least --mb MB (default 1024). Families: a Llama-3/MiniCPM5-shaped byte-level BPE trained
here (32k, the Llama-3 split regex), and the real Mistral-7B (SentencePiece BPE) and phi-2
(GPT-2 byte-level) tokenizer.json files read in place (--shared DIR, else ../shared/tokenizers
or ./shared/tokenizers).

Per family and thread count (RAYON_NUM_THREADS; 1 2 4 8 16 by default): dlm-data's Mtok/s on
the whole corpus, the Python pipeline's Mtok/s on a --ref-mb slice of it (default 12 MB: the
pipeline at one thread would take an hour on 1 GB; the slice is a prefix of the same cyclic
mix), their ratio, and dlm-data's speedup and parallel efficiency against its own 1-thread
run. `--stages` adds dlm-data's per-stage busy seconds (DLM_PACK_PROFILE=1): reader, tokenize,
packer, writer, which names the serial stage that caps it. `--ceiling` adds, per thread count N
> 1, what this machine gives N independent 1-thread `dlm-data pack` processes, each on its own
1/N of the corpus and pinned to its own core (`taskset`), run at once: the embarrassingly
parallel throughput of N cores (lower all-core clocks and shared caches included); `hw` is that
against N × one such process alone on an idle machine (what the hardware itself keeps of
linear scaling), `of ceil` the N-thread run against it (what the pipeline keeps).
`--hw` adds, per thread count N > 1, what this machine's cores keep of their one-core speed
when N are busy, with no dlm-data in it: a fixed pure-Python loop (no memory traffic to speak
of) pinned to core 0 alone, then N copies pinned one per core at once; `hw` = time alone ÷
mean time of the N (all-core clocks, a shared host's neighbours); `eff/hw` = the run's
parallel efficiency over that: the part of the cores' own throughput the pipeline keeps.

Runs on a box without Rust: BIN is a prebuilt `dlm-data` (release). Needs python3 with pyarrow,
numpy and tokenizers.

`--giga` (issue 43) adds gigatoken's `encode_files(ParquetFileSource)` on the same corpus at the
same thread count (bench/tokenizers/giga.py: cold, whole process, tokenize only), interleaved with
dlm-data's runs: `gig Mtok/s` and `pack/gig` (pack's whole pipeline over gigatoken's tokenizing;
fastest of --repeat each), and CPU seconds (user + sys of the whole process, fewest of --repeat):
`p cpu`, `g cpu`, `cpu p/g` = gigatoken's over pack's (the per-core cost compared, what a 1-thread
row means on a shared host). `--no-python` skips the Python pipeline. `--corpus prose` builds the
corpus from the natural-English documents alone (same per-copy headers) instead of code + docs.

usage: scale.py BIN WORKDIR [--mb 1024] [--ref-mb 12] [--threads 1,2,4,8,16]
                [--families llama3-shaped,mistral-7b-v0.1,phi-2] [--shared DIR] [--ref PATH]
                [--stages] [--ceiling] [--hw] [--repeat N] [--giga] [--no-python] [--corpus code|prose]
                [--one-core]

`--one-core` (issue 43) adds, per family, a run of `RAYON_NUM_THREADS=1` pinned to one core
(`taskset -c 0`: the whole process — reader, shard encoders and committer included — on one
core, as gigatoken's 1-thread run nearly is): `1core Mtok/s`, and `eff/1c` = each row's Mtok/s
÷ (threads × the one-core run's), the scaling per core actually used. An unpinned 1-thread pack
keeps ~1.2–1.8 cores busy (its tokenizing thread plus reader and zstd encoders), so `eff` against
it caps at 1/1.2–1/1.8 even on perfect hardware.

`--repeat N` (default 1) runs dlm-data N times per family and thread count, alternating thread
counts (1 2 4 8 16, 1 2 4 8 16, ...) so that a slow spell of a shared machine hits every count
alike, and reports the fastest run of each (all wall times in scale.json); the Python pipeline
runs once per thread count.
"""
import json, os, resource, shutil, subprocess, sys, time

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))
from corpus import code_and_docs, code_docs, natural_docs  # noqa: E402


def opt(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


BIN, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
MB = int(opt("--mb", "1024"))
REF_MB = int(opt("--ref-mb", "12"))
THREADS = [int(t) for t in opt("--threads", "1,2,4,8,16").split(",")]
FAMILIES = opt("--families", "llama3-shaped,mistral-7b-v0.1,phi-2").split(",")
STAGES = "--stages" in sys.argv
CEILING = "--ceiling" in sys.argv
HW = "--hw" in sys.argv
REPEAT = max(1, int(opt("--repeat", "1")))
GIGA = "--giga" in sys.argv
PYTHON = "--no-python" not in sys.argv
ONE_CORE = "--one-core" in sys.argv
CORPUS = opt("--corpus", "code")
GIGA_PY = os.path.join(ROOT, "bench", "tokenizers", "giga.py")
SEQ = 2048
EOS = {"mistral-7b-v0.1": "</s>"}


def first_existing(*paths):
    for p in paths:
        if p and os.path.exists(p):
            return os.path.abspath(p)
    return None


SHARED = first_existing(opt("--shared", None), os.environ.get("DLM_SHARED_TOKENIZERS"),
                        os.path.join(ROOT, "..", "shared", "tokenizers"), os.path.join(ROOT, "shared", "tokenizers"))
REF = first_existing(opt("--ref", None), os.path.join(ROOT, "..", "shared", "bench", "py_pack_ref.py"),
                     os.path.join(ROOT, "shared", "bench", "py_pack_ref.py"))
os.makedirs(WORK, exist_ok=True)


def say(*a):
    print(*a, flush=True)


def build_corpus(mb, name):
    """At least `mb` MB: code and docs interleaved (or the natural docs alone, --corpus prose),
    cycled; each copy gets a header line, so repeated documents are not byte-identical."""
    path = os.path.join(WORK, name)
    if os.path.exists(path):
        return path
    base = natural_docs() if CORPUS == "prose" else code_and_docs()
    tmp = path + ".tmp"
    w = None
    size, k, batch = 0, 0, []
    while size < mb * 1_000_000:
        d = f"# copy {k // len(base)} of document {k % len(base)}\n" + base[k % len(base)]
        batch.append(d)
        size += len(d.encode())
        k += 1
        if len(batch) == 4096:
            t = pa.table({"text": batch})
            w = w or pq.ParquetWriter(tmp, t.schema, compression="zstd")
            w.write_table(t, row_group_size=4096)
            batch = []
    if batch:
        t = pa.table({"text": batch})
        w = w or pq.ParquetWriter(tmp, t.schema, compression="zstd")
        w.write_table(t, row_group_size=4096)
    w.close()
    os.rename(tmp, path)
    return path


def slice_of(path, mb, name):
    out = os.path.join(WORK, name)
    if os.path.exists(out):
        return out
    pf = pq.ParquetFile(path)
    texts, size = [], 0
    for rb in pf.iter_batches(batch_size=1024, columns=["text"]):
        for t in rb.column(0).to_pylist():
            texts.append(t)
            size += len(t.encode())
            if size >= mb * 1_000_000:
                break
        if size >= mb * 1_000_000:
            break
    pq.write_table(pa.table({"text": texts}), out, compression="zstd", row_group_size=4096)
    return out


def llama3_shaped(docs):
    import tokenizer_shapes as ts
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    d = os.path.join(WORK, "tok", "llama3-shaped")
    p = os.path.join(d, "tokenizer.json")
    if os.path.exists(p):
        return p
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)
    t = Tokenizer(models.BPE(ignore_merges=True))
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(ts.LLAMA3), behavior="isolated"), bl])
    t.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
    tr = trainers.BpeTrainer(vocab_size=32000, special_tokens=specials, show_progress=False,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator(docs, trainer=tr)
    os.makedirs(d, exist_ok=True)
    t.save(p)
    return p


# The reference program unchanged, with token_to_id("<|endoftext|>") answered by the family's EOS.
WRAP = """import runpy, sys, tokenizers
eos, ref = sys.argv.pop(1), sys.argv.pop(1)
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


def env_for(threads, profile=False):
    e = dict(os.environ)
    e["RAYON_NUM_THREADS"] = str(threads)
    e["RAYON_RS_NUM_CPUS"] = str(threads)
    if profile:
        e["DLM_PACK_PROFILE"] = "1"
    return e


CPU = [0.0]  # user + sys CPU seconds of the last run() child


def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(cmd, env):
    c0 = child_cpu()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    dt = time.perf_counter() - t0
    CPU[0] = child_cpu() - c0
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout[-2000:]}\n{p.stderr[-4000:]}")
    return dt, p.stdout, p.stderr


def ours(corpus, tok, eos, threads, pin=False):
    out = os.path.join(WORK, "out")
    subprocess.run(["rm", "-rf", out])
    dt, so, se = run((["taskset", "-c", "0"] if pin else []) + [BIN, "pack", "--input", corpus, "--text-column", "text", "--tokenizer", tok,
                      "--eos-token", eos, "--out", out, "--seq-len", str(SEQ), "--json"], env_for(threads, STAGES))
    s = json.loads(so.strip().splitlines()[-1])
    stages = [l for l in se.splitlines() if l.startswith("pack profile")]
    return dt, s["tokens"], (stages[-1] if stages else ""), CPU[0]


def slices_of(corpus, n):
    """`n` contiguous row slices of the corpus with about equal text bytes (cached)."""
    paths = [os.path.join(WORK, f"slices-{n}", f"part-{k:02d}.parquet") for k in range(n)]
    if all(os.path.exists(p) for p in paths):
        return paths
    os.makedirs(os.path.dirname(paths[0]), exist_ok=True)
    col = pq.read_table(corpus, columns=["text"]).column("text").combine_chunks()
    sizes = [len(t.encode()) for t in col.to_pylist()]
    total, acc, cuts = sum(sizes), 0, [0]
    for i, b in enumerate(sizes):
        acc += b
        if len(cuts) < n and acc >= total * len(cuts) / n:
            cuts.append(i + 1)
    cuts.append(len(sizes))
    for k, p in enumerate(paths):
        pq.write_table(pa.table({"text": col.slice(cuts[k], cuts[k + 1] - cuts[k])}), p + ".tmp",
                       compression="zstd", row_group_size=4096)
        os.rename(p + ".tmp", p)
    return paths


def pinned_packs(parts, tok, eos):
    """Mtok/s of one 1-thread pack per part, part k pinned to core k, all at once (total
    tokens / until the last ends)."""
    for k in range(len(parts)):
        subprocess.run(["rm", "-rf", os.path.join(WORK, f"ceil-out-{k}")])
    procs = []
    t0 = time.perf_counter()
    for k, part in enumerate(parts):
        cmd = [BIN, "pack", "--input", part, "--text-column", "text", "--tokenizer", tok, "--eos-token", eos,
               "--out", os.path.join(WORK, f"ceil-out-{k}"), "--seq-len", str(SEQ), "--json"]
        procs.append(subprocess.Popen(["taskset", "-c", str(k)] + cmd, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env_for(1)))
    ntok = 0
    for p in procs:
        so, se = p.communicate()
        if p.returncode != 0:
            sys.exit(f"ceiling run failed:\n{se[-4000:]}")
        ntok += json.loads(so.strip().splitlines()[-1])["tokens"]
    return ntok / (time.perf_counter() - t0) / 1e6


def ceiling(corpus, tok, eos, n):
    """(N pinned 1-thread packs at once, the hardware's share of N × one of them alone)."""
    parts = slices_of(corpus, n)
    solo = pinned_packs(parts[:1], tok, eos)
    c = pinned_packs(parts, tok, eos)
    return c, c / (n * solo)


HW_LOOP = "import time\nt = time.perf_counter(); x = 0\nfor i in range(8_000_000): x += i * i\nprint(time.perf_counter() - t)"


def hw_share(n):
    """Seconds of the pure-compute loop alone on core 0 (mean of before and after) ÷ the mean
    seconds of n copies pinned to cores 0..n-1 at once."""
    def loops(cores):
        procs = [subprocess.Popen(["taskset", "-c", str(k), sys.executable, "-c", HW_LOOP],
                                  stdout=subprocess.PIPE, text=True) for k in cores]
        return [float(p.communicate()[0]) for p in procs]
    alone = loops([0])[0]
    many = loops(range(n))
    alone = (alone + loops([0])[0]) / 2
    return alone / (sum(many) / len(many))


def giga(corpus, tok, threads):
    """gigatoken's cold whole-process seconds (its own counting time taken off) and tokens."""
    dt, so, _ = run([sys.executable, GIGA_PY, tok, corpus], env_for(threads))
    res = json.loads(so.strip().splitlines()[-1])
    return dt - res["dump_s"], res["tokens"], CPU[0]


def python_ref(corpus, tok, eos, threads, wrap):
    out = os.path.join(WORK, "ref.parquet")
    dt, so, _ = run([sys.executable, wrap, eos, REF, corpus, tok, out, str(SEQ)], env_for(threads))
    ntok = int(so.split(" tokens")[0].split()[-1])
    return dt, ntok


def main():
    t_start = time.perf_counter()
    if not os.access(BIN, os.X_OK):
        sys.exit(f"{BIN}: no dlm-data binary (build it with `cargo build --release` and carry it)")
    if REF is None and PYTHON:
        sys.exit("py_pack_ref.py not found: pass --ref PATH (../shared/bench/py_pack_ref.py)")
    say("command: " + " ".join(sys.argv))
    corpus = build_corpus(MB, f"{CORPUS}-corpus-{MB}mb.parquet")
    ref_corpus = slice_of(corpus, REF_MB, f"{CORPUS}-corpus-{MB}mb-first{REF_MB}mb.parquet") if PYTHON else None
    meta = pq.ParquetFile(corpus).metadata
    say(f"corpus: {corpus} ({os.path.getsize(corpus) / 1e6:.0f} MB zstd parquet, {meta.num_rows} documents, >= {MB} MB of text: "
        f"{CORPUS}: stdlib sources + docs or docs alone), python slice {REF_MB if PYTHON else 0} MB; {os.cpu_count()} cores; seq_len {SEQ}; built in {time.perf_counter() - t_start:.0f} s")
    wrap = os.path.join(WORK, "ref_wrap.py")
    open(wrap, "w").write(WRAP)
    fams = {}
    for f in FAMILIES:
        if f == "llama3-shaped":
            fams[f] = llama3_shaped(code_docs()[:2000] + natural_docs()[:2000])
        elif SHARED and os.path.isfile(os.path.join(SHARED, f, "tokenizer.json")):
            fams[f] = os.path.join(SHARED, f, "tokenizer.json")
        else:
            say(f"note: {f}: no tokenizer.json under {SHARED} (pass --shared DIR); skipped")
    results = {}
    if (CEILING or HW or ONE_CORE) and (not shutil.which("taskset") or max(THREADS) > (os.cpu_count() or 1)):
        sys.exit("--ceiling and --hw need taskset and at least as many cores as the largest thread count")
    say(f"{'family':18} {'thr':>3} {'dlm Mtok/s':>10} {'py Mtok/s':>9} {'ratio':>6} {'speedup':>7} {'eff':>5}"
        + (f" {'gig Mtok/s':>10} {'pack/gig':>8} {'p cpu':>6} {'g cpu':>6} {'cpu p/g':>7}" if GIGA else "")
        + (f" {'ceiling':>7} {'hw':>4} {'of ceil':>7}" if CEILING else "")
        + (f" {'hw':>4} {'eff/hw':>6}" if HW else "")
        + (f" {'1core Mtok/s':>12} {'eff/1c':>6}" if ONE_CORE else "") + "  stages")
    for name, tok in fams.items():
        eos = EOS.get(name, "<|endoftext|>")
        base = None
        runs = {th: [] for th in THREADS}
        gruns = {th: [] for th in THREADS}
        pinned = []
        for _ in range(REPEAT):
            if ONE_CORE:
                pinned.append(ours(corpus, tok, eos, 1, pin=True))
            for th in THREADS:
                runs[th].append(ours(corpus, tok, eos, th))
                if GIGA:
                    gruns[th].append(giga(corpus, tok, th))
        for th in THREADS:
            dt, ntok, stages, cpu = min(runs[th], key=lambda r: r[0])
            dtp, ntp = python_ref(ref_corpus, tok, eos, th, wrap) if PYTHON else (float("nan"), 0)
            m, mp = ntok / dt / 1e6, ntp / dtp / 1e6
            base = base or (m if th == 1 else None)
            sp = m / base if base else float("nan")
            eff = sp / th if base else float("nan")
            row = {"threads": th, "dlm_mtok_s": round(m, 2), "py_mtok_s": round(mp, 3),
                   "ratio": round(m / mp, 2), "speedup": round(sp, 2), "tokens": ntok,
                   "seconds": round(dt, 2), "all_seconds": [round(r[0], 2) for r in runs[th]],
                   "stages": stages}
            gcol = ""
            if GIGA:
                gdt, gtok, _ = min(gruns[th])
                mg = gtok / gdt / 1e6
                pcpu, gcpu = min(r[3] for r in runs[th]), min(r[2] for r in gruns[th])
                row.update({"gig_mtok_s": round(mg, 2), "gig_seconds": round(gdt, 2), "gig_tokens": gtok,
                            "gig_all_seconds": [round(r[0], 2) for r in gruns[th]], "pack_over_gig": round(gdt / dt, 3),
                            "pack_cpu_s": round(pcpu, 2), "gig_cpu_s": round(gcpu, 2), "cpu_pack_over_gig": round(gcpu / pcpu, 3)})
                gcol = f" {mg:>10.2f} {gdt / dt:>7.2f}x {pcpu:>6.2f} {gcpu:>6.2f} {gcpu / pcpu:>6.2f}x"
            ceil = ""
            if CEILING and th > 1:
                c, hw = ceiling(corpus, tok, eos, th)
                row["ceiling_mtok_s"], row["hw_share"] = round(c, 2), round(hw, 3)
                ceil = f" {c:>7.2f} {hw:>4.0%} {m / c:>7.0%}"
            elif CEILING:
                ceil = f" {'-':>7} {'-':>4} {'-':>7}"
            if HW and th > 1:
                hw = hw_share(th)
                row["hw_compute_share"] = round(hw, 3)
                ceil += f" {hw:>4.0%} {eff / hw:>6.0%}"
            elif HW:
                ceil += f" {'-':>4} {'-':>6}"
            if ONE_CORE:
                pdt, ptok, _, pcpu1 = min(pinned, key=lambda r: r[0])
                m1c = ptok / pdt / 1e6
                row.update({"one_core_mtok_s": round(m1c, 2), "one_core_seconds": round(pdt, 2),
                            "one_core_all_seconds": [round(r[0], 2) for r in pinned],
                            "one_core_cpu_s": round(pcpu1, 2), "eff_per_core": round(m / m1c / th, 3)})
                ceil += f" {m1c:>12.2f} {m / m1c / th:>6.0%}"
            results.setdefault(name, []).append(row)
            say(f"{name:18} {th:>3} {m:>10.2f} {mp:>9.3f} {m / mp:>5.1f}x {sp:>6.2f}x {eff:>5.0%}{gcol}{ceil}  "
                f"[{time.perf_counter() - t_start:.0f} s]"
                + (f" runs {'/'.join(f'{r[0]:.2f}' for r in runs[th])} s" if REPEAT > 1 else "") + f" {stages}")
    json.dump(results, open(os.path.join(WORK, "scale.json"), "w"), indent=1)
    say(f"goal: Mtok/s at 16 threads >= 12x Mtok/s at 1 (75% parallel efficiency). total {time.perf_counter() - t_start:.0f} s; "
        f"results in {os.path.join(WORK, 'scale.json')}")


main()
