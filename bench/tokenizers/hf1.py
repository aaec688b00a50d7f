"""The HF `tokenizers` 1.0 reference of the tokenizer benches (issue 58), run as its own process
from the venv that holds it (`.venv-tok1`, pinned in mk/pack.mk) and timed whole by the caller
(interpreter start + import + tokenizer load + encoding): what a user who picks HF tokenizers 1.0
instead of `dlm-data pack` runs — `Tokenizer.from_file(tokenizer.json)`, the corpus column read
with pyarrow, `encode_batch(texts, add_special_tokens=False)` (the crate's own thread pool:
RAYON_NUM_THREADS is passed, 1.0rc3 keeps ~1.6 cores busy at 1). Tokenize only: no packing, no
EOS, nothing written. Prints one JSON line: documents, tokens, version, and with --dump N the
first N documents' ids plus `dump_s` (seconds spent after encoding on counting and dumping, which
the caller subtracts).

usage: hf1.py TOKENIZER_JSON CORPUS_PARQUET [--dump N]
"""
import json, sys, time

t_start = time.perf_counter()
import pyarrow.parquet as pq  # noqa: E402
import tokenizers  # noqa: E402

tok, corpus = sys.argv[1], sys.argv[2]
dump = int(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else 0
t = tokenizers.Tokenizer.from_file(tok)
texts = pq.read_table(corpus, columns=["text"]).column(0).to_pylist()
enc = t.encode_batch(texts, add_special_tokens=False)
t_enc = time.perf_counter()
res = {"documents": len(enc), "tokens": sum(len(e.ids) for e in enc), "encode_s": t_enc - t_start,
       "version": tokenizers.__version__}
if dump:
    res["ids"] = [enc[i].ids for i in range(min(dump, len(enc)))]
res["dump_s"] = time.perf_counter() - t_enc
print(json.dumps(res))
