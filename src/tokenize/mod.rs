//! The tokenizer library `pack` (and `mcq`, the teacher's prompts through the same rules)
//! encodes with: load any HF `tokenizer.json`, choose EOS (and optional BOS), and encode
//! documents in parallel with ids identical to Python `tokenizers`
//! (`encode(text, add_special_tokens=False)`). One folder per stage, as in the crate:
//! added-token split ([`added`], [`ranged`]) → normalizer and the composer ([`fast`]) →
//! [`pre_tokenize`] → [`bpe`] (the model, its merges, the word cache levels, the shared word
//! table and its prefault thread); [`json`] the typed tokenizer.json parse.
//!
//! Encoding goes through [`fast::FastTokenizer`] when it reproduces the tokenizer exactly
//! (byte-level BPE of the GPT-2 / Llama-3 / Qwen / o200k / DeepSeek shapes, SentencePiece BPE of
//! the Llama-2 / Mistral / Phi-3 / Gemma shapes, with their added tokens); any other shape goes
//! through the `tokenizers` crate's `encode_fast` (no offsets). [`DocTokenizer::path`] says
//! which, and why, for the log and index.json.
//!

pub use crate::added_text::trie as added;
pub mod bpe;
pub mod fast;
pub mod files;
pub mod json;
pub mod normalize;
pub mod pre_tokenize;
pub use crate::added_text::ranged;
pub use pre_tokenize::{gpt2, regex, unicode};

use std::path::Path;
use std::str::FromStr;

use anyhow::{anyhow, Context, Result};
use rayon::prelude::*;
use tokenizers::Tokenizer;

use fast::FastTokenizer;
use ranged::Ranged;

use crate::added_text::{Hit, SpecialTokensInText};

pub use files::EOS_CANDIDATES;

/// A loaded tokenizer with the document-boundary policy.
pub struct DocTokenizer {
    /// The `tokenizers` crate's tokenizer: loaded only when the fast path does not apply.
    pub inner: Option<Tokenizer>,
    /// tokenizer.json and tokenizer_config.json, read once (the mask and pad rules).
    pub files: files::TokenizerFiles,
    pub sha256: String,
    pub eos: Option<(String, u32)>,
    pub bos: Option<(String, u32)>,
    /// Where the EOS came from, for the log and the index.
    pub eos_choice: String,
    /// Where the BOS came from (logged).
    pub bos_choice: String,
    pub vocab_size: u32,
    fast: Option<FastTokenizer>,
    /// Why the fast path does not apply (None when it does).
    pub fast_refusal: Option<String>,
    /// What added-token text in documents becomes (`--special-tokens-in-text`).
    pub mode: SpecialTokensInText,
    /// The diffusion mask token (`--mask-token`, else tokenizer_config.json `mask_token`):
    /// never produced from text, in any mode.
    pub mask: Option<(String, u32)>,
    /// The crate path's added-token tries (None on the fast path).
    ranged: Option<Ranged>,
}

/// One document's ids and the marker added-token contents found in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    pub hits: Vec<Hit>,
}

/// How `pack` loads its tokenizer: the document-boundary flags (one rule for every command:
/// [`crate::tokenize::files`]) and pack's own.
#[derive(Debug, Clone, Default)]
pub struct BoundaryFlags {
    /// `--eos-token`, `--no-eos`, `--bos`, `--bos-token`, `--no-bos`.
    pub boundary: crate::tokenize::files::Flags,
    /// Force the `tokenizers` crate path.
    pub no_fast: bool,
    /// `--special-tokens-in-text`.
    pub mode: SpecialTokensInText,
    /// `--mask-token` (else tokenizer_config.json `mask_token`, when in the vocabulary).
    pub mask_token: Option<String>,
}

impl BoundaryFlags {
    /// No EOS appended (tests and tools that want the bare ids).
    pub fn no_eos() -> BoundaryFlags {
        BoundaryFlags {
            boundary: crate::tokenize::files::Flags {
                no_eos: true,
                ..Default::default()
            },
            ..BoundaryFlags::default()
        }
    }
}

impl DocTokenizer {
    /// The tokenizer.json read ([`files::TokenizerFiles::json`]).
    pub fn json_path(&self) -> &Path {
        &self.files.json
    }

