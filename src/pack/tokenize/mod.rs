//! The tokenizer side of `pack`: load any HF `tokenizer.json`, choose EOS (and optional BOS),
//! and encode documents in parallel with ids identical to Python `tokenizers`
//! (`encode(text, add_special_tokens=False)`).
//!
//! Encoding goes through [`fast::FastTokenizer`] when it reproduces the tokenizer exactly
//! (byte-level BPE of the GPT-2 / Llama-3 / Qwen / o200k / DeepSeek shapes, SentencePiece BPE of
//! the Llama-2 / Mistral / Phi-3 / Gemma shapes, with their added tokens); any other shape goes
//! through the `tokenizers` crate's `encode_fast` (no offsets). [`DocTokenizer::path`] says
//! which, and why, for the log and index.json.
//!
//! Layout, in pipeline order as in the crate: [`added`] (added-token split) → normalizer (in
//! [`fast`]) → pre-tokenizers [`gpt2`] / [`regex`] (over [`unicode`] classes) → [`bpe`].

pub mod added;
pub mod bpe;
pub mod fast;
pub mod gpt2;
pub mod regex;
pub mod unicode;

use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::{anyhow, Context, Result};
use rayon::prelude::*;
use tokenizers::Tokenizer;

use fast::FastTokenizer;

/// Special tokens tried, in order, when neither `--eos-token` nor tokenizer_config.json names one.
pub const EOS_CANDIDATES: &[&str] = &["<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"];

/// A loaded tokenizer with the document-boundary policy.
pub struct DocTokenizer {
    pub inner: Tokenizer,
    pub json_path: PathBuf,
    pub sha256: String,
    pub eos: Option<(String, u32)>,
    pub bos: Option<(String, u32)>,
    /// Where the EOS came from, for the log and the index.
    pub eos_choice: String,
    pub vocab_size: u32,
    fast: Option<FastTokenizer>,
    /// Why the fast path does not apply (None when it does).
    pub fast_refusal: Option<String>,
}

/// `tokenizer.json` for a file or directory argument.
pub fn resolve_json(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    }
}

/// `eos_token` / `bos_token` from tokenizer_config.json (string or `{"content": ...}`).
fn config_token(dir: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    match v.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Document boundary flags.
#[derive(Debug, Clone, Default)]
pub struct BoundaryFlags {
    pub eos_token: Option<String>,
    pub no_eos: bool,
    pub bos: bool,
    pub bos_token: Option<String>,
    /// Force the `tokenizers` crate path.
    pub no_fast: bool,
}

impl DocTokenizer {
    pub fn load(arg: &Path, flags: &BoundaryFlags) -> Result<DocTokenizer> {
        let json_path = resolve_json(arg);
        if !json_path.is_file() {
            return Err(crate::error::usage(format!(
                "--tokenizer {}: no tokenizer.json there",
                arg.display()
            )));
        }
        // The crate's load and the fast path's build read the same file: run them together.
        let text = std::fs::read_to_string(&json_path)
            .with_context(|| format!("reading {}", json_path.display()))?;
        let (inner, fast_pre) = rayon::join(
            || Tokenizer::from_str(&text),
            || (!flags.no_fast).then(|| FastTokenizer::from_json_without_added(&text)),
        );
        let inner =
            inner.map_err(|e| anyhow!("{}: cannot load tokenizer: {e}", json_path.display()))?;
        let sha256 = crate::util::sha256_hex(text.as_bytes());
        let dir = json_path.parent().unwrap_or(Path::new(".")).to_path_buf();
        let id = |t: &str, what: &str| -> Result<u32> {
            inner.token_to_id(t).ok_or_else(|| {
                crate::error::usage(format!(
                    "{what} {t:?} is not in the vocabulary of {}",
                    json_path.display()
                ))
            })
        };
        let (eos, eos_choice) = if flags.no_eos {
            (None, "none (--no-eos)".to_string())
        } else if let Some(t) = &flags.eos_token {
            (
                Some((t.clone(), id(t, "--eos-token")?)),
                "--eos-token".to_string(),
            )
        } else if let Some(t) = config_token(&dir, "eos_token") {
            (
                Some((t.clone(), id(&t, "tokenizer_config.json eos_token")?)),
                "tokenizer_config.json eos_token".to_string(),
            )
        } else {
            let found = EOS_CANDIDATES
                .iter()
                .find_map(|t| inner.token_to_id(t).map(|i| (t.to_string(), i)));
            match found {
                Some(p) => (Some(p), "special token found in tokenizer.json".to_string()),
                None => {
                    return Err(crate::error::usage(format!(
                        "{}: no EOS token: no tokenizer_config.json eos_token and none of {EOS_CANDIDATES:?}; pass --eos-token TOKEN (or --no-eos)",
                        json_path.display()
                    )))
                }
            }
        };
        let bos = if let Some(t) = &flags.bos_token {
            Some((t.clone(), id(t, "--bos-token")?))
        } else if flags.bos {
            let t = config_token(&dir, "bos_token").ok_or_else(|| {
                crate::error::usage(format!(
                    "--bos: {} names no bos_token; pass --bos-token TOKEN",
                    dir.join("tokenizer_config.json").display()
                ))
            })?;
            Some((t.clone(), id(&t, "tokenizer_config.json bos_token")?))
        } else {
            None
        };
        let vocab_size = inner.get_vocab_size(true) as u32;
        let (fast, fast_refusal) = match fast_pre {
            None => (None, Some("--no-fast-tokenizer".to_string())),
            Some(pre) => match pre.and_then(|mut f| f.attach_added(&inner).map(|_| f)) {
                Ok(f) => (Some(f), None),
                Err(e) => (None, Some(format!("{e:#}"))),
            },
        };
        Ok(DocTokenizer {
            inner,
            json_path,
            sha256,
            eos,
            bos,
            eos_choice,
            vocab_size,
            fast,
            fast_refusal,
        })
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

    /// The `tokenizers` crate path.
    pub fn encode_crate(&self, text: &str) -> Result<Vec<u32>> {
        let enc = self
            .inner
            .encode_fast(text, false)
            .map_err(|e| anyhow!("tokenizer: {e}"))?;
        Ok(enc.get_ids().to_vec())
    }

    /// A document's full token sequence: [BOS] ids [EOS].
    pub fn encode_doc(&self, text: &str) -> Result<Vec<u32>> {
        let mut ids = self.encode(text)?;
        if let Some((_, b)) = &self.bos {
            ids.insert(0, *b);
        }
        if let Some((_, e)) = &self.eos {
            ids.push(*e);
        }
        Ok(ids)
    }

    /// Encode many documents in parallel (rayon), results in input order.
    pub fn encode_docs(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        texts.par_iter().map(|t| self.encode_doc(t)).collect()
    }
}
