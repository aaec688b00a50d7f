"""A parquet output read as a dataset directory, without naming files: OUT/data by pyarrow
(`pq.read_table`, `pyarrow.dataset`), and by polars `scan_parquet` and HF `datasets`
`load_dataset("parquet", data_dir=...)` when those are installed (the Makefile venv has
pyarrow; DLM_REQUIRE_ALL_READERS=1 makes the other two mandatory). Every reader must see the
rows of index.json's shards in order.

With a dataset card (OUT/README.md), its YAML `configs` is checked and `load_dataset(OUT)`
must read the same rows.

usage: check_dataset_dir.py OUT
"""
import json, os, sys

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

out = sys.argv[1]
meta = json.load(open(os.path.join(out, "index.json")))
assert meta["format"] == "parquet" and meta["complete"] is True
data = os.path.join(out, "data")
files = [s["file"] for s in meta["shards"]]
assert all(f.startswith("data/") for f in files), files
assert sorted(os.listdir(data)) == sorted(f[len("data/"):] for f in files), os.listdir(data)
want = pa.concat_tables([pq.read_table(os.path.join(out, f)) for f in files])
rows = meta["totals"]["rows"]
assert want.num_rows == rows, (want.num_rows, rows)
want_ids = want.column("input_ids").to_pylist()

t = pq.read_table(data)
assert t.schema.field("input_ids").type == pa.list_(pa.uint32()), t.schema
assert t.column("input_ids").to_pylist() == want_ids, "pq.read_table(OUT/data)"
d = ds.dataset(data, format="parquet")
assert d.to_table().column("input_ids").to_pylist() == want_ids, "pyarrow.dataset"
readers = ["pq.read_table", "pyarrow.dataset"]

need = os.environ.get("DLM_REQUIRE_ALL_READERS") == "1"
try:
    import polars as pl
    got = pl.scan_parquet(data).collect()
    assert got.height == rows and got["input_ids"].to_list() == want_ids, "polars.scan_parquet"
    readers.append("polars.scan_parquet")
except ImportError:
    if need:
        raise
try:
    import datasets
    got = datasets.load_dataset("parquet", data_dir=os.path.abspath(data), split="train")
    assert got.num_rows == rows and got["input_ids"] == want_ids, "datasets.load_dataset"
    readers.append("datasets.load_dataset")
except ImportError:
    if need:
        raise
# The dataset card (README.md): its YAML `configs` must name exactly the index's shards, and
# `load_dataset(OUT)` (the Hub's reading of an uploaded directory) must see the same rows.
card = os.path.join(out, "README.md")
if os.path.exists(card):
    text = open(card, encoding="utf-8").read()
    assert text.startswith("---\n"), "card without YAML front matter"
    front = text[4:text.index("\n---\n", 4)]
    try:
        import yaml
        y = yaml.safe_load(front)
        cfg = y["configs"][0]
        assert cfg["config_name"] == "default", cfg
        assert cfg["data_files"] == [{"split": "train", "path": "data/*.parquet"}], cfg
        readers.append("card YAML")
    except ImportError:
        assert "path: data/*.parquet" in front, front
    try:
        import datasets
        got = datasets.load_dataset(os.path.abspath(out), split="train")
        assert got.num_rows == rows and got["input_ids"] == want_ids, "load_dataset(OUT)"
        readers.append("datasets.load_dataset(OUT)")
    except ImportError:
        if need:
            raise
elif need:
    raise AssertionError("no dataset card README.md in " + out)
print("ok", rows, "rows read whole by", ", ".join(readers))
