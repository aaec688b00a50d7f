"""Read a `dlm-data pack --format mds` output with the real mosaicml-streaming
`StreamingDataset` and compare every sample with the rows the same run wrote as parquet.

usage: streaming_check.py MDS_DIR EXPECTED_NPZ
EXPECTED_NPZ: `input_ids` (rows x seq_len, uint32) and `doc_offsets` (flat) + `doc_offsets_len`.
Prints "ok <rows>" when identical. Needs torch (see mk/pack.mk `check-mds-streaming`).
"""
import sys, tempfile
import numpy as np
from streaming import StreamingDataset

mds, exp = sys.argv[1], np.load(sys.argv[2])
ds = StreamingDataset(local=mds, shuffle=False, batch_size=1)
ids = exp["input_ids"]
lens = exp["doc_offsets_len"]
offs = np.split(exp["doc_offsets"], np.cumsum(lens)[:-1])
assert len(ds) == len(ids), (len(ds), len(ids))
for i in range(len(ds)):
    s = ds[i]
    assert s["input_ids"].dtype in (np.uint32, np.uint16), s["input_ids"].dtype
    assert np.array_equal(s["input_ids"].astype(np.uint32), ids[i]), i
    assert np.array_equal(s["doc_offsets"], offs[i]), i
    assert isinstance(s["source"], str)
print("ok", len(ds), "samples read by streaming.StreamingDataset", ds.__class__.__module__)
