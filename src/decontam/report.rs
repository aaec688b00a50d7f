//! `decontam.json`: what was scanned (path + sha256, so `audit` can tell a stale report), against
//! which benchmarks (files + sha256), every overlap, what `--drop` removed, and the speed.
//!
//! Where it is written: `DIR/decontam.json` for `--shards DIR`; `<stem>.decontam.json` beside
//! `--prompts FILE` (`prompts.jsonl` → `prompts.decontam.json`). A `--drop` copy gets its own
//! report (no hits, `filtered_from` naming the original). `--report FILE` overrides.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use super::reference::Benchmark;
use super::targets::Origin;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Scanned {
    /// `prompts` or `shards`.
    pub kind: String,
    pub path: String,
    /// sha256 of prompts.jsonl, or of the shard directory's index.json.
    pub sha256: String,
    pub documents: u64,
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HitRecord {
    pub benchmark: String,
    pub benchmark_file: String,
    pub benchmark_row: u64,
    /// The shared n-gram, normalised (lowercase, punctuation stripped).
    pub ngram: String,
    /// The document on our side.
    pub document: Origin,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FilteredFrom {
    pub path: String,
    pub sha256: String,
    pub dropped_documents: u64,
    pub dropped_rows: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecontamReport {
    pub version: u32,
    pub tool: String,
    pub time: String,
    pub ngram: usize,
    pub scanned: Scanned,
    pub against: Vec<Benchmark>,
    /// Distinct n-grams in the index; items with fewer words than `ngram` (not indexable).
    pub index_ngrams: u64,
    pub index_items: u64,
    pub index_items_too_short: u64,
    pub hits: Vec<HitRecord>,
    pub contaminated_documents: u64,
    /// Path of the filtered copy written by `--drop`, if any.
    pub dropped_copy: Option<String>,
    /// For a report describing a `--drop` copy: the original it was filtered from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered_from: Option<FilteredFrom>,
    pub seconds: f64,
    pub scan_seconds: f64,
    /// Bytes read on our side / scan time.
    pub mb_per_s: f64,
    /// The run's arguments, digested: a rerun with the same ones on the same data is a no-op.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<RecordedArgs>,
}

/// Where the report for a scanned prompts file or shard directory lives.
pub fn default_path(scanned: &Path, is_shards: bool) -> PathBuf {
    if is_shards {
        scanned.join(crate::shards::outdir::DECONTAM_REPORT)
    } else {
        let stem = scanned
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "prompts".into());
        scanned.with_file_name(format!("{stem}.decontam.json"))
    }
}

pub fn save(path: &Path, r: &DecontamReport) -> Result<()> {
    crate::util::atomic_write(path, serde_json::to_string_pretty(r)?.as_bytes())
}

pub fn load(path: &Path) -> Result<DecontamReport> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{}: not a decontam report", path.display()))
}

fn origin_line(o: &Origin) -> String {
    let mut parts = Vec::new();
    if let Some(id) = &o.id {
        parts.push(id.clone());
    }
    if let (Some(s), Some(f), Some(r)) = (&o.source, &o.file, o.row) {
        parts.push(format!("{s} {f} row {r}"));
    }
    if let (Some(s), Some(r)) = (&o.shard, o.shard_row) {
        parts.push(format!("shard {s} row {r}"));
    }
    parts.join(" · ")
}

/// The human report.
pub fn human(r: &DecontamReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "decontam: {} {} ({} documents, {:.1} MB) against {} benchmark(s), {}-grams\n",
        r.scanned.kind,
        r.scanned.path,
        r.scanned.documents,
        r.scanned.bytes as f64 / 1e6,
        r.against.len(),
        r.ngram
    ));
    for b in &r.against {
        s.push_str(&format!(
            "  benchmark {}: {} items ({}{})\n",
            b.benchmark,
            b.items,
            b.repo
                .as_deref()
                .map(|x| format!("{x}@"))
                .unwrap_or_default(),
            b.files
                .iter()
                .map(|f| f.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    s.push_str(&format!(
        "  index: {} n-grams from {} items ({} items shorter than {} words not indexable)\n",
        r.index_ngrams, r.index_items, r.index_items_too_short, r.ngram
    ));
    for h in &r.hits {
        s.push_str(&format!(
            "  HIT {} row {} ({}) ↔ {}: \"{}\"\n",
            h.benchmark,
            h.benchmark_row,
            h.benchmark_file,
            origin_line(&h.document),
            h.ngram
        ));
    }
    s.push_str(&format!(
        "  {} contaminated document(s) of {}; scanned {:.1} MB in {:.2}s ({:.0} MB/s)\n",
        r.contaminated_documents,
        r.scanned.documents,
        r.scanned.bytes as f64 / 1e6,
        r.scan_seconds,
        r.mb_per_s
    ));
    if let Some(d) = &r.dropped_copy {
        s.push_str(&format!("  filtered copy without them: {d}\n"));
    }
    s
}
/// One `--against` argument as given, with the sha256 of its bytes and, for a manifest, of
/// the lock beside it (which pins the sha256 of every benchmark file read from the cache).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgainstDigest {
    pub path: String,
    pub sha256: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_sha256: Option<String>,
}

/// Everything a decontam report depends on besides the scanned content (which the report's
/// `scanned.sha256` covers; for shards that index pins the tokenizer's sha256 too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedArgs {
    pub ngram: usize,
    pub against: Vec<AgainstDigest>,
    /// `--drop` as given.
    pub drop: Option<String>,
}
