//! A tokenizer's files, read once: `tokenizer.json` (given as the file or its directory) and
//! the `tokenizer_config.json` beside it, typed ([`TokenizerConfig`]); and the rules on them
//! that pack, mcq, decontam, inspect and the teacher share — the tokens that bound a document
//! (EOS after it, BOS before it), the diffusion mask, the pad — so no two stages ever disagree
//! on what ends (or starts) a sequence.
//!
//! EOS: `--no-eos` (pack) → none; `--eos-token T`; else tokenizer_config.json `eos_token`; else
//! the first of [`EOS_CANDIDATES`] the tokenizer knows; else an error asking for `--eos-token`.
//! BOS: `--no-bos` → none; `--bos-token T`; `--bos` (pack) → tokenizer_config.json `bos_token`;
//! else tokenizer_config.json `add_bos_token: true` → its `bos_token` (what `transformers`
//! prepends); else none. Every named token must be in the vocabulary.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde_json::Value;

/// Special tokens tried, in order, when neither `--eos-token` nor tokenizer_config.json names one.
pub const EOS_CANDIDATES: &[&str] = &["<|endoftext|>", "</s>", "<eos>", "<|end_of_text|>"];

/// The boundary flags a command was given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Flags {
    pub eos_token: Option<String>,
    pub no_eos: bool,
    /// pack's `--bos`: tokenizer_config.json's bos_token, whatever add_bos_token says.
    pub bos: bool,
    pub bos_token: Option<String>,
    pub no_bos: bool,
}

/// The resolved boundary tokens, each with where it came from (logged, recorded by pack).
#[derive(Debug, Clone, PartialEq)]
pub struct Boundaries {
    pub eos: Option<(String, u32)>,
    pub eos_choice: String,
    pub bos: Option<(String, u32)>,
    pub bos_choice: String,
}

impl Boundaries {
    /// `EOS "</s>" (id 2, from …), BOS "<s>" (id 1, from …)`, for the log.
    pub fn describe(&self) -> String {
        let one = |t: &Option<(String, u32)>, choice: &str| match t {
            Some((t, i)) => format!("{t:?} (id {i}, from {choice})"),
            None => format!("none ({choice})"),
        };
        format!(
            "EOS {}, BOS {}",
            one(&self.eos, &self.eos_choice),
            one(&self.bos, &self.bos_choice)
        )
    }
}

/// `PATH` is `tokenizer.json` or a directory holding it (and `tokenizer_config.json`).
pub fn locate(path: &Path) -> PathBuf {
    if path.is_dir() {
        path.join("tokenizer.json")
    } else {
        path.to_path_buf()
    }
}

/// A token field of tokenizer_config.json: a string or `{"content": string}`.
fn token_str(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) => m.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// tokenizer_config.json, typed: the fields this tool reads (a token field that is neither a
/// string nor `{"content": string}` reads as absent here; the teacher's checked open names it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TokenizerConfig {
    pub eos_token: Option<String>,
    pub bos_token: Option<String>,
    /// `--pad-last`'s pad (a plain string only, as `transformers` writes it).
    pub pad_token: Option<String>,
    pub mask_token: Option<String>,
    pub add_bos_token: bool,
    /// The whole object (the teacher's chat template and its checks read it).
    pub raw: Value,
}

impl TokenizerConfig {
    pub fn from_value(raw: Value) -> TokenizerConfig {
        TokenizerConfig {
            eos_token: token_str(raw.get("eos_token")),
            bos_token: token_str(raw.get("bos_token")),
            pad_token: raw
                .get("pad_token")
                .and_then(|p| p.as_str().map(str::to_string)),
            mask_token: token_str(raw.get("mask_token")),
            add_bos_token: raw
                .get("add_bos_token")
                .and_then(|b| b.as_bool())
                .unwrap_or(false),
            raw,
        }
    }
}

/// `tokenizer.json`'s path and the `tokenizer_config.json` beside it, read once.
#[derive(Debug, Clone)]
pub struct TokenizerFiles {
    /// tokenizer.json.
    pub json: PathBuf,
    /// tokenizer_config.json beside it (whether or not it exists).
    pub config_path: PathBuf,
    /// None: no tokenizer_config.json, or (in [`TokenizerFiles::open`]) not a JSON object.
    pub config: Option<TokenizerConfig>,
}

