//! MosaicML Streaming MDS shards (`--format mds`): `shard.NNNNN.mds.zstd` files plus the
//! MosaicML `index.json` (`{"version": 2, "shards": [...]}`) that `streaming.StreamingDataset`
//! reads; our own index object rides along under `"dlm_data"` (see [`super::index`]).
//!
//! Layout written (mosaicml/streaming `format/mds/writer.py`): `u32 num_samples`,
//! `u32 offsets[num_samples + 1]` (absolute), the config JSON (`json.dumps(sort_keys=True)`),
//! then the samples. A sample is one `u32` size per variable-size column followed by the
//! column payloads, columns in sorted name order. Token lists use the `ndarray:<dtype>`
//! encoding (static dtype, dynamic shape: one byte `(ndim << 2) | shape_dtype`, the shape,
//! then the values); strings use `str`; `U32` columns use the fixed-size `uint32` encoding.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;

use super::{Column, Dtype, EncodedShard, RowBatch, ShardEntry, ShardReader, ShardWriter};

/// The MDS shard writer (ids as `dtype`) and reader ([`super::mds_read`]).
pub struct Mds {
    pub dtype: Dtype,
}

impl ShardWriter for Mds {
    fn encode(&self, n: usize, batch: &RowBatch) -> Result<EncodedShard> {
        encode_shard(n, batch, self.dtype)
    }
}

impl ShardReader for Mds {
    fn read(&self, dir: &Path, entry: &ShardEntry) -> Result<RowBatch> {
        super::mds_read::read_batch(
            &dir.join(&entry.file),
            super::mds_read::raw_bound(entry.rows, entry.tokens),
        )
    }
}

/// MosaicML's default shard size limit, recorded in the config (readers ignore it).
const SIZE_LIMIT: u64 = 1 << 26;
const ZSTD_LEVEL: i32 = 3;

/// `shard.00000.mds`
pub fn raw_name(n: usize) -> String {
    format!("shard.{n:05}.mds")
}

enum Col<'a> {
    Ids(&'a [Vec<u32>]),
    U32List(&'a [Vec<u32>]),
    U32(&'a [u32]),
    Str(&'a [String]),
}

fn encoding(c: &Col, dtype: Dtype) -> (String, Option<u64>) {
    match c {
        Col::Ids(_) => (format!("ndarray:{}", dtype.name()), None),
        Col::U32List(_) => ("ndarray:uint32".into(), None),
        Col::U32(_) => ("uint32".into(), Some(4)),
        Col::Str(_) => ("str".into(), None),
    }
}

/// NDArray encoding with static dtype and dynamic 1-d shape.
fn encode_ndarray(out: &mut Vec<u8>, v: &[u32], dtype: Dtype) -> Result<()> {
    anyhow::ensure!(!v.is_empty(), "MDS cannot encode an empty array");
    let n = v.len() as u64;
    let (code, width) = if n < 1 << 8 {
        (0u8, 1)
    } else if n < 1 << 16 {
        (1, 2)
    } else if n < 1 << 32 {
        (2, 4)
    } else {
        (3, 8)
    };
    out.push((1 << 2) | code);
    out.extend_from_slice(&n.to_le_bytes()[..width]);
    match dtype {
        Dtype::U32 => {
            for x in v {
                out.extend_from_slice(&x.to_le_bytes());
            }
        }
        Dtype::U16 => {
            for x in v {
                let y = u16::try_from(*x)
                    .map_err(|_| anyhow::anyhow!("token id {x} does not fit uint16"))?;
                out.extend_from_slice(&y.to_le_bytes());
            }
        }
    }
    Ok(())
}

fn py_str(s: &str) -> String {
    // json.dumps with ensure_ascii=True.
    let mut o = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    o.push_str(&format!("\\u{:04x}", u));
                }
            }
            c => o.push(c),
        }
    }
    o.push('"');
    o
}

/// The shard config exactly as Python's `json.dumps(config, sort_keys=True)` prints it.
fn config_text(names: &[String], encs: &[String], sizes: &[Option<u64>]) -> String {
    let list = |v: Vec<String>| format!("[{}]", v.join(", "));
    format!(
        "{{\"column_encodings\": {}, \"column_names\": {}, \"column_sizes\": {}, \"compression\": \"zstd\", \"format\": \"mds\", \"hashes\": [], \"size_limit\": {}, \"version\": 2}}",
        list(encs.iter().map(|s| py_str(s)).collect()),
        list(names.iter().map(|s| py_str(s)).collect()),
        list(sizes.iter().map(|s| s.map_or("null".to_string(), |x| x.to_string())).collect()),
        SIZE_LIMIT
    )
}

