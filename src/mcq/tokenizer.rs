//! Loads an HF `tokenizer.json` (file or directory) with its EOS and BOS tokens (the rule of
//! [`crate::tokenize::files`], shared with pack), and describes it for
//! `index.json` (path, sha256, eos, vocab) so a reader can decode the shards back.

use std::path::Path;

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
    /// BOS prepended to each SFT row (part of its prompt), by [`crate::tokenize::files`]'s rule.
    pub bos: Option<(String, u32)>,
}

/// Load the tokenizer; EOS and BOS by the rule pack uses ([`crate::tokenize::files`], logged);
/// the mask from `mask_override`, else tokenizer_config.json's `mask_token` when in the
/// vocabulary.
pub fn load(
    path: &Path,
    flags: &crate::tokenize::files::Flags,
    mask_override: Option<&str>,
    mode: SpecialTokensInText,
) -> Result<LoadedTokenizer> {
    let files = crate::tokenize::files::TokenizerFiles::open(path);
    let file = files.json.clone();
    let tok = Tokenizer::from_file(&file)
        .map_err(|e| anyhow!("loading tokenizer {}: {e}", file.display()))?;
    let boundaries = files.boundaries(flags, |t| tok.token_to_id(t))?;
    tracing::info!("tokenizer {}: {}", file.display(), boundaries.describe());
    let (eos_token, eos_id) = boundaries
        .eos
        .clone()
        .ok_or_else(|| crate::error::usage("mcq needs an EOS token to end each SFT row"))?;
    let sha256 =
        crate::util::sha256_file(&file).with_context(|| format!("hashing {}", file.display()))?;
    let vocab_size = tok.get_vocab_size(true) as u32;
    let mask = files.mask(mask_override, |t| tok.token_to_id(t))?;
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
