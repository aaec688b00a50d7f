//! Reruns of `mcq` with the same arguments on unchanged inputs are no-ops: the SFT index
//! records the run's [`McqFingerprint`] (index.json `"mcq_args"`), and a rerun whose settings,
//! manifest path and prompts.jsonl (by sha256) match a complete journal leaves every file
//! untouched. Without `--tokenizer` there is no journal: the prompts are rebuilt (cheap) and
//! the file is rewritten only when its bytes would change.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::added_text::SpecialTokensInText;
use crate::shards::ShardFormat;

/// index.json key holding the settings.
pub const KEY: &str = "mcq_args";

/// Everything that changes mcq's output bytes, resolved (the same for every worker of a run:
/// the worker itself is `extra.mcq.worker`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct McqFingerprint {
    /// sha256 of the manifest file and of its lock (which pins each locked file's sha256).
    pub manifest_sha256: String,
    pub lock_sha256: String,
    pub seed: u64,
    pub prompt_template: String,
    pub answer_template: String,
    pub max_item_bytes: u64,
    pub tokenizer_sha256: String,
    pub eos_id: u32,
    pub bos: Option<(String, u32)>,
    pub mask: Option<(String, u32)>,
    pub special_tokens_in_text: SpecialTokensInText,
    pub seq_len: usize,
    pub format: ShardFormat,
    pub rows_per_shard: usize,
}

/// `Ok` when `sft_dir` holds the complete journal of a run with exactly these settings and
/// its files (and prompts.jsonl) are as recorded; else why not.
pub fn check(
    sft_dir: &Path,
    prompts: &Path,
    manifest_abs: &str,
    want: &McqFingerprint,
) -> Result<(), String> {
    let Some(idx) = crate::shards::outdir::own_index(sft_dir) else {
        return Err("no journal".into());
    };
    if !idx.complete {
        return Err("the recorded run did not finish".into());
    }
    let got: Option<McqFingerprint> = idx
        .extra
        .get(KEY)
        .and_then(|v| serde_json::from_value(v.clone()).ok());
    let Some(got) = got else {
        return Err("the recorded run has no mcq settings".into());
    };
    if &got != want {
        return Err("arguments or inputs differ".into());
    }
    if idx.manifest.as_deref() != Some(manifest_abs) {
        return Err("another manifest path".into());
    }
    let recorded = idx
        .extra
        .get("mcq")
        .and_then(|m| m.get("prompts_sha256"))
        .and_then(|v| v.as_str())
        .unwrap_or_default();
    match crate::util::sha256_file(prompts) {
        Ok(s) if s == recorded => {}
        _ => return Err("prompts.jsonl is missing or changed".into()),
    }
    for (k, s) in idx.shards.iter().enumerate() {
        let f = sft_dir.join(&s.file);
        let len = std::fs::metadata(&f).map(|m| m.len()).ok();
        if len != Some(s.bytes) {
            return Err(format!("shard {} is missing or resized", s.file));
        }
        // The last shard by content too (as pack's resume does).
        if k + 1 == idx.shards.len()
            && crate::util::sha256_file(&f).ok().as_ref() != Some(&s.sha256)
        {
            return Err(format!("shard {} does not match its sha256", s.file));
        }
        if let Some(name) = s.extra_files.keys().find(|n| !sft_dir.join(n).is_file()) {
            return Err(format!("{name} is missing"));
        }
    }
    Ok(())
}
