//! `--drop` for MDS and Megatron shards: decode each shard's rows, keep the clean ones and
//! re-encode them with the shared writers of [`crate::shards`], so the filtered copy has the
//! same layout (columns, `doc_offsets`, dtype, the SFT `.rows.jsonl` sidecar) as the original.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::mcq::sft_shards::sidecar_name;
use crate::shards::index::Index;
use crate::shards::ShardFormat;
use crate::shards::{Column, RowBatch, WrittenShard};

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
    index: &Index,
    dir: &Path,
    out: &Path,
    n: usize,
    drop: &BTreeSet<u64>,
) -> Result<(WrittenShard, u64)> {
    let fmt = index.format;
    if fmt == ShardFormat::Parquet {
        bail!("--drop: parquet shards are filtered page by page, not rewritten here");
    }
    // MDS and Megatron only: no parquet row groups to place.
    use crate::shards::parquet::RowGroups;
    let src = &dir.join(&index.shards[n].file);
    let batch = index.read_shard(dir, n)?;
    let before = batch.rows() as u64;
    let kept = filter(batch, drop);
    let dropped = before - kept.rows() as u64;
    let mut w = crate::shards::write_shard(index.codec(), RowGroups::INLINE, out, n, &kept)
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