/// Encode the raw (uncompressed) shard and return it with its config JSON value.
pub fn encode(batch: &RowBatch, dtype: Dtype) -> Result<(Vec<u8>, serde_json::Value)> {
    let mut cols: Vec<(String, Col)> = vec![("input_ids".into(), Col::Ids(&batch.input_ids))];
    for (n, c) in &batch.columns {
        cols.push((
            n.clone(),
            match c {
                Column::U32List(v) => Col::U32List(v),
                Column::U32(v) => Col::U32(v),
                Column::Str(v) => Col::Str(v),
            },
        ));
    }
    cols.sort_by(|a, b| a.0.cmp(&b.0));
    let names: Vec<String> = cols.iter().map(|c| c.0.clone()).collect();
    let (encs, sizes): (Vec<String>, Vec<Option<u64>>) =
        cols.iter().map(|c| encoding(&c.1, dtype)).unzip();
    let config = config_text(&names, &encs, &sizes);

    let n = batch.rows();
    let mut samples: Vec<u8> = Vec::with_capacity(batch.tokens() as usize * dtype.size() + n * 64);
    let mut ends = Vec::with_capacity(n);
    let mut payload = Vec::new();
    for r in 0..n {
        let mut head = Vec::new();
        payload.clear();
        for (_, c) in &cols {
            let start = payload.len();
            match c {
                Col::Ids(v) => encode_ndarray(&mut payload, &v[r], dtype)?,
                Col::U32List(v) => encode_ndarray(&mut payload, &v[r], Dtype::U32)?,
                Col::U32(v) => payload.extend_from_slice(&v[r].to_le_bytes()),
                Col::Str(v) => payload.extend_from_slice(v[r].as_bytes()),
            }
            if !matches!(c, Col::U32(_)) {
                head.extend_from_slice(&((payload.len() - start) as u32).to_le_bytes());
            }
        }
        samples.extend_from_slice(&head);
        samples.extend_from_slice(&payload);
        ends.push(samples.len());
    }
    let header_len = 4 + 4 * (n + 1) + config.len();
    let mut out = Vec::with_capacity(header_len + samples.len());
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let off = |x: usize| -> Result<[u8; 4]> {
        Ok(u32::try_from(header_len + x)
            .map_err(|_| anyhow::anyhow!("MDS shard over 4 GiB: lower --shard-bytes"))?
            .to_le_bytes())
    };
    out.extend_from_slice(&off(0)?);
    for e in &ends {
        out.extend_from_slice(&off(*e)?);
    }
    out.extend_from_slice(config.as_bytes());
    out.extend_from_slice(&samples);
    let cfg: serde_json::Value = serde_json::from_str(&config)?;
    Ok((out, cfg))
}

/// Shard `n` (`shard.NNNNN.mds.zstd`) compressed, with its MosaicML index entry.
fn encode_shard(n: usize, batch: &RowBatch, dtype: Dtype) -> Result<EncodedShard> {
    let (raw, cfg) = encode(batch, dtype)?;
    let zip = zstd::bulk::compress(&raw, ZSTD_LEVEL)?;
    let raw_base = raw_name(n);
    let zip_base = format!("{raw_base}.zstd");
    let mut m = serde_json::Map::new();
    // sort_keys order, like MosaicML's own index.json.
    let mut entry: BTreeMap<String, serde_json::Value> = BTreeMap::new();
    if let serde_json::Value::Object(c) = cfg {
        for (k, v) in c {
            entry.insert(k, v);
        }
    }
    entry.insert(
        "raw_data".into(),
        serde_json::json!({"basename": raw_base, "bytes": raw.len(), "hashes": {}}),
    );
    entry.insert(
        "zip_data".into(),
        serde_json::json!({"basename": zip_base, "bytes": zip.len(), "hashes": {}}),
    );
    entry.insert("samples".into(), serde_json::json!(batch.rows()));
    for (k, v) in entry {
        m.insert(k, v);
    }
    Ok(EncodedShard {
        files: vec![(zip_base, zip)],
        rows: batch.rows() as u64,
        tokens: batch.tokens(),
        mds: Some(serde_json::Value::Object(m)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let batch = RowBatch {
            input_ids: vec![vec![7, 8, 9]],
            columns: vec![("source".into(), Column::Str(vec!["ab".into()]))],
        };
        let (raw, cfg) = encode(&batch, Dtype::U32).unwrap();
        assert_eq!(
            cfg["column_names"],
            serde_json::json!(["input_ids", "source"])
        );
        assert_eq!(u32::from_le_bytes(raw[0..4].try_into().unwrap()), 1);
        let start = u32::from_le_bytes(raw[4..8].try_into().unwrap()) as usize;
        let end = u32::from_le_bytes(raw[8..12].try_into().unwrap()) as usize;
        assert_eq!(end, raw.len());
        let s = &raw[start..end];
        // two sizes, then ndarray (1 + 1 + 12 bytes) and "ab".
        assert_eq!(u32::from_le_bytes(s[0..4].try_into().unwrap()), 14);
        assert_eq!(u32::from_le_bytes(s[4..8].try_into().unwrap()), 2);
        assert_eq!(s[8], (1 << 2) | 0);
        assert_eq!(s[9], 3);
        assert_eq!(&s[s.len() - 2..], b"ab");
        let cfg_text = std::str::from_utf8(&raw[12..start]).unwrap();
        assert!(cfg_text.starts_with("{\"column_encodings\": [\"ndarray:uint32\", \"str\"]"));
    }

    /// What the writer encodes, the reader decodes (`mds_read`).
    #[test]
    fn round_trip() {
        use super::super::mds_read::{decode, Value};
        let batch = RowBatch {
            input_ids: vec![vec![7, 8, 9], (0..300).collect()],
            columns: vec![
                ("prompt_len".into(), Column::U32(vec![2, 200])),
                ("id".into(), Column::Str(vec!["a".into(), "bé".into()])),
            ],
        };
        for dt in [Dtype::U32, Dtype::U16] {
            let (raw, _) = encode(&batch, dt).unwrap();
            let s = decode(&raw).unwrap();
            assert_eq!(s.len(), 2);
            assert_eq!(s[1]["input_ids"], Value::Ids((0..300).collect()));
            assert_eq!(s[0]["input_ids"], Value::Ids(vec![7, 8, 9]));
            assert_eq!(s[1]["prompt_len"], Value::U32(200));
            assert_eq!(s[1]["id"], Value::Str("bé".into()));
        }
    }
}