impl TokenizerFiles {
    /// `path` (tokenizer.json or its directory) and its config, leniently: a config that is
    /// absent or not JSON reads as none (pack, mcq, decontam, inspect).
    pub fn open(path: &Path) -> TokenizerFiles {
        let json = locate(path);
        let config_path = json.with_file_name("tokenizer_config.json");
        let config = std::fs::read_to_string(&config_path)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .map(TokenizerConfig::from_value);
        TokenizerFiles {
            json,
            config_path,
            config,
        }
    }

    /// The teacher's directory, checked: a tokenizer_config.json there is read by `read` (the
    /// teacher's bounded reader) and must be valid JSON and an object (errors name the file).
    pub fn open_checked(
        dir: &Path,
        read: impl Fn(&Path) -> Result<String>,
    ) -> Result<TokenizerFiles> {
        let json = dir.join("tokenizer.json");
        let config_path = dir.join("tokenizer_config.json");
        let config = if config_path.is_file() {
            let text = read(&config_path)?;
            let raw: Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: invalid JSON", config_path.display()))?;
            if !raw.is_object() {
                anyhow::bail!("{}: not a JSON object", config_path.display());
            }
            Some(TokenizerConfig::from_value(raw))
        } else {
            None
        };
        Ok(TokenizerFiles {
            json,
            config_path,
            config,
        })
    }

    fn cfg(&self) -> Option<&TokenizerConfig> {
        self.config.as_ref()
    }

    /// The diffusion mask token: `--mask-token` (must be in the vocabulary), else the
    /// config's `mask_token` when the vocabulary has it.
    pub fn mask(
        &self,
        flag: Option<&str>,
        lookup: impl Fn(&str) -> Option<u32>,
    ) -> Result<Option<(String, u32)>> {
        match flag {
            Some(m) => Ok(Some((
                m.to_string(),
                lookup(m).ok_or_else(|| {
                    crate::error::usage(format!(
                        "--mask-token {m:?} is not in the vocabulary of {}",
                        self.json.display()
                    ))
                })?,
            ))),
            None => Ok(self
                .cfg()
                .and_then(|c| c.mask_token.clone())
                .and_then(|m| lookup(&m).map(|i| (m, i)))),
        }
    }

    /// The id `--pad-last` pads with: the config's `pad_token`, else `<|pad|>`, else `eos`.
    pub fn pad_id(&self, lookup: impl Fn(&str) -> Option<u32>, eos: Option<u32>) -> Option<u32> {
        self.cfg()
            .and_then(|c| c.pad_token.as_deref())
            .and_then(&lookup)
            .or_else(|| lookup("<|pad|>"))
            .or(eos)
    }

