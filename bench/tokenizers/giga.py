"""The gigatoken reference of the tokenizer benches, run as its own process and timed whole by the
caller (interpreter start + import + tokenizer load + `encode_files`): what a user who picks a
tokenizer instead of `dlm-data pack` runs — `gigatoken.Tokenizer(tokenizer.json)` then
`encode_files(ParquetFileSource([corpus], column="text"))`, thread count from RAYON_NUM_THREADS.
Tokenize only: no packing, no EOS, nothing written. Prints one JSON line: documents, tokens, and
with --dump N the first N documents' ids (for the identity check against HF `tokenizers`) plus
`dump_s`, the seconds spent after encoding on counting and dumping, which the caller subtracts.

usage: giga.py TOKENIZER_JSON CORPUS_PARQUET [--dump N]
"""
import json, sys, time

t_start = time.perf_counter()
import gigatoken as gt  # noqa: E402

tok, corpus = sys.argv[1], sys.argv[2]
dump = int(sys.argv[sys.argv.index("--dump") + 1]) if "--dump" in sys.argv else 0
out = gt.Tokenizer(tok).encode_files(gt.ParquetFileSource([corpus], column="text"))
t_enc = time.perf_counter()
import awkward as ak  # noqa: E402  (already loaded by gigatoken)

n = ak.num(out, axis=1).to_numpy()
res = {"documents": int(len(n)), "tokens": int(n.sum()), "encode_s": t_enc - t_start}
if dump:
    res["ids"] = [ak.to_numpy(out[i]).tolist() for i in range(min(dump, len(n)))]
res["dump_s"] = time.perf_counter() - t_enc
print(json.dumps(res))
