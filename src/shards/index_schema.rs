//! The types of `OUT/index.json` (contract 4), apart from reading and writing the file
//! ([`super::index`]): the dataset card renders from them and index.json's writer writes the
//! card, so both depend on these types and neither on the other.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Result;
use serde::{Deserialize, Serialize};

use super::settings::PackSettings;
use super::{Dtype, RowBatch, ShardFormat, ShardReader};

/// Pretraining rows or SFT rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Pretrain,
    Sft,
}

/// The tokenizer the ids came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenizerInfo {
    /// Absolute path of the tokenizer.json (see [`crate::shards::index::abs_path`]).
    pub path: String,
    /// sha256 of tokenizer.json.
    pub sha256: String,
    pub eos_token: String,
    pub eos_id: u32,
    /// Vocabulary size including added tokens.
    pub vocab_size: u32,
}

/// One shard file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardEntry {
    /// File name relative to the output directory.
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
    pub rows: u64,
    pub tokens: u64,
    /// Other files belonging to this shard (e.g. Megatron's `.idx`), relative name → sha256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_files: BTreeMap<String, String>,
}

/// Counters over the whole output. The named fields are the contract; writers may add more.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub rows: u64,
    /// Tokens stored in rows (padding included when `--pad-last`).
    pub tokens: u64,
    /// Documents whose tokens entered the stream (a document cut by the final dropped row counts).
    pub documents: u64,
    /// Tokens of the final partial row, dropped (0 with `--pad-last`).
    pub dropped_tail_tokens: u64,
    /// Rows whose rendered text was empty or whitespace only.
    pub skipped_empty: u64,
    /// Rows dropped by a source rule (a template field that is null or the placeholder `-`).
    pub skipped_filtered: u64,
    /// `pack --tokens`: each source's requested and achieved share (absent without a budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mixture: Option<Vec<MixtureShare>>,
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

/// One source of a `pack --tokens` mixture: what its weight asked for and what it supplied.
/// `short` is true when the source ran out of data before its budget (`tokens < budget`);
/// `--strict-mixture` makes that an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixtureShare {
    pub source: String,
    pub weight: f64,
    /// Times the source's files are read (the manifest's `epochs`, default 1).
    pub epochs: u32,
    /// `weight / sum(weights)`.
    pub requested_share: f64,
    /// The source's token budget: `--tokens * requested_share`.
    pub budget: u64,
    /// Tokens the source supplied (a source with data to spare ends at the first document
    /// past its budget).
    pub tokens: u64,
    /// `tokens / sum(tokens of all sources)`.
    pub achieved_share: f64,
    pub short: bool,
}

/// A contiguous range of rows of one input file that fed this output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProvenanceRange {
    pub source: String,
    pub repo: String,
    pub commit: String,
    pub file: String,
    pub split: String,
    /// `train` or `eval-reference`.
    pub role: String,
    /// First row read (0-based), inclusive.
    pub row_start: u64,
    /// One past the last row read.
    pub row_end: u64,
    /// Documents of this range that entered the stream.
    pub documents: u64,
    /// Worker parts only: the rows `[out_row_start, out_row_end)` of this part that hold this
    /// range's tokens (each unit is its own segment there; see `pack` docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_row_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_row_end: Option<u64>,
}

/// The index object (contract 4).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Index {
    pub version: u32,
    pub tool: String,
    /// The tool build (version, commit, features) that wrote this file: provenance, never
    /// compared as a setting. Absent in indexes written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_build: Option<crate::build_info::ToolBuild>,
    pub kind: Kind,
    /// `parquet`, `mds` or `megatron`.
    pub format: ShardFormat,
    pub seq_len: u64,
    /// `uint32` or `uint16`.
    pub dtype: Dtype,
    pub tokenizer: TokenizerInfo,
    pub shards: Vec<ShardEntry>,
    pub totals: Totals,
    pub provenance: Vec<ProvenanceRange>,
    pub manifest: Option<String>,
    pub lock_sha256: Option<String>,
    pub complete: bool,
    /// `pack` (and `merge`, `decontam --drop` of its output): the settings it was written
    /// with, the resume fingerprint. Serialised before `extra`, whose keys all sort after
    /// `"args"`, so the key order is the one the untyped index had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<PackSettings>,
    /// Any other keys (`resume` cursor, `eos_choice`, ...), kept verbatim.
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

impl Index {
    /// `dlm-data <version>`, the `tool` value writers put in.
    pub fn tool_name() -> String {
        format!("dlm-data {}", env!("CARGO_PKG_VERSION"))
    }

    /// How this output's shards are stored: its format and dtype, and the zstd level its
    /// settings recorded (an index without them: the level before `--zstd-level` existed) —
    /// what a rewrite of one of its shards writes with.
    pub fn codec(&self) -> super::ShardCodec {
        super::ShardCodec {
            format: self.format,
            dtype: self.dtype,
            zstd_level: self
                .args
                .as_ref()
                .map_or(super::parquet::LEGACY_ZSTD_LEVEL, |a| a.packing.zstd()),
        }
    }

    /// The reader of this output's shards (its format and dtype).
    pub fn reader(&self) -> Box<dyn ShardReader> {
        self.format.reader(self.dtype)
    }

    /// Shard `k` of the output in `dir`, its row count checked against the index.
    pub fn read_shard(&self, dir: &Path, k: usize) -> Result<RowBatch> {
        let sh = &self.shards[k];
        let b = self.reader().read(dir, sh)?;
        anyhow::ensure!(
            b.rows() as u64 == sh.rows,
            "{}: {} rows, index.json says {}",
            dir.join(&sh.file).display(),
            b.rows(),
            sh.rows
        );
        Ok(b)
    }
}
