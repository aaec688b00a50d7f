"""Read a `dlm-data pack` output with the real Python readers and compare its tokens with a
Python `tokenizers` run over the same documents.

usage: check_pack.py OUT_DIR TOKENIZER_JSON DOCS_JSON FORMAT
DOCS_JSON: a JSON list of document texts in stream order. Checks, for FORMAT:
  parquet   pyarrow reads every OUT/data/*.parquet (sorted), schema input_ids list<uint32>;
  mds       streaming.StreamingDataset when importable, else the MDS layout with numpy;
  megatron  numpy on the documented .bin/.idx layout: Megatron's own convention, one sequence
            and one document per source document (EOS appended), every document whole; then
            GPTDataset's sampling (megatron/core/datasets/gpt_dataset.py: shuffled document
            index, sample index over the concatenation, samples of seq_len + 1 tokens) re-done
            with numpy: every place a sample crosses into the next document follows an EOS.
Then (parquet, mds): concatenated rows == (ids + [eos] per document) truncated to whole rows,
every row seq_len long, doc_offsets marking document starts. Prints "ok <rows> <tokens>".
The ids are those of `--special-tokens-in-text` as index.json `totals.added_token_text.mode`
records it (plain when absent): in plain mode every added token whose content is not whitespace
only is made special and `encode_special_tokens` is on, so text equal to it stays text.
"""
import glob, json, os, sys
import numpy as np
from tokenizers import Tokenizer

out, tokpath, docs_path, fmt = sys.argv[1:5]
idx = json.load(open(os.path.join(out, "index.json")))
meta = idx.get("dlm_data", idx)
assert meta["complete"] is True, "index not complete"
seq = meta["seq_len"]
tok = Tokenizer.from_file(tokpath)
if meta["totals"].get("added_token_text", {}).get("mode", "plain") != "split":
    j = json.loads(tok.to_str())
    for t in j["added_tokens"]:
        if t["content"] and not t["content"].isspace():
            t["special"] = True
    tok = Tokenizer.from_str(json.dumps(j))
    tok.encode_special_tokens = True
eos = tok.token_to_id(meta["tokenizer"]["eos_token"])
assert eos == meta["tokenizer"]["eos_id"]
docs = json.load(open(docs_path))
stream, starts = [], set()
for e in tok.encode_batch(docs, add_special_tokens=False):
    starts.add(len(stream))
    stream.extend(e.ids)
    stream.append(eos)

rows, offsets = [], []
if fmt == "parquet":
    import pyarrow as pa, pyarrow.parquet as pq
    files = sorted(glob.glob(os.path.join(out, "data", "*.parquet")))
    assert ["data/" + os.path.basename(f) for f in files] == [s["file"] for s in meta["shards"]]
    for f in files:
        t = pq.read_table(f)
        assert t.schema.field("input_ids").type == pa.list_(pa.uint32()), t.schema
        rows += t.column("input_ids").to_pylist()
        offsets += t.column("doc_offsets").to_pylist()
        assert t.column("source").type == pa.string()
elif fmt == "mds":
    assert idx["version"] == 2
    try:
        from streaming import StreamingDataset
        ds = StreamingDataset(local=out, shuffle=False, batch_size=1)
        for i in range(len(ds)):
            s = ds[i]
            rows.append(s["input_ids"].tolist()); offsets.append(s["doc_offsets"].tolist())
        print("read with streaming.StreamingDataset")
    except ImportError:
        # The real StreamingDataset runs in `make test` through `make check-mds-streaming`
        # (its own venv: mosaicml-streaming hard-requires torch, GBs on x86_64 PyPI), which sets
        # DLM_REQUIRE_STREAMING=1 so this fallback can never stand in for it. Elsewhere the MDS
        # layout of streaming/base/format/mds/{writer,encodings}.py is read here with numpy.
        if os.environ.get("DLM_REQUIRE_STREAMING"):
            raise
        import pyarrow as pa
        for sh in idx["shards"]:
            assert sh["format"] == "mds" and sh["compression"] == "zstd"
            z = open(os.path.join(out, sh["zip_data"]["basename"]), "rb").read()
            assert len(z) == sh["zip_data"]["bytes"]
            raw = pa.decompress(z, decompressed_size=sh["raw_data"]["bytes"], codec="zstd").to_pybytes()
            nsamp = int(np.frombuffer(raw, np.uint32, 1, 0)[0])
            assert nsamp == sh["samples"]
            offs = np.frombuffer(raw, np.uint32, nsamp + 1, 4)
            cfg = json.loads(raw[4 + 4 * (nsamp + 1): offs[0]])
            assert cfg == {k: sh[k] for k in cfg}, cfg
            names, encs, sizes = sh["column_names"], sh["column_encodings"], sh["column_sizes"]
            assert names == sorted(names)
            for i in range(nsamp):
                smp = raw[offs[i]: offs[i + 1]]
                nvar = sum(1 for z_ in sizes if z_ is None)
                vs = list(np.frombuffer(smp, np.uint32, nvar, 0)); pos = 4 * nvar; vals = {}
                for name, enc, size in zip(names, encs, sizes):
                    n_ = size if size is not None else int(vs.pop(0))
                    data = smp[pos: pos + n_]; pos += n_
                    if enc.startswith("ndarray:"):
                        hdr = data[0]; ndim, sd = hdr >> 2, hdr & 3
                        sdt = [np.uint8, np.uint16, np.uint32, np.uint64][sd]
                        shape = np.frombuffer(data, sdt, ndim, 1)
                        vals[name] = np.frombuffer(data, np.dtype(enc.split(":")[1]), int(np.prod(shape)), 1 + ndim * np.dtype(sdt).itemsize)
                    elif enc == "str":
                        vals[name] = data.decode()
                assert pos == len(smp)
                rows.append(vals["input_ids"].tolist()); offsets.append(vals["doc_offsets"].tolist())
        print("read the MDS layout with numpy (streaming not installed)")
