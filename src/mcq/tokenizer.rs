//! Loads an HF `tokenizer.json` (file or directory) with its EOS and BOS tokens (the rule of
//! [`crate::doc_tokens`], shared with pack), and describes it for
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
    /// BOS prepended to each SFT row (part of its prompt), by [`crate::doc_tokens`]'s rule.
    pub bos: Option<(String, u32)>,
}

/// `PATH` is `tokenizer.json` or a directory holding it (and `tokenizer_config.json`).
pub fn resolve(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    }
}

/// Load the tokenizer; EOS and BOS by the rule pack uses ([`crate::doc_tokens`], logged);
/// the mask from `mask_override`, else tokenizer_config.json's `mask_token` when in the
/// vocabulary.
pub fn load(
    path: &Path,
    flags: &crate::doc_tokens::Flags,
    mask_override: Option<&str>,
    mode: SpecialTokensInText,
) -> Result<LoadedTokenizer> {
    let file = resolve(path);
    let tok = Tokenizer::from_file(&file)
        .map_err(|e| anyhow!("loading tokenizer {}: {e}", file.display()))?;
    let boundaries = crate::doc_tokens::resolve(&file, flags, |t| tok.token_to_id(t))?;
    tracing::info!("tokenizer {}: {}", file.display(), boundaries.describe());
    let (eos_token, eos_id) = boundaries
        .eos
        .clone()
        .ok_or_else(|| crate::error::usage("mcq needs an EOS token to end each SFT row"))?;
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
        None => crate::doc_tokens::config_token(&file, "mask_token")
            .and_then(|m| tok.token_to_id(&m).map(|i| (m, i))),
    };
    Ok(LoadedTokenizer {
        bos: boundaries.bos,
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
