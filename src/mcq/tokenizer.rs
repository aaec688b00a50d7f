//! Loads an HF `tokenizer.json` (file or directory) with its EOS token, and describes it for
//! `index.json` (path, sha256, eos, vocab) so a reader can decode the shards back.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use tokenizers::Tokenizer;

use crate::added_text::ranged::Ranged;
use crate::added_text::SpecialTokensInText;
use crate::shards::index::TokenizerInfo;

pub struct LoadedTokenizer {
    pub tok: Tokenizer,
    pub info: TokenizerInfo,
    /// The added-token tries: question and option text stays text.
    pub ranged: Ranged,
    /// `--special-tokens-in-text`.
    pub mode: SpecialTokensInText,
    /// The diffusion mask token (`--mask-token`, else tokenizer_config.json `mask_token`).
    pub mask: Option<(String, u32)>,
}

/// `PATH` is `tokenizer.json` or a directory holding it (and `tokenizer_config.json`).
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    }
}

/// The `eos_token` of `tokenizer_config.json` beside `file` (string or `{content}` form).
fn config_eos(file: &Path) -> Option<String> {
    config_token(file, "eos_token")
}

/// Token `key` of `tokenizer_config.json` beside `file` (string or `{content}` form).
fn config_token(file: &Path, key: &str) -> Option<String> {
    let cfg = file.with_file_name("tokenizer_config.json");
    let text = std::fs::read_to_string(cfg).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match v.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Load the tokenizer; EOS from `eos_override`, else tokenizer_config.json; the mask from
/// `mask_override`, else tokenizer_config.json's `mask_token` when in the vocabulary.
pub fn load(
    path: &Path,
    eos_override: Option<&str>,
    mask_override: Option<&str>,
    mode: SpecialTokensInText,
) -> Result<LoadedTokenizer> {
    let file = resolve(path);
    let tok = Tokenizer::from_file(&file)
        .map_err(|e| anyhow!("loading tokenizer {}: {e}", file.display()))?;
    let eos_token = match eos_override {
        Some(e) => e.to_string(),
        None => config_eos(&file).ok_or_else(|| {
            crate::error::usage(format!(
                "tokenizer {}: no eos_token in tokenizer_config.json beside it; pass --eos-token",
                file.display()
            ))
        })?,
    };
    let eos_id = tok.token_to_id(&eos_token).ok_or_else(|| {
        crate::error::usage(format!(
            "tokenizer {}: EOS token {eos_token:?} is not in the vocabulary",
            file.display()
        ))
    })?;
    let sha256 =
        crate::util::sha256_file(&file).with_context(|| format!("hashing {}", file.display()))?;
    let vocab_size = tok.get_vocab_size(true) as u32;
    let mask = match mask_override {
        Some(m) => Some((
            m.to_string(),
            tok.token_to_id(m).ok_or_else(|| {
                crate::error::usage(format!(
                    "tokenizer {}: --mask-token {m:?} is not in the vocabulary",
                    file.display()
                ))
            })?,
        )),
        None => config_token(&file, "mask_token").and_then(|m| tok.token_to_id(&m).map(|i| (m, i))),
    };
    Ok(LoadedTokenizer {
        ranged: Ranged::new(&tok)?,
        mode,
        mask,
        tok,
        info: TokenizerInfo {
            path: crate::shards::index::abs_path(&file),
            sha256,
            eos_token,
            eos_id,
            vocab_size,
        },
    })
}
