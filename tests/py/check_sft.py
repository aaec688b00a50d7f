"""Read a `dlm-data mcq --tokenizer` SFT output (OUT/sft) with Python readers independent of
the Rust code and check every row against prompts.jsonl.

usage: check_sft.py SFT_DIR PROMPTS_JSONL TOKENIZER_JSON FORMAT
Rows must follow prompts.jsonl order; input_ids[:prompt_len] decodes (Python `tokenizers`)
to the record's prompt, the rest to " <gold>" + EOS; every row carries id and provenance.
MDS is read from the layout of mosaicml streaming's writer/encodings with numpy, Megatron
from the documented .bin/.idx layout (prompt_len = first sequence of each document) plus
its part-NNNNN.rows.jsonl sidecar (id and provenance).
Prints "ok <rows>".
"""
import json, os, sys
import numpy as np
import pyarrow as pa, pyarrow.parquet as pq
from tokenizers import Tokenizer

out, prompts_path, tokpath, fmt = sys.argv[1:5]
idx = json.load(open(os.path.join(out, "index.json")))
meta = idx.get("dlm_data", idx)
assert meta["complete"] is True and meta["kind"] == "sft" and meta["format"] == fmt, meta
recs = [json.loads(l) for l in open(prompts_path)]
tok = Tokenizer.from_file(tokpath)
eos = meta["tokenizer"]["eos_id"]
rows = []  # dicts: input_ids, prompt_len, and id/source/file/row when stored

if fmt == "parquet":
    for s in meta["shards"]:
        t = pq.read_table(os.path.join(out, s["file"]))
        assert t.schema.field("input_ids").type == pa.list_(pa.uint32()), t.schema
        rows += t.to_pylist()
elif fmt == "mds":
    assert idx["version"] == 2 and len(idx["shards"]) == len(meta["shards"])
    for sh in idx["shards"]:
        z = open(os.path.join(out, sh["zip_data"]["basename"]), "rb").read()
        raw = pa.decompress(z, decompressed_size=sh["raw_data"]["bytes"], codec="zstd").to_pybytes()
        n = int(np.frombuffer(raw, np.uint32, 1, 0)[0])
        assert n == sh["samples"]
        offs = np.frombuffer(raw, np.uint32, n + 1, 4)
        names, encs, sizes = sh["column_names"], sh["column_encodings"], sh["column_sizes"]
        nvar = sum(1 for z_ in sizes if z_ is None)
        for i in range(n):
            smp = raw[offs[i]: offs[i + 1]]
            vs = [int(x) for x in np.frombuffer(smp, np.uint32, nvar, 0)]
            pos, vals = 4 * nvar, {}
            for name, enc, size in zip(names, encs, sizes):
                k = size if size is not None else vs.pop(0)
                data = smp[pos: pos + k]; pos += k
                if enc.startswith("ndarray:"):
                    ndim, sd = data[0] >> 2, data[0] & 3
                    sdt = [np.uint8, np.uint16, np.uint32, np.uint64][sd]
                    shape = np.frombuffer(data, sdt, ndim, 1)
                    vals[name] = np.frombuffer(data, np.dtype(enc.split(":")[1]), int(np.prod(shape)), 1 + ndim * np.dtype(sdt).itemsize).tolist()
                elif enc == "str":
                    vals[name] = data.decode()
                elif enc == "uint32":
                    vals[name] = int(np.frombuffer(data, np.uint32, 1, 0)[0])
                else:
                    sys.exit("unexpected encoding " + enc)
            assert pos == len(smp)
            rows.append(vals)
elif fmt == "megatron":
    dt = {4: np.int32, 8: np.uint16}
    for s in meta["shards"]:
        prefix = os.path.join(out, s["file"][:-4])
        raw = open(prefix + ".idx", "rb").read()
        assert raw[:9] == b"MMIDIDX\x00\x00"
        S = int(np.frombuffer(raw, np.uint64, 1, 18)[0]); D = int(np.frombuffer(raw, np.uint64, 1, 26)[0])
        lens = np.frombuffer(raw, np.int32, S, 34)
        ptrs = np.frombuffer(raw, np.int64, S, 34 + 4 * S)
        didx = np.frombuffer(raw, np.int64, D, 34 + 12 * S)
        bin_ = np.fromfile(prefix + ".bin", dtype=dt[raw[17]])
        side = [json.loads(l) for l in open(prefix + ".rows.jsonl")]
        assert len(side) == D - 1
        for d in range(D - 1):
            a, b = int(didx[d]), int(didx[d + 1])
            assert b - a == 2, "prompt + answer sequences"
            seqs = [bin_[ptrs[k] // bin_.itemsize: ptrs[k] // bin_.itemsize + lens[k]] for k in range(a, b)]
            assert side[d]["prompt_len"] == int(lens[a])
            rows.append(dict(side[d], input_ids=[int(x) for q in seqs for x in q], prompt_len=int(lens[a])))
else:
    sys.exit("unknown format " + fmt)

assert len(rows) == len(recs) == meta["totals"]["rows"], (len(rows), len(recs))
for r, rec in zip(rows, recs):
    ids, pl = r["input_ids"], r["prompt_len"]
    assert tok.decode(ids[:pl], skip_special_tokens=False) == rec["prompt"], rec["id"]
    assert ids[-1] == eos
    assert tok.decode(ids[pl:-1], skip_special_tokens=False) == " " + rec["gold"], rec["id"]
    assert (r["id"], r["source"], r["file"], r["row"]) == (rec["id"], rec["source"], rec["file"], rec["row"])
assert sum(len(r["input_ids"]) for r in rows) == meta["totals"]["tokens"]
print("ok", len(rows))