    pub fn load(arg: &Path, flags: &BoundaryFlags) -> Result<DocTokenizer> {
        let files = files::TokenizerFiles::open(arg);
        let json_path = files.json.clone();
        if !json_path.is_file() {
            return Err(crate::error::usage(format!(
                "--tokenizer {}: no tokenizer.json there",
                arg.display()
            )));
        }
        let text = std::fs::read_to_string(&json_path)
            .with_context(|| format!("reading {}", json_path.display()))?;
        // The fast path reads the file itself (a typed borrowed parse, ~6x quicker than the
        // crate's load); the crate is loaded only for the shapes the fast path refuses.
        let (fast, fast_refusal) = if flags.no_fast {
            (None, Some("--no-fast-tokenizer".to_string()))
        } else {
            // The crate's own deserializers (used for the sections the fast path checks) can
            // panic on a malformed file (e.g. its DecoderWrapper's `expect`): an error instead.
            let what = json_path.display().to_string();
            match crate::util::no_panic(&what, || FastTokenizer::from_json(&text)) {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            }
        };
        let inner = match fast {
            Some(_) => None,
            None => Some(crate::util::no_panic(
                &json_path.display().to_string(),
                || {
                    Tokenizer::from_str(&text)
                        .map_err(|e| anyhow!("{}: cannot load tokenizer: {e}", json_path.display()))
                },
            )?),
        };
        let sha256 = crate::util::sha256_hex(text.as_bytes());
        let lookup = |t: &str| match (&fast, &inner) {
            (Some(f), _) => f.token_to_id(t),
            (None, Some(c)) => c.token_to_id(t),
            (None, None) => None,
        };
        let files::Boundaries {
            eos,
            eos_choice,
            bos,
            bos_choice,
        } = files.boundaries(&flags.boundary, lookup)?;
        let mask = files.mask(flags.mask_token.as_deref(), lookup)?;
        let ranged = match &inner {
            Some(c) => Some(Ranged::new(c)?),
            None => None,
        };
        let vocab_size = match (&fast, &inner) {
            (Some(f), _) => f.vocab_size as u32,
            (None, Some(c)) => c.get_vocab_size(true) as u32,
            (None, None) => 0,
        };
        Ok(DocTokenizer {
            inner,
            files,
            sha256,
            eos,
            bos,
            eos_choice,
            bos_choice,
            vocab_size,
            fast,
            fast_refusal,
            mode: flags.mode,
            mask,
            ranged,
        })
    }

    /// The content of added token `id` (for counts and messages).
    pub fn token_name(&self, id: u32) -> String {
        match (&self.fast, &self.ranged) {
            (Some(f), _) => f.tries.name(id),
            (None, Some(r)) => r.tries.name(id),
            (None, None) => format!("[{id}]"),
        }
    }

    /// A document's ids under `--special-tokens-in-text` (no BOS/EOS), with the marker
    /// added-token contents found in it. Errors (to be prefixed with the file and row): in
    /// `refuse` mode, any such content; in `split` mode, the mask token's; in any mode, a mask
    /// id among the ids.
    pub fn encode_data(&self, text: &str) -> Result<Encoded> {
        let plain = self.mode != SpecialTokensInText::Split;
        let mut hits = Vec::new();
        let ids = match (&self.fast, &self.ranged, &self.inner) {
            (Some(f), _, _) => f.encode_mode(text, plain, &mut hits),
            (None, Some(r), Some(c)) => r.encode(c, text, &[0..text.len()], plain, &mut hits)?,
            _ => anyhow::bail!("no tokenizer loaded"),
        };
        self.check(text, &ids, &hits)?;
        Ok(Encoded { ids, hits })
    }

    /// The policy checks of [`Self::encode_data`].
    pub fn check(&self, text: &str, ids: &[u32], hits: &[Hit]) -> Result<()> {
        crate::added_text::check_policy(self.mode, self.mask.as_ref(), text, ids, hits, |i| {
            self.token_name(i)
        })
    }

    /// Size the fast path's shared word cache for `input_bytes` of input files, unless
    /// `tuning` sets its size, and fault its pages in ahead when `tuning` says so (call
    /// before the first document; see `shared_words`).
    pub fn size_word_cache(&self, input_bytes: u64, tuning: crate::tuning::WordCacheTuning) {
        if let Some(f) = &self.fast {
            let words = tuning.words.unwrap_or_else(|| {
                bpe::shared_words::SharedWords::words_for_input(input_bytes, f.bpe.is_byte_level())
            });
            f.bpe.size_shared_cache(words, tuning.prefault);
        }
    }

    /// True when the exact fast path is in use.
    pub fn is_fast(&self) -> bool {
        self.fast.is_some()
    }

    /// The path this tokenizer takes: "exact fast …: shape" or "tokenizers crate (reason)".
    pub fn path(&self) -> String {
        match (&self.fast, &self.fast_refusal) {
            (Some(f), _) => f.describe.clone(),
            (None, Some(r)) => format!("tokenizers crate ({r})"),
            (None, None) => "tokenizers crate".to_string(),
        }
    }

    /// Ids of `text` without special tokens (Python: `encode(text, add_special_tokens=False)`).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        if let Some(f) = &self.fast {
            return Ok(f.encode(text));
        }
        self.encode_crate(text)
    }

    /// The id of token `t` (the crate's `token_to_id`: added tokens, then the model's).
    pub fn token_to_id(&self, t: &str) -> Option<u32> {
        match (&self.fast, &self.inner) {
            (Some(f), _) => f.token_to_id(t),
            (None, Some(c)) => c.token_to_id(t),
            (None, None) => None,
        }
    }

    /// The `tokenizers` crate path.
    fn encode_crate(&self, text: &str) -> Result<Vec<u32>> {
        let inner = self
            .inner
            .as_ref()
            .context("the tokenizers crate is not loaded (fast path in use)")?;
        let enc = inner
            .encode_fast(text, false)
            .map_err(|e| anyhow!("tokenizer: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// A document's full token sequence: `[BOS] ids [EOS]`, under `--special-tokens-in-text`.
    pub fn encode_doc(&self, text: &str) -> Result<Encoded> {
        let mut e = self.encode_data(text)?;
        if let Some((_, b)) = &self.bos {
            e.ids.insert(0, *b);
        }
        if let Some((_, t)) = &self.eos {
            e.ids.push(*t);
        }
        Ok(e)
    }

    /// Encode many documents in parallel (rayon), results (each its own) in input order.
    pub fn encode_docs(&self, texts: &[&str]) -> Vec<Result<Encoded>> {
        texts.par_iter().map(|t| self.encode_doc(t)).collect()
    }
}
