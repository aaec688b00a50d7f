//! `audit --deep`: decode every shard of an output and check it against its format's
//! contract, as a trainer would read it — row lengths, `doc_offsets` monotone and within the
//! row, token ids below the tokenizer's vocabulary, no nulls (parquet), Megatron `.idx`
//! bounds and document indices against its `.bin`, MDS sample bounds and decompressed sizes
//! (read no further than the size the MosaicML index states) — and return the decoded rows
//! and tokens, which the caller compares with index.json. `--hash` only proves the bytes are
//! the ones recorded; this proves the recorded bytes are what the index says they hold.

use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};
use arrow::array::{Array, AsArray};
use serde_json::Value;

use crate::shards::index::{Index, Kind, ShardEntry};
use crate::shards::{Column, RowBatch, ShardFormat};

/// What one shard decoded to.
#[derive(Debug, Default, Clone, Copy)]
pub struct Decoded {
    pub rows: u64,
    pub tokens: u64,
}

/// Decode shard `k` of `idx` in `dir` and check it; `mds` is its MosaicML index entry (MDS
/// outputs). The error names the file and the first contract it breaks.
pub fn check_shard(dir: &Path, idx: &Index, k: usize, mds: Option<&Value>) -> Result<Decoded> {
    let sh = &idx.shards[k];
    let path = dir.join(&sh.file);
    let batch = match idx.format {
        ShardFormat::Parquet => {
            parquet_nulls(&path)?;
            crate::shards::parquet::read(&path)?
        }
        ShardFormat::Mds => mds_batch(&path, mds)?,
        ShardFormat::Megatron => megatron_batch(&path, idx)?,
    };
    rows_contract(&batch, idx, sh).with_context(|| path.display().to_string())?;
    Ok(Decoded {
        rows: batch.rows() as u64,
        tokens: batch.tokens(),
    })
}

/// Nulls anywhere in a parquet shard (a list, or an element inside one): the reader would
/// see a 0 where the file has no value.
fn parquet_nulls(path: &Path) -> Result<()> {
    for (g, rb) in crate::shards::guarded::open(path)?.enumerate() {
        let rb = rb.with_context(|| format!("reading {}", path.display()))?;
        for (f, col) in rb.schema().fields().iter().zip(rb.columns()) {
            let n = nulls(col.as_ref());
            ensure!(
                n == 0,
                "{} batch {g}: column {} holds {n} null(s)",
                path.display(),
                f.name()
            );
        }
    }
    Ok(())
}

fn nulls(a: &dyn Array) -> usize {
    let inner = if let Some(l) = a.as_list_opt::<i32>() {
        nulls(l.values().as_ref())
    } else if let Some(l) = a.as_list_opt::<i64>() {
        nulls(l.values().as_ref())
    } else {
        0
    };
    a.null_count() + inner
}

/// An MDS shard decompressed to exactly the `raw_data.bytes` its MosaicML entry states (a
/// bomb stops at that size), then decoded: sample offsets, column sizes, the sample count.
fn mds_batch(path: &Path, mds: Option<&Value>) -> Result<RowBatch> {
    let entry = mds.ok_or_else(|| anyhow!("{}: no MosaicML index entry", path.display()))?;
    let want = entry["raw_data"]["bytes"]
        .as_u64()
        .ok_or_else(|| anyhow!("{}: MosaicML entry has no raw_data.bytes", path.display()))?;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut raw = Vec::new();
    if path.extension().is_some_and(|e| e == "zstd") {
        zstd::stream::read::Decoder::new(f)?
            .take(want.saturating_add(1))
            .read_to_end(&mut raw)
            .with_context(|| format!("{}: not zstd", path.display()))?;
    } else {
        f.take(want.saturating_add(1)).read_to_end(&mut raw)?;
    }
    ensure!(
        raw.len() as u64 == want,
        "{}: decompresses to {} bytes, the MosaicML index says {want}",
        path.display(),
        if raw.len() as u64 > want {
            format!("more than {want}")
        } else {
            raw.len().to_string()
        }
    );
    let samples = crate::shards::mds_read::decode(&raw)
        .with_context(|| format!("{}: not a readable MDS shard", path.display()))?;
    if let Some(n) = entry["samples"].as_u64() {
        ensure!(
            samples.len() as u64 == n,
            "{}: {} samples, the MosaicML index says {n}",
            path.display(),
            samples.len()
        );
    }
    let mut b = RowBatch::default();
    let mut offs = Vec::new();
    let mut plen = Vec::new();
    let mut len = Vec::new();
    use crate::shards::mds_read::Value as V;
    for (i, s) in samples.into_iter().enumerate() {
        match s.get("input_ids") {
            Some(V::Ids(v)) => b.input_ids.push(v.clone()),
            _ => bail!("{} sample {i}: no input_ids array", path.display()),
        }
        if let Some(V::Ids(o)) = s.get("doc_offsets") {
            offs.push(o.clone());
        }
        if let Some(V::U32(p)) = s.get("prompt_len") {
            plen.push(*p);
        }
        if let Some(V::U32(l)) = s.get("length") {
            len.push(*l);
        }
    }
    let n = b.rows();
    for (name, c) in [
        ("doc_offsets", Column::U32List(offs)),
        ("prompt_len", Column::U32(plen)),
        ("length", Column::U32(len)),
    ] {
        if !c.is_empty() {
            ensure!(
                c.len() == n,
                "{}: column {name} in {} of {n} samples",
                path.display(),
                c.len()
            );
            b.columns.push((name.to_string(), c));
        }
    }
    Ok(b)
}

