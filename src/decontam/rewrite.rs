//! `--drop` for MDS and Megatron shards: decode each shard's rows, keep the clean ones and
//! re-encode them with the shared writers of [`crate::shards`], so the filtered copy has the
//! same layout (columns, `doc_offsets`, dtype, the SFT `.rows.jsonl` sidecar) as the original.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};

use crate::mcq::sft_shards::{megatron_idx, sidecar_name};
use crate::shards::mds_read::{self, Value};
use crate::shards::ShardFormat;
use crate::shards::{Column, Dtype, RowBatch, WrittenShard};

fn dtype_of(name: &str) -> Result<Dtype> {
    match name {
        "uint32" => Ok(Dtype::U32),
        "uint16" => Ok(Dtype::U16),
        d => bail!("unsupported dtype {d:?}"),
    }
}

/// Rows of an MDS shard as a batch (columns in the shard's sorted order).
pub fn mds_batch(path: &Path) -> Result<RowBatch> {
    let samples = mds_read::read(path)?;
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

/// Rows (= `.idx` documents) of a Megatron shard, with `doc_offsets` from its sequences.
pub fn megatron_batch(bin: &Path, dtype: Dtype) -> Result<RowBatch> {
    let (lens, docs) = megatron_idx(&bin.with_extension("idx"))?;
    let bytes = std::fs::read(bin).with_context(|| format!("reading {}", bin.display()))?;
    let toks: Vec<u32> = match dtype {
        Dtype::U16 => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect(),
        Dtype::U32 => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    };
    let (mut ids, mut offs) = (Vec::new(), Vec::new());
    let mut at = 0usize;
    for w in docs.windows(2) {
        let mut o = vec![0u32];
        for l in &lens[w[0] as usize..w[1] as usize] {
            o.push(o.last().unwrap() + l);
        }
        let n = *o.last().unwrap() as usize;
        anyhow::ensure!(
            at + n <= toks.len(),
            "{}: .bin shorter than .idx says",
            bin.display()
        );
        ids.push(toks[at..at + n].to_vec());
        offs.push(o);
        at += n;
    }
    anyhow::ensure!(
        at == toks.len(),
        "{}: .bin longer than .idx says",
        bin.display()
    );
    Ok(RowBatch {
        input_ids: ids,
        columns: vec![("doc_offsets".into(), Column::U32List(offs))],
    })
}

/// Keep only the rows of `batch` not in `drop`.
fn filter(batch: RowBatch, drop: &BTreeSet<u64>) -> RowBatch {
    let keep = |r: usize| !drop.contains(&(r as u64));
    fn pick<T: Clone>(v: &[T], keep: &dyn Fn(usize) -> bool) -> Vec<T> {
        v.iter()
            .enumerate()
            .filter(|(r, _)| keep(*r))
            .map(|(_, x)| x.clone())
            .collect()
    }
    RowBatch {
        input_ids: pick(&batch.input_ids, &keep),
        columns: batch
            .columns
            .iter()
            .map(|(n, c)| {
                let c = match c {
                    Column::U32List(v) => Column::U32List(pick(v, &keep)),
                    Column::U32(v) => Column::U32(pick(v, &keep)),
                    Column::Str(v) => Column::Str(pick(v, &keep)),
                };
                (n.clone(), c)
            })
            .collect(),
    }
}

/// Rewrite shard number `n` (`src` in the scanned directory) into `out` without `drop`'s
/// rows. Returns the written shard and how many rows were dropped.
pub fn rewrite(
    format: &str,
    dtype: &str,
    src: &Path,
    out: &Path,
    n: usize,
    drop: &BTreeSet<u64>,
) -> Result<(WrittenShard, u64)> {
    let dt = dtype_of(dtype)?;
    let (fmt, batch) = match format {
        "mds" => (ShardFormat::Mds, mds_batch(src)?),
        "megatron" => (ShardFormat::Megatron, megatron_batch(src, dt)?),
        f => bail!("--drop: cannot rewrite {f} shards here"),
    };
    let before = batch.rows() as u64;
    let kept = filter(batch, drop);
    let dropped = before - kept.rows() as u64;
    let mut w = crate::shards::write_shard(fmt, out, n, &kept, dt)
        .with_context(|| format!("rewriting {}", src.display()))?;
    // The SFT sidecar of a Megatron shard (per-row id and provenance) loses the same rows.
    let src_name = src.file_name().and_then(|x| x.to_str()).unwrap_or_default();
    let side = src.with_file_name(sidecar_name(src_name));
    if fmt == ShardFormat::Megatron && side.exists() {
        let text = std::fs::read_to_string(&side)
            .with_context(|| format!("reading {}", side.display()))?;
        anyhow::ensure!(
            text.lines().count() as u64 == before,
            "{}: line count differs from the shard's rows",
            side.display()
        );
        let mut buf = String::new();
        for (r, l) in text.lines().enumerate() {
            if !drop.contains(&(r as u64)) {
                buf.push_str(l);
                buf.push('\n');
            }
        }
        let name = sidecar_name(&w.entry.file);
        let (sha, _) = crate::shards::write_durable(out, &name, buf.as_bytes())?;
        w.entry.extra_files.insert(name, sha);
    }
    Ok((w, dropped))
}
