//! Reads MDS shards back (the inverse of [`super::mds`]), as samples or as the [`RowBatch`]
//! they were written from. Handles the encodings our writer emits: `ndarray:<uint16|uint32>` with
//! dynamic 1-d shape, `str`, `uint32`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};

use super::{Column, RowBatch};

/// One decoded column value of a sample.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Ids(Vec<u32>),
    U32(u32),
    Str(String),
}

/// One sample: column name → value.
pub type Sample = BTreeMap<String, Value>;

fn u32_at(b: &[u8], at: usize) -> Result<u32> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
        .ok_or_else(|| anyhow!("truncated at byte {at}"))
}

fn decode_ndarray(b: &[u8], dtype: &str) -> Result<Vec<u32>> {
    ensure!(!b.is_empty(), "empty ndarray");
    let (ndim, code) = ((b[0] >> 2) as usize, b[0] & 3);
    ensure!(ndim == 1, "ndarray with {ndim} dimensions");
    let w = 1usize << code;
    ensure!(b.len() >= 1 + w, "truncated ndarray shape");
    let mut n8 = [0u8; 8];
    n8[..w].copy_from_slice(&b[1..1 + w]);
    let n = u64::from_le_bytes(n8) as usize;
    let body = &b[1 + w..];
    match dtype {
        "uint32" => {
            ensure!(
                n.checked_mul(4) == Some(body.len()),
                "ndarray of {n} uint32 has {} bytes",
                body.len()
            );
            Ok(body
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect())
        }
        "uint16" => {
            ensure!(
                n.checked_mul(2) == Some(body.len()),
                "ndarray of {n} uint16 has {} bytes",
                body.len()
            );
            Ok(body
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes(c.try_into().unwrap()) as u32)
                .collect())
        }
        other => bail!("unsupported ndarray dtype {other:?}"),
    }
}

/// Decode a raw (decompressed) MDS shard.
pub fn decode(raw: &[u8]) -> Result<Vec<Sample>> {
    let n = u32_at(raw, 0)? as usize;
    let off: Vec<usize> = (0..=n)
        .map(|i| u32_at(raw, 4 + 4 * i).map(|x| x as usize))
        .collect::<Result<_>>()?;
    let cfg_start = 4 + 4 * (n + 1);
    ensure!(
        off[0] >= cfg_start && off[n] <= raw.len() && off.windows(2).all(|w| w[0] <= w[1]),
        "bad sample offsets"
    );
    let cfg: serde_json::Value =
        serde_json::from_slice(&raw[cfg_start..off[0]]).context("shard config is not JSON")?;
    let strs = |k: &str| -> Result<Vec<String>> {
        cfg[k]
            .as_array()
            .ok_or_else(|| anyhow!("config has no {k}"))?
            .iter()
            .map(|v| {
                v.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("{k}: not strings"))
            })
            .collect()
    };
    let names = strs("column_names")?;
    let encs = strs("column_encodings")?;
    let sizes: Vec<Option<usize>> = cfg["column_sizes"]
        .as_array()
        .ok_or_else(|| anyhow!("config has no column_sizes"))?
        .iter()
        .map(|v| v.as_u64().map(|x| x as usize))
        .collect();
    ensure!(
        names.len() == encs.len() && names.len() == sizes.len(),
        "config columns disagree"
    );
    let var = sizes.iter().filter(|s| s.is_none()).count();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let s = &raw[off[i]..off[i + 1]];
        let mut lens = Vec::with_capacity(var);
        for k in 0..var {
            lens.push(u32_at(s, 4 * k).with_context(|| format!("sample {i}"))? as usize);
        }
        let mut at = 4 * var;
        let mut vi = 0;
        let mut sample = Sample::new();
        for ((name, enc), size) in names.iter().zip(&encs).zip(&sizes) {
            let len = match size {
                Some(x) => *x,
                None => {
                    vi += 1;
                    lens[vi - 1]
                }
            };
            let b = at
                .checked_add(len)
                .and_then(|end| s.get(at..end))
                .ok_or_else(|| anyhow!("sample {i}: column {name} runs past the sample"))?;
            at += len;
            let v = if let Some(dt) = enc.strip_prefix("ndarray:") {
                Value::Ids(decode_ndarray(b, dt).with_context(|| format!("sample {i}: {name}"))?)
            } else if enc == "str" {
                Value::Str(
                    String::from_utf8(b.to_vec()).with_context(|| format!("sample {i}: {name}"))?,
                )
            } else if enc == "uint32" {
                Value::U32(u32_at(b, 0)?)
            } else {
                bail!("column {name}: unsupported encoding {enc:?}");
            };
            sample.insert(name.clone(), v);
        }
        out.push(sample);
    }
    Ok(out)
}

