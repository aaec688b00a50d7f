//! Writing the SFT shard directory, one path for `mcq` and for `merge` of mcq worker parts so
//! both write the same bytes: the journal (index.json, `complete: false`) before the first
//! shard and after each one, then totals and provenance with `complete: true`.

use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::sft::SftRow;
use super::sft_shards;
use crate::added_text::AddedTextCounts;
use crate::shards::index::{self, Index, Totals};
use crate::shards::ShardFormat;

/// Item counts of the whole run that the rows themselves do not show.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    /// Source rows whose question was empty (all items read, every worker alike).
    pub skipped_empty: u64,
    /// Items over `--seq-len`, left out of the SFT set.
    pub too_long: u64,
    /// Items over `--max-item-bytes` (all items read).
    pub skipped_oversize: u64,
    /// Items kept without their blank options (all items read).
    pub kept_without_blank: u64,
    /// Items whose text held added-token text.
    pub added: AddedTextCounts,
}

/// Write `kept` in shards of `rows_per_shard` into `dir`, journaling each in `index` (whose
/// shard list is empty and `complete` false on entry), parquet row groups encoded as
/// `row_groups` says. Returns the MDS index entries.
pub fn write_shards(
    dir: &Path,
    index: &mut Index,
    kept: &[&SftRow],
    rows_per_shard: usize,
    row_groups: crate::shards::parquet::RowGroups,
) -> Result<Vec<Value>> {
    let format = index.format;
    let is_mds = format == ShardFormat::Mds;
    let mut mds_entries = Vec::new();
    index::save(dir, index, is_mds.then_some(&mds_entries[..]))?;
    for (k, chunk) in kept.chunks(rows_per_shard.max(1)).enumerate() {
        crate::signals::check()?;
        let batch = sft_shards::to_batch(chunk, format)?;
        let codec = crate::shards::ShardCodec {
            format,
            dtype: index.dtype,
            zstd_level: crate::shards::parquet::LEGACY_ZSTD_LEVEL,
        };
        let mut w = crate::shards::write_shard(codec, row_groups, dir, k, &batch)?;
        if format == ShardFormat::Megatron {
            let (name, sha) = sft_shards::write_sidecar(dir, &w.entry.file, chunk)?;
            w.entry.extra_files.insert(name, sha);
        }
        // Test hook: the window between a shard's rename and its journal line.
        crate::signals::pause_point("mcq-shard");
        index.shards.push(w.entry);
        mds_entries.extend(w.mds);
        index::save(dir, index, is_mds.then_some(&mds_entries[..]))?;
    }
    Ok(mds_entries)
}

/// The totals of an SFT set of `kept` rows.
pub fn totals(kept: &[&SftRow], index: &Index, c: &Counts) -> Result<Totals> {
    let tokens: u64 = index.shards.iter().map(|s| s.tokens).sum();
    let prompt_tokens: u64 = kept.iter().map(|r| r.prompt_len as u64).sum();
    let mut totals = Totals {
        rows: kept.len() as u64,
        tokens,
        documents: kept.len() as u64,
        dropped_tail_tokens: 0,
        skipped_empty: c.skipped_empty,
        skipped_filtered: c.too_long,
        mixture: None,
        extra: Default::default(),
    };
    totals
        .extra
        .insert("prompt_tokens".into(), prompt_tokens.into());
    totals
        .extra
        .insert("added_token_text".into(), serde_json::to_value(&c.added)?);
    if c.skipped_oversize > 0 {
        totals
            .extra
            .insert("skipped_oversize".into(), c.skipped_oversize.into());
    }
    if c.kept_without_blank > 0 {
        totals.extra.insert(
            "kept_without_blank_options".into(),
            c.kept_without_blank.into(),
        );
    }
    Ok(totals)
}

/// Mark the journal complete and save it (the last write of an SFT directory).
pub fn save_complete(dir: &Path, index: &mut Index, mds_entries: &[Value]) -> Result<()> {
    index.complete = true;
    let is_mds = index.format == ShardFormat::Mds;
    index::save(dir, index, is_mds.then_some(mds_entries))
}