elif fmt == "megatron":
    dt = {4: np.int32, 8: np.uint16}
    docs_out = []
    for s in meta["shards"]:
        prefix = os.path.join(out, s["file"][:-4])
        raw = open(prefix + ".idx", "rb").read()
        assert raw[:9] == b"MMIDIDX\x00\x00"
        assert np.frombuffer(raw, np.uint64, 1, 9)[0] == 1
        code = raw[17]
        S = int(np.frombuffer(raw, np.uint64, 1, 18)[0]); D = int(np.frombuffer(raw, np.uint64, 1, 26)[0])
        lens = np.frombuffer(raw, np.int32, S, 34)
        ptrs = np.frombuffer(raw, np.int64, S, 34 + 4 * S)
        didx = np.frombuffer(raw, np.int64, D, 34 + 12 * S)
        assert len(raw) == 34 + 12 * S + 8 * D
        # One sequence per document: document_indices = 0..S.
        assert D == S + 1 and (didx == np.arange(S + 1)).all(), didx
        assert S == s["rows"], (S, s["rows"])
        bin_ = np.memmap(prefix + ".bin", dtype=dt[code], mode="r")
        for k in range(S):
            q = bin_[ptrs[k] // bin_.itemsize: ptrs[k] // bin_.itemsize + lens[k]]
            docs_out.append([int(x) for x in q])
    # Whole documents, each ending in EOS, in stream order: nothing cut, nothing dropped.
    flat = [x for d in docs_out for x in d]
    assert flat == stream, "tokens differ from Python tokenizers (documents in order, whole)"
    assert all(d and d[-1] == eos for d in docs_out), "a document without its EOS"
    assert [len(d) for d in docs_out] == [b - a for a, b in zip(sorted(starts), sorted(starts)[1:] + [len(stream)])]
    # GPTDataset (megatron-core gpt_dataset.py _build_document_sample_shuffle_indices with
    # helpers.build_sample_idx): per epoch a shuffled document order, its concatenation cut
    # into samples of seq_len + 1 tokens, consecutive samples overlapping by one token.
    rng = np.random.RandomState(1234)
    crossings = 0
    for epoch in range(2):
        order = np.arange(len(docs_out)); rng.shuffle(order)
        cat, bounds = [], []
        for d in order:
            if cat:
                bounds.append(len(cat))
            cat.extend(docs_out[d])
        nsamp = (len(cat) - 1) // seq
        for i in range(nsamp):
            lo, hi = i * seq, i * seq + seq + 1
            for b in bounds:
                if lo < b < hi:
                    crossings += 1
                    assert cat[b - 1] == eos, ("sample", i, "crosses a document boundary without EOS")
    assert meta["totals"]["rows"] == len(docs_out)
    assert meta["totals"]["tokens"] == len(flat)
    assert meta["totals"]["dropped_tail_tokens"] == 0
    print("gptdataset-equivalent: %d document crossings, all after EOS" % crossings)
    print("ok", len(docs_out), len(flat))
    sys.exit(0)
else:
    sys.exit("unknown format " + fmt)

flat = [x for r in rows for x in r]
n = len(stream) // seq
pad_last = len(rows) == n + 1
assert all(len(r) == seq for r in rows), "row length"
assert len(rows) in (n, n + 1), (len(rows), n)
want = stream[: n * seq]
assert flat[: n * seq] == want, "tokens differ from Python tokenizers"
for r, offs in enumerate(offsets[:n]):
    base = r * seq
    inner = [o for o in offs[1:-1]]
    assert offs[0] == 0 and offs[-1] == seq, offs
    assert inner == sorted(p - base for p in starts if base < p < base + seq), (r, offs)
assert meta["totals"]["rows"] == len(rows)
assert meta["totals"]["tokens"] == len(flat)
print("ok", len(rows), len(flat))
