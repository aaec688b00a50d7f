//! `inspect`'s flags resolved once into [`InspectSettings`]: PATH made local (a committed
//! bucket output is read from a local copy of its objects) and checked, the record bound. The
//! readers ([`super::shards`], [`super::records`]) take this value, never the clap struct.

use std::path::PathBuf;

use anyhow::Result;

use super::InspectArgs;

/// One `inspect`, resolved.
pub struct InspectSettings {
    /// PATH, local.
    pub path: PathBuf,
    /// Rows (records) printed decoded, from `from` on.
    pub rows: usize,
    pub from: u64,
    pub tokenizer: Option<PathBuf>,
    /// Characters shown per segment (0: no limit).
    pub chars: usize,
    pub json: bool,
    /// The largest record of prompts.jsonl / distilled.json read (`--max-record-bytes`).
    pub max_record_bytes: u64,
    pub bound: crate::bounded::Bound,
    /// distilled.json: the generated position whose top-k is shown.
    pub position: Option<usize>,
}

impl InspectSettings {
    pub fn resolve(args: &InspectArgs) -> Result<InspectSettings> {
        let path = crate::storage::materialize::local_copy(&args.path, "PATH")?;
        crate::lock::require_utf8("PATH", &path)?;
        Ok(InspectSettings {
            path,
            rows: args.rows,
            from: args.from,
            tokenizer: args.tokenizer.clone(),
            chars: args.chars,
            json: args.json,
            max_record_bytes: args.max_record_bytes,
            bound: crate::bounded::Bound::new(args.max_record_bytes, "--max-record-bytes"),
            position: args.position,
        })
    }

    /// Whether record `k` is printed.
    pub fn shown(&self, k: usize) -> bool {
        (self.from..self.from.saturating_add(self.rows as u64)).contains(&(k as u64))
    }
}