/// A Megatron shard: its `.idx` (header, sequence lengths, document indices from 0 to the
/// last sequence) against its `.bin`'s size, then the rows.
fn megatron_batch(bin: &Path, idx: &Index) -> Result<RowBatch> {
    let idx_path = bin.with_extension("idx");
    let (lens, docs) = crate::shards::megatron::read_idx(&idx_path)?;
    ensure!(
        docs.first() == Some(&0) && docs.last() == Some(&(lens.len() as u64)),
        "{}: document indices run {:?}..{:?}, not 0..{} (every sequence in a document)",
        idx_path.display(),
        docs.first(),
        docs.last(),
        lens.len()
    );
    let tokens: u64 = lens.iter().map(|&l| l as u64).sum();
    let want = tokens
        .checked_mul(idx.dtype.size() as u64)
        .ok_or_else(|| anyhow!("{}: token count overflows", idx_path.display()))?;
    let got = std::fs::metadata(bin)
        .with_context(|| format!("{}", bin.display()))?
        .len();
    ensure!(
        got == want,
        "{}: {got} bytes, its .idx describes {tokens} {} ids ({want} bytes)",
        bin.display(),
        idx.dtype.name()
    );
    crate::shards::megatron::read(bin, idx.dtype)
}

/// The row contract: counts as recorded, pretraining rows of `seq_len` (not Megatron, whose
/// rows are documents), ids below the vocabulary, `doc_offsets` from 0 to the row's length
/// and never decreasing, SFT `prompt_len` within the row and `length` its length.
fn rows_contract(b: &RowBatch, idx: &Index, sh: &ShardEntry) -> Result<()> {
    ensure!(
        b.rows() as u64 == sh.rows && b.tokens() == sh.tokens,
        "decodes to {} rows, {} tokens; index.json says {} rows, {} tokens",
        b.rows(),
        b.tokens(),
        sh.rows,
        sh.tokens
    );
    let vocab = idx.tokenizer.vocab_size;
    let fixed = idx.kind == Kind::Pretrain && idx.format != ShardFormat::Megatron;
    let offsets = match b.column("doc_offsets") {
        Some(Column::U32List(v)) => Some(v),
        _ => None,
    };
    let u32col = |n: &str| match b.column(n) {
        Some(Column::U32(v)) => Some(v),
        _ => None,
    };
    let (plen, len) = (u32col("prompt_len"), u32col("length"));
    for (r, row) in b.input_ids.iter().enumerate() {
        let n = row.len() as u64;
        ensure!(
            !fixed || n == idx.seq_len,
            "row {r}: {n} tokens, seq_len is {}",
            idx.seq_len
        );
        if let Some((i, id)) = row.iter().enumerate().find(|(_, &id)| id >= vocab) {
            bail!("row {r} position {i}: token id {id} is not below the vocabulary size {vocab}");
        }
        if let Some(o) = offsets.map(|v| &v[r]) {
            ensure!(
                o.first() == Some(&0)
                    && o.last().map(|&x| x as u64) == Some(n)
                    && o.windows(2).all(|w| w[0] <= w[1]),
                "row {r}: doc_offsets {} do not run from 0 to the row's {n} tokens in order",
                short(o)
            );
        }
        if let Some(p) = plen.map(|v| v[r]) {
            ensure!(
                p as u64 <= n,
                "row {r}: prompt_len {p} past the row's {n} tokens"
            );
        }
        if let Some(l) = len.map(|v| v[r]) {
            ensure!(l as u64 == n, "row {r}: length {l}, the row has {n} tokens");
        }
    }
    if idx.kind == Kind::Pretrain {
        ensure!(offsets.is_some(), "no doc_offsets column");
    }
    Ok(())
}

fn short(o: &[u32]) -> String {
    if o.len() <= 8 {
        format!("{o:?}")
    } else {
        format!("{:?}…({} values)", &o[..8], o.len())
    }
}
