//! `OUT/index.json` (contract 4) as this stage writes and reads it: shards with sha256, bytes,
//! rows, tokens; totals; provenance ranges; tokenizer; lock hash; `complete`.
//!
//! Reading accepts both layouts of the contract: the plain object, and the MosaicML
//! Streaming index (`{"version": 2, "shards": [...]}`) carrying ours under `"dlm_data"`.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerInfo {
    pub path: String,
    pub sha256: String,
    pub eos_token: String,
    pub eos_id: u32,
    pub vocab_size: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardEntry {
    pub file: String,
    pub sha256: String,
    pub bytes: u64,
    pub rows: u64,
    pub tokens: u64,
    /// Other files of this shard (Megatron's `.idx`): relative name → sha256.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_files: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProvenanceRange {
    pub source: String,
    pub repo: String,
    pub commit: String,
    pub file: String,
    pub split: String,
    pub role: String,
    pub row_start: u64,
    pub row_end: u64,
    pub documents: u64,
    /// Worker parts only (pack): output rows holding this range.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_row_start: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_row_end: Option<u64>,
}

/// The `index.json` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShardIndex {
    pub version: u32,
    pub tool: String,
    pub kind: String,
    pub format: String,
    pub seq_len: u64,
    pub dtype: String,
    pub tokenizer: TokenizerInfo,
    pub shards: Vec<ShardEntry>,
    /// `rows, tokens, documents, dropped_tail_tokens, skipped_empty, skipped_filtered, ...`
    /// (other writers may add non-integer entries, kept as they are).
    pub totals: BTreeMap<String, serde_json::Value>,
    pub provenance: Vec<ProvenanceRange>,
    pub manifest: Option<String>,
    pub lock_sha256: Option<String>,
    pub complete: bool,
    /// Anything else a producer recorded (templates, seeds, ...), kept on rewrite.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl ShardIndex {
    pub fn total(&self, key: &str) -> u64 {
        self.totals
            .get(key)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }
}

/// `tool` field value.
pub fn tool_string() -> String {
    format!("dlm-data {}", env!("CARGO_PKG_VERSION"))
}

/// Load `dir/index.json` in either layout.
pub fn load(dir: &Path) -> Result<ShardIndex> {
    let path = dir.join("index.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let obj = match v.get("dlm_data") {
        Some(inner) => inner.clone(),
        None => v,
    };
    serde_json::from_value(obj)
        .map_err(|e| anyhow!("{}: not a dlm-data index: {e}", path.display()))
}

/// Write `dir/index.json` atomically (plain layout).
pub fn save(dir: &Path, index: &ShardIndex) -> Result<()> {
    let text = serde_json::to_string_pretty(index)?;
    crate::util::atomic_write(&dir.join("index.json"), text.as_bytes())
}
