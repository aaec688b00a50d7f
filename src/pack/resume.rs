//! Resume after a crash or kill -9: the index is the progress journal. After each durable
//! shard the writer records the shard and a [`Cursor`] — the input position where the next
//! shard starts plus every counter at that point — so a rerun with the same arguments
//! re-opens that input at that row, skips the tokens already packed, and writes the
//! remaining shards byte-identically to an uninterrupted run.
//!
//! A rerun refuses an output directory written with different arguments (the `args`
//! fingerprint), re-verifies the recorded shards (size of each, sha256 of the last; found in
//! the staging directory `OUT/.incomplete/`, or in place for an output written before shards
//! were staged); the caller's [`crate::shards::outdir::Claim`] then removes the leftovers of
//! the interrupted write (temp files, the one shard renamed before it was journaled) and
//! refuses anything else.
//! With `--force` a foreign or unreadable index counts as no index (a fresh start whose claim
//! may clear dlm-data's own files).

use std::path::Path;

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

use crate::shards::index::{Index, ProvenanceRange, Totals};
use crate::shards::settings::PackSettings;

/// Where the next shard starts, and the state to restore there.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cursor {
    /// Index into this worker's unit list.
    pub unit: usize,
    /// Row of that unit holding the document the next shard starts in.
    pub row: u64,
    /// Tokens of that document (BOS/EOS included) already packed.
    pub skip_tokens: u64,
    /// Shards written so far.
    pub shards: usize,
    pub totals: Totals,
    pub provenance: Vec<ProvenanceRange>,
    /// Tokens taken per source (budgets).
    pub source_tokens: Vec<u64>,
    /// Rows emitted so far (before shuffling).
    pub rows_emitted: u64,
    /// Whether the cursor's unit already has its provenance range open.
    pub unit_open: bool,
}

/// What a rerun finds in the output directory.
pub enum Found {
    /// Nothing usable: start from the beginning.
    Fresh,
    /// Finished already with the same arguments.
    Complete(Box<Index>),
    /// Interrupted: continue at the cursor.
    Resume(Box<Index>, Cursor),
}

/// The zstd level a rerun without `--zstd-level` continues at: the recorded run's (`prev`),
/// when its settings differ from `args` in nothing else. An output begun at another level — or
/// before the flag existed (no `zstd_level`: level 3) — is then resumed to the bytes its own
/// level gives, or found complete, instead of refused as a different command.
fn adopt_recorded_zstd_level(dir: &Path, prev: &PackSettings, args: &mut PackSettings) {
    let mut probe = args.clone();
    probe.packing.zstd_level = prev.packing.zstd_level;
    if probe == *prev && prev.packing.zstd_level != args.packing.zstd_level {
        tracing::info!(
            "{}: continuing at the zstd level it was written with ({}); --zstd-level sets another",
            dir.display(),
            prev.packing.zstd()
        );
        args.packing.zstd_level = prev.packing.zstd_level;
    }
}

/// Inspect `dir` for a previous run with fingerprint `args`. With `adopt_level` (no
/// `--zstd-level` given) `args` first takes the recorded zstd level where that is all that
/// differs ([`adopt_recorded_zstd_level`]), from the one read of the index.
pub fn inspect(
    dir: &Path,
    args: &mut PackSettings,
    force: bool,
    adopt_level: bool,
) -> Result<Found> {
    let p = crate::shards::index::index_path(dir);
    if !p.exists() {
        return Ok(Found::Fresh);
    }
    let idx = match crate::shards::index::load(dir) {
        Ok(i) => i,
        Err(_) if force => return Ok(Found::Fresh),
        Err(e) => return Err(e),
    };
    if let (true, Some(prev)) = (adopt_level, &idx.args) {
        adopt_recorded_zstd_level(dir, prev, args);
    }
    let args = &*args;
    let prev = idx.args.as_ref();
    if prev != Some(args) && force {
        return Ok(Found::Fresh);
    }
    // A run that committed nothing (it failed before its first shard) locks nothing: the
    // rerun starts afresh and its claim replaces that run's index.
    if prev != Some(args)
        && !idx.complete
        && idx.shards.is_empty()
        && idx.tool.starts_with("dlm-data")
    {
        tracing::info!(
            "{}: an earlier run with other arguments committed no shard; starting afresh",
            p.display()
        );
        return Ok(Found::Fresh);
    }
    if prev != Some(args) {
        let recorded = serde_json::to_value(prev).unwrap_or_default();
        let now = serde_json::to_value(args).unwrap_or_default();
        return Err(crate::error::usage(format!(
            "{} was written by a different pack command; differing from the recorded run: {}. \
             Use a new --out, rerun with the recorded arguments, or --force to replace dlm-data's own files there",
            p.display(),
            crate::util::json_differences(&recorded, &now).join("; ")
        )));
    }
    if idx.complete {
        return Ok(Found::Complete(Box::new(idx)));
    }
    let cursor: Cursor = match idx.extra.get("resume") {
        Some(v) => serde_json::from_value(v.clone())?,
        None => bail!("{}: incomplete index without a resume cursor", p.display()),
    };
    if cursor.shards != idx.shards.len() {
        bail!(
            "{}: resume cursor says {} shards, index lists {}",
            p.display(),
            cursor.shards,
            idx.shards.len()
        );
    }
    for (k, s) in idx.shards.iter().enumerate() {
        // Staged until the output is complete (an older output: in place).
        let f = crate::shards::staged::locate(dir, &s.file).unwrap_or_else(|| dir.join(&s.file));
        let len = std::fs::metadata(&f).map(|m| m.len()).unwrap_or(u64::MAX);
        if len != s.bytes {
            bail!(
                "{}: recorded shard {} is missing or has the wrong size; remove {} and start again",
                p.display(),
                s.file,
                dir.display()
            );
        }
        if k + 1 == idx.shards.len() && crate::util::sha256_file(&f)? != s.sha256 {
            bail!(
                "{}: shard {} does not match its sha256",
                p.display(),
                s.file
            );
        }
    }
    Ok(Found::Resume(Box::new(idx), cursor))
}
