//! `OUT/index.json`: the one record of what a pack (or SFT) output holds — shards with their
//! checksums, totals, per-file provenance — read by `audit`, `decontam` and `merge`.
//!
//! Layout (cross-stage contract 4): a plain object `{"version": 1, "tool", "kind", "format",
//! "seq_len", "dtype", "tokenizer", "shards", "totals", "provenance", "manifest",
//! "lock_sha256", "complete"}`. For `--format mds` the file must also be a MosaicML Streaming
//! index (`{"version": 2, "shards": [...]}`), so the same object then sits under the extra key
//! `"dlm_data"`. [`load`] accepts both layouts.
//!
//! While a run is in progress the index is the progress journal: it is rewritten atomically
//! after every finished shard with `"complete": false` and a `"resume"` cursor; the last
//! write sets `"complete": true`. Consumers must refuse an index whose `complete` is false.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::settings::PackSettings;
use super::{Dtype, RowBatch, ShardFormat, ShardReader};

/// The file name of the index inside an output directory.
pub const INDEX_FILE: &str = "index.json";

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
    /// Absolute path of the tokenizer.json (see [`abs_path`]).
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

/// A path as index.json records it: absolute (symlinks resolved when it exists), so a reader
/// started from another working directory finds it.
pub fn abs_path(p: &Path) -> String {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Path of the index file in `dir`.
pub fn index_path(dir: &Path) -> PathBuf {
    dir.join(INDEX_FILE)
}

/// Parse an index from JSON text in either layout (plain, or MDS with `"dlm_data"`).
pub fn parse(text: &str, origin: &Path) -> Result<Index> {
    let v: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{}: not valid JSON", origin.display()))?;
    let obj = match v.get("dlm_data") {
        Some(inner) => inner.clone(),
        None => v,
    };
    let idx: Index = serde_json::from_value(obj)
        .with_context(|| format!("{}: not a dlm-data index", origin.display()))?;
    if idx.version != 1 {
        bail!(
            "{}: unsupported dlm-data index version {}",
            origin.display(),
            idx.version
        );
    }
    Ok(idx)
}

/// Read `dir/index.json` in either layout. Does not check `complete`; see [`load_complete`].
pub fn load(dir: &Path) -> Result<Index> {
    let p = index_path(dir);
    // A regular file only (a FIFO would block), and bounded (an index of a million shards is
    // ~300 MB).
    let bound = crate::bounded::Bound::new(1 << 30, "an index.json is at most that");
    let text = crate::bounded::read_regular_text(&p, bound)
        .with_context(|| format!("reading {}", p.display()))?;
    parse(&text, &p)
}

/// [`load`], failing when the output is not marked complete (an interrupted run).
pub fn load_complete(dir: &Path) -> Result<Index> {
    let idx = load(dir)?;
    if !idx.complete {
        bail!(
            "{}: output is incomplete (an interrupted run?): rerun the same command to resume",
            index_path(dir).display()
        );
    }
    Ok(idx)
}

/// Serialise the index for `dir` atomically. With `mds_shards` (the MosaicML shard entries),
/// writes the MDS layout `{"version": 2, "shards": mds_shards, "dlm_data": index}`.
pub fn save(dir: &Path, idx: &Index, mds_shards: Option<&[serde_json::Value]>) -> Result<()> {
    let text = to_json(idx, mds_shards)?;
    // A complete output carries its dataset card, written first: an index that says
    // complete never stands without it.
    if idx.complete {
        super::card::write(dir, idx)?;
    }
    crate::util::atomic_write(&index_path(dir), text.as_bytes())
}

/// The exact bytes [`save`] writes.
pub fn to_json(idx: &Index, mds_shards: Option<&[serde_json::Value]>) -> Result<String> {
    let mut text = match mds_shards {
        None => serde_json::to_string_pretty(idx)?,
        Some(shards) => {
            let v = serde_json::json!({
                "version": 2,
                "shards": shards,
                "dlm_data": idx,
            });
            serde_json::to_string_pretty(&v)?
        }
    };
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Index {
        Index {
            version: 1,
            tool: Index::tool_name(),
            kind: Kind::Pretrain,
            format: ShardFormat::Parquet,
            seq_len: 8,
            dtype: Dtype::U32,
            tokenizer: TokenizerInfo {
                path: "t/tokenizer.json".into(),
                sha256: "00".into(),
                eos_token: "<|endoftext|>".into(),
                eos_id: 0,
                vocab_size: 1000,
            },
            shards: vec![ShardEntry {
                file: "part-00000.parquet".into(),
                sha256: "ab".into(),
                bytes: 10,
                rows: 2,
                tokens: 16,
                extra_files: BTreeMap::new(),
            }],
            totals: Totals {
                rows: 2,
                tokens: 16,
                documents: 3,
                ..Default::default()
            },
            provenance: vec![],
            manifest: None,
            lock_sha256: None,
            complete: true,
            args: None,
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn roundtrip_both_layouts() {
        let d = tempfile::tempdir().unwrap();
        let idx = sample();
        save(d.path(), &idx, None).unwrap();
        assert_eq!(load(d.path()).unwrap(), idx);
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(index_path(d.path())).unwrap()).unwrap();
        assert_eq!(raw["totals"]["dropped_tail_tokens"], 0);
        assert_eq!(raw["manifest"], serde_json::Value::Null);

        let mds = vec![serde_json::json!({"format": "mds", "samples": 2})];
        save(d.path(), &idx, Some(&mds)).unwrap();
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(index_path(d.path())).unwrap()).unwrap();
        assert_eq!(raw["version"], 2);
        assert_eq!(raw["shards"][0]["format"], "mds");
        assert_eq!(load(d.path()).unwrap(), idx);
    }

    #[test]
    fn incomplete_is_refused_by_load_complete() {
        let d = tempfile::tempdir().unwrap();
        let mut idx = sample();
        idx.complete = false;
        save(d.path(), &idx, None).unwrap();
        assert!(load(d.path()).is_ok());
        let e = load_complete(d.path()).unwrap_err().to_string();
        assert!(e.contains("incomplete"), "{e}");
    }
}