/// The most raw bytes [`read`] decompresses when nothing better bounds a shard: 1 GiB.
pub const RAW_MAX: u64 = 1 << 30;

/// The most raw bytes a shard of `rows` rows and `tokens` tokens can hold: 4 bytes a token
/// and a `doc_offsets` entry per token at most, plus 4 KiB a row for the sample header and
/// string columns, plus 1 MiB. A shard decompressing to more is refused while decompressing.
pub fn raw_bound(rows: u64, tokens: u64) -> u64 {
    tokens
        .saturating_mul(8)
        .saturating_add(rows.saturating_mul(4096))
        .saturating_add(1 << 20)
}

/// Read and decode `shard.NNNNN.mds.zstd` (or an uncompressed `.mds`), decompressing at most
/// [`RAW_MAX`] bytes.
pub fn read(path: &Path) -> Result<Vec<Sample>> {
    read_bounded(path, RAW_MAX)
}

/// [`read`], refusing a shard whose raw bytes exceed `max_raw` while decompressing it (a
/// regular file only).
pub fn read_bounded(path: &Path, max_raw: u64) -> Result<Vec<Sample>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    crate::bounded::open_regular(path)?
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    let bound = crate::bounded::Bound::new(
        max_raw,
        "the rows and tokens index.json lists for it allow no more: a corrupt shard or a \
         decompression bomb",
    );
    let raw = if path.extension().is_some_and(|e| e == "zstd") {
        let what = format!("{}: decompressed", path.display());
        let dec = zstd::stream::read::Decoder::new(&bytes[..])
            .with_context(|| format!("{}: not zstd", path.display()))?;
        crate::bounded::read_capped(dec, bound, &what)
            .with_context(|| format!("{}: not zstd, or too large", path.display()))?
    } else {
        anyhow::ensure!(
            bytes.len() as u64 <= max_raw,
            "{}",
            bound.message(&path.display().to_string())
        );
        bytes
    };
    decode(&raw).with_context(|| format!("{}: not a readable MDS shard", path.display()))
}

/// An MDS shard as a batch: `input_ids` plus its other columns (in the shard's sorted order),
/// its raw bytes bounded by `max_raw` ([`raw_bound`]).
pub fn read_batch(path: &Path, max_raw: u64) -> Result<RowBatch> {
    let samples = read_bounded(path, max_raw)?;
    let mut b = RowBatch::default();
    for (i, mut s) in samples.into_iter().enumerate() {
        match s.remove("input_ids") {
            Some(Value::Ids(v)) => b.input_ids.push(v),
            _ => bail!("{} sample {i}: no input_ids array", path.display()),
        }
        if i == 0 {
            for (k, v) in &s {
                b.columns.push((
                    k.clone(),
                    match v {
                        Value::Ids(_) => Column::U32List(vec![]),
                        Value::U32(_) => Column::U32(vec![]),
                        Value::Str(_) => Column::Str(vec![]),
                    },
                ));
            }
        }
        ensure!(
            s.len() == b.columns.len(),
            "{} sample {i}: {} columns, the first sample has {}",
            path.display(),
            s.len() + 1,
            b.columns.len() + 1
        );
        for (k, c) in &mut b.columns {
            let bad = || {
                anyhow!(
                    "{} sample {i}: column {k} missing or of another type",
                    path.display()
                )
            };
            match (c, s.remove(k.as_str()).ok_or_else(bad)?) {
                (Column::U32List(c), Value::Ids(v)) => c.push(v),
                (Column::U32(c), Value::U32(v)) => c.push(v),
                (Column::Str(c), Value::Str(v)) => c.push(v),
                _ => return Err(bad()),
            }
        }
    }
    Ok(b)
}
