//! Step 4 of an mcq run with `--tokenizer`: the stage-2 SFT set. Rows built from this
//! worker's items, written as shards by [`super::sft_write`] under a journal (index.json
//! written incomplete before the first shard and after each), each file's provenance
//! counting the rows that reached the set, decontam's report removed when it describes
//! other shards.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};

use super::item::McqItem;
use super::load::Loaded;
use super::settings::McqSettings;
use super::steps::{Opened, Reports};
use super::tokenizer::LoadedTokenizer;
use super::{sft, sft_write, uptodate, PART_ROWS_PER_SHARD};
use crate::shards::index::{Index, Kind, ProvenanceRange, Totals};
use crate::worker::WorkerSlice;

/// What the SFT step reads.
pub(super) struct SftJob<'a> {
    pub args: &'a McqSettings,
    pub slice: WorkerSlice,
    pub o: &'a Opened,
    pub tok: &'a LoadedTokenizer,
    pub items: &'a [McqItem],
    pub loaded: &'a Loaded,
    pub settings: Option<&'a uptodate::McqFingerprint>,
    pub sft_dir: &'a Path,
    pub prompts_path: &'a Path,
    pub reports: &'a Reports,
    /// How the parquet shards' row groups are encoded (`--threads`).
    pub row_groups: crate::shards::parquet::RowGroups,
}

/// Write the SFT set; its summary for `--json`.
pub(super) fn write(job: &SftJob, mut ranges: Vec<ProvenanceRange>) -> Result<serde_json::Value> {
    let (args, sft_dir) = (job.args, job.sft_dir);
    let (rows, too_long, added) =
        sft::build_rows(job.items, &job.o.templates, job.tok, args.seq_len)?;
    if added.documents > 0 {
        tracing::warn!("sft: {}", added.summary("items"));
    }
    let kept: Vec<&sft::SftRow> = rows.iter().flatten().collect();
    std::fs::create_dir_all(sft_dir).with_context(|| format!("creating {}", sft_dir.display()))?;
    let mut index = journal(job)?;
    let mds_entries = sft_write::write_shards(
        sft_dir,
        &mut index,
        &kept,
        args.rows_per_shard,
        job.row_groups,
    )?;
    count_documents(job.items, &rows, &mut ranges);
    let counts = sft_write::Counts {
        skipped_empty: job.loaded.skipped_empty,
        too_long,
        skipped_oversize: job.loaded.skipped_oversize,
        kept_without_blank: job.loaded.kept_without_blank,
        added: added.clone(),
    };
    index.totals = sft_write::totals(&kept, &index, &counts)?;
    index.provenance = ranges;
    sft_write::save_complete(sft_dir, &mut index, &mds_entries)?;
    drop_stale_report(job)?;
    let tokens = index.totals.tokens;
    crate::progress::note(&format!(
        "sft: {} rows, {} tokens ({} over --seq-len {} left out) → {}",
        kept.len(),
        tokens,
        too_long,
        args.seq_len,
        sft_dir.display()
    ));
    Ok(serde_json::json!({
        "dir": sft_dir.display().to_string(),
        "rows": kept.len(),
        "tokens": tokens,
        "shards": index.shards.len(),
        "too_long": too_long,
        "added_token_text": added,
    }))
}

/// The journal before the first shard: the set's index, incomplete, so a rerun after a crash
/// may replace exactly the files it lists.
fn journal(job: &SftJob) -> Result<Index> {
    let (args, o, tok) = (job.args, job.o, job.tok);
    let mut extra = BTreeMap::new();
    if let Some((t, _)) = &tok.bos {
        // Only with a BOS, so outputs without one keep their bytes.
        extra.insert("bos_token".into(), serde_json::json!(t));
    }
    extra.insert(
        "mcq".into(),
        serde_json::json!({
            "seed": args.seed,
            "prompt_template": o.templates.prompt_text,
            "answer_template": o.templates.answer_text,
            "prompts_sha256": crate::util::sha256_file(job.prompts_path)?,
            "worker": job.slice.to_string(),
            "columns": {"id": "utf8", "input_ids": "list<uint32>", "prompt_len": "uint32", "length": "uint32", "source": "utf8", "repo": "utf8", "commit": "utf8", "file": "utf8", "row": "uint32"},
        }),
    );
    let mut index = Index {
        version: 1,
        tool: Index::tool_name(),
        tool_build: Some(crate::build_info::ToolBuild::current()),
        kind: Kind::Sft,
        format: args.format,
        seq_len: args.seq_len as u64,
        dtype: crate::shards::Dtype::U32,
        tokenizer: tok.info.clone(),
        shards: Vec::new(),
        totals: Totals::default(),
        provenance: Vec::new(),
        manifest: Some(crate::shards::index::abs_path(&o.m.path)),
        lock_sha256: Some(crate::util::sha256_file(&o.lock_path)?),
        complete: false,
        args: None,
        extra,
    };
    if let Some(st) = job.settings {
        index
            .extra
            .insert(uptodate::KEY.into(), serde_json::to_value(st)?);
    }
    if !job.slice.is_whole() {
        // merge re-cuts the rows into shards of this size (a part may hold one shard).
        index
            .extra
            .insert(PART_ROWS_PER_SHARD.into(), args.rows_per_shard.into());
    }
    Ok(index)
}

/// Provenance documents count what reached the SFT set, per file.
fn count_documents(
    items: &[McqItem],
    rows: &[Option<sft::SftRow>],
    ranges: &mut [ProvenanceRange],
) {
    let mut per_file: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (it, r) in items.iter().zip(rows) {
        if r.is_some() {
            *per_file
                .entry((it.prov.source.clone(), it.prov.file.clone()))
                .or_default() += 1;
        }
    }
    for r in ranges {
        r.documents = per_file
            .get(&(r.source.clone(), r.file.clone()))
            .copied()
            .unwrap_or(0);
    }
}

/// decontam's report on the shards, removed when it describes another index than the one
/// written now.
fn drop_stale_report(job: &SftJob) -> Result<()> {
    let Some(scanned) = &job.reports.sft_scanned else {
        return Ok(());
    };
    let sft_report = &job.reports.sft_report;
    let index_sha = crate::util::sha256_file(&job.sft_dir.join(crate::shards::index::INDEX_FILE))?;
    if &index_sha != scanned && sft_report.is_file() {
        std::fs::remove_file(sft_report)
            .with_context(|| format!("removing {}", sft_report.display()))?;
        tracing::info!(
            "{}: removed: it describes other shards than those written now (rerun decontam)",
            sft_report.display()
        );
    }
    Ok(())
}