    /// Resolve EOS and BOS by the rule above; `lookup` gives a token's id.
    pub fn boundaries(
        &self,
        flags: &Flags,
        lookup: impl Fn(&str) -> Option<u32>,
    ) -> Result<Boundaries> {
        let tokenizer_json = self.json.as_path();
        let id = |t: &str, what: &str| -> Result<u32> {
            lookup(t).ok_or_else(|| {
                crate::error::usage(format!(
                    "{what} {t:?} is not in the vocabulary of {}",
                    tokenizer_json.display()
                ))
            })
        };
        let cfg_path = &self.config_path;
        let (eos, eos_choice) = if flags.no_eos {
            (None, "none (--no-eos)".to_string())
        } else if let Some(t) = &flags.eos_token {
            (
                Some((t.clone(), id(t, "--eos-token")?)),
                "--eos-token".to_string(),
            )
        } else if let Some(t) = self.cfg().and_then(|c| c.eos_token.clone()) {
            (
                Some((t.clone(), id(&t, "tokenizer_config.json eos_token")?)),
                "tokenizer_config.json eos_token".to_string(),
            )
        } else {
            match EOS_CANDIDATES
            .iter()
            .find_map(|t| lookup(t).map(|i| (t.to_string(), i)))
        {
            Some(p) => (Some(p), "special token found in tokenizer.json".to_string()),
            None => {
                return Err(crate::error::usage(format!(
                    "{}: no EOS token: no tokenizer_config.json eos_token and none of {EOS_CANDIDATES:?}; pass --eos-token TOKEN",
                    tokenizer_json.display()
                )))
            }
        }
        };
        let add_bos = self.cfg().is_some_and(|c| c.add_bos_token);
        let (bos, bos_choice) = if flags.no_bos {
            (None, "none (--no-bos)".to_string())
        } else if let Some(t) = &flags.bos_token {
            (
                Some((t.clone(), id(t, "--bos-token")?)),
                "--bos-token".to_string(),
            )
        } else if flags.bos || add_bos {
            let why = if flags.bos {
                "--bos"
            } else {
                "add_bos_token: true"
            };
            let t = self
                .cfg()
                .and_then(|c| c.bos_token.clone())
                .ok_or_else(|| {
                    crate::error::usage(format!(
                        "{why}: {} names no bos_token; pass --bos-token TOKEN{}",
                        cfg_path.display(),
                        if flags.bos { "" } else { " or --no-bos" }
                    ))
                })?;
            (
                Some((t.clone(), id(&t, "tokenizer_config.json bos_token")?)),
                format!("tokenizer_config.json bos_token ({why})"),
            )
        } else {
            (
                None,
                "none: tokenizer_config.json does not set add_bos_token".to_string(),
            )
        };
        Ok(Boundaries {
            eos,
            eos_choice,
            bos,
            bos_choice,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_with(config: Option<serde_json::Value>) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("tokenizer.json"), "{}").unwrap();
        if let Some(c) = config {
            std::fs::write(d.path().join("tokenizer_config.json"), c.to_string()).unwrap();
        }
        d
    }

    fn vocab(t: &str) -> Option<u32> {
        ["<s>", "</s>", "<|endoftext|>", "<pad>"]
            .iter()
            .position(|v| *v == t)
            .map(|i| i as u32)
    }

    #[test]
    fn one_rule_for_eos_and_bos() {
        let flags = Flags::default();
        // No config (falcon-7b): EOS found among the tokenizer's own special tokens; no BOS.
        let d = dir_with(None);
        let j = d.path().join("tokenizer.json");
        let b = TokenizerFiles::open(&j).boundaries(&flags, vocab).unwrap();
        assert_eq!(b.eos, Some(("<|endoftext|>".into(), 2)));
        assert_eq!(b.eos_choice, "special token found in tokenizer.json");
        assert_eq!(b.bos, None);
        // Mistral's config: add_bos_token true → its bos_token; eos from the config.
        let d = dir_with(Some(
            serde_json::json!({"add_bos_token": true, "bos_token": "<s>",
            "eos_token": {"content": "</s>"}}),
        ));
        let j = d.path().join("tokenizer.json");
        let b = TokenizerFiles::open(&j).boundaries(&flags, vocab).unwrap();
        assert_eq!(b.eos, Some(("</s>".into(), 1)));
        assert_eq!(b.bos, Some(("<s>".into(), 0)));
        assert!(b.bos_choice.contains("add_bos_token"), "{}", b.bos_choice);
        assert!(
            b.describe().contains("BOS \"<s>\" (id 0"),
            "{}",
            b.describe()
        );
        // --no-bos and --bos-token override; --eos-token too.
        let nb = Flags {
            no_bos: true,
            ..Flags::default()
        };
        assert_eq!(
            TokenizerFiles::open(&j).boundaries(&nb, vocab).unwrap().bos,
            None
        );
        let f = Flags {
            bos_token: Some("<pad>".into()),
            eos_token: Some("<|endoftext|>".into()),
            ..Flags::default()
        };
        let b = TokenizerFiles::open(&j).boundaries(&f, vocab).unwrap();
        assert_eq!(b.bos, Some(("<pad>".into(), 3)));
        assert_eq!(b.eos, Some(("<|endoftext|>".into(), 2)));
        // add_bos_token false (or absent) → no BOS; --bos asks for the config's bos_token.
        let d = dir_with(Some(
            serde_json::json!({"add_bos_token": false, "bos_token": "<s>",
            "eos_token": "</s>"}),
        ));
        let j = d.path().join("tokenizer.json");
        assert_eq!(
            TokenizerFiles::open(&j)
                .boundaries(&flags, vocab)
                .unwrap()
                .bos,
            None
        );
        let bos = Flags {
            bos: true,
            ..Flags::default()
        };
        assert_eq!(
            TokenizerFiles::open(&j)
                .boundaries(&bos, vocab)
                .unwrap()
                .bos,
            Some(("<s>".into(), 0))
        );
        // Errors name the token and the file.
        let e = TokenizerFiles::open(&j)
            .boundaries(
                &Flags {
                    eos_token: Some("<nope>".into()),
                    ..Flags::default()
                },
                vocab,
            )
            .unwrap_err()
            .to_string();
        assert!(e.contains("<nope>") && e.contains("tokenizer.json"), "{e}");
        let d = dir_with(Some(
            serde_json::json!({"add_bos_token": true, "eos_token": "</s>"}),
        ));
        let e = TokenizerFiles::open(&d.path().join("tokenizer.json"))
            .boundaries(&flags, vocab)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no bos_token") && e.contains("--no-bos"), "{e}");
        let e = TokenizerFiles::open(&d.path().join("tokenizer.json"))
            .boundaries(&flags, |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("</s>"), "{e}");
        let d = dir_with(None);
        let e = TokenizerFiles::open(&d.path().join("tokenizer.json"))
            .boundaries(&flags, |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no EOS token") && e.contains("--eos-token"),
            "{e}"
        );
    }

    #[test]
    fn the_files_are_read_once_and_typed_and_the_mask_and_pad_rules_hold() {
        // A directory or its tokenizer.json: the same files.
        let d = dir_with(Some(serde_json::json!({
            "eos_token": {"content": "</s>"}, "mask_token": "<pad>", "pad_token": "<s>",
            "add_bos_token": "yes"
        })));
        let by_dir = TokenizerFiles::open(d.path());
        let by_file = TokenizerFiles::open(&d.path().join("tokenizer.json"));
        assert_eq!(by_dir.json, by_file.json);
        let c = by_dir.config.as_ref().unwrap();
        assert_eq!(c.eos_token.as_deref(), Some("</s>"));
        assert!(
            !c.add_bos_token,
            "a non-boolean add_bos_token reads as false"
        );
        // Read once: the config's later removal changes nothing of what was opened.
        std::fs::remove_file(d.path().join("tokenizer_config.json")).unwrap();
        assert_eq!(by_dir.mask(None, vocab).unwrap(), Some(("<pad>".into(), 3)));
        assert_eq!(by_dir.pad_id(vocab, Some(1)), Some(0));
        let e = by_dir.mask(Some("<nope>"), vocab).unwrap_err().to_string();
        assert!(
            e.contains("--mask-token") && e.contains("tokenizer.json"),
            "{e}"
        );
        // No config: no mask; pad falls back to <|pad|> (absent here), then EOS.
        let none = TokenizerFiles::open(d.path());
        assert_eq!(none.config, None);
        assert_eq!(none.mask(None, vocab).unwrap(), None);
        assert_eq!(none.pad_id(vocab, Some(1)), Some(1));
        // Lenient for pack/mcq (not JSON → none); checked for the teacher (named).
        std::fs::write(d.path().join("tokenizer_config.json"), "{oops").unwrap();
        assert_eq!(TokenizerFiles::open(d.path()).config, None);
        let read = |p: &Path| Ok(std::fs::read_to_string(p)?);
        let e = TokenizerFiles::open_checked(d.path(), read)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("tokenizer_config.json") && e.contains("invalid JSON"),
            "{e}"
        );
        std::fs::write(d.path().join("tokenizer_config.json"), "[1]").unwrap();
        let e = TokenizerFiles::open_checked(d.path(), read)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a JSON object"), "{e}");
    }
}
