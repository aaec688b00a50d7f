//! The tokens that bound a document — EOS after it, BOS before it — resolved by one rule from
//! `tokenizer.json` and the `tokenizer_config.json` beside it, for `pack` and `mcq` alike, so
//! the two stages never disagree on what ends (or starts) a sequence.
//!
//! EOS: `--no-eos` (pack) → none; `--eos-token T`; else tokenizer_config.json `eos_token`; else
//! the first of [`EOS_CANDIDATES`] the tokenizer knows; else an error asking for `--eos-token`.
//! BOS: `--no-bos` → none; `--bos-token T`; `--bos` (pack) → tokenizer_config.json `bos_token`;
//! else tokenizer_config.json `add_bos_token: true` → its `bos_token` (what `transformers`
//! prepends); else none. Every named token must be in the vocabulary.

use std::path::Path;

use anyhow::Result;

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

/// tokenizer_config.json beside `tokenizer_json`, parsed (None: absent or not JSON).
fn config(tokenizer_json: &Path) -> Option<serde_json::Value> {
    let text =
        std::fs::read_to_string(tokenizer_json.with_file_name("tokenizer_config.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Token `key` of tokenizer_config.json beside `tokenizer_json` (string or `{"content": …}`).
pub fn config_token(tokenizer_json: &Path, key: &str) -> Option<String> {
    match config(tokenizer_json)?.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(str::to_string),
        _ => None,
    }
}

/// Resolve EOS and BOS for the tokenizer at `tokenizer_json`; `lookup` gives a token's id.
pub fn resolve(
    tokenizer_json: &Path,
    flags: &Flags,
    lookup: impl Fn(&str) -> Option<u32>,
) -> Result<Boundaries> {
    let id = |t: &str, what: &str| -> Result<u32> {
        lookup(t).ok_or_else(|| {
            crate::error::usage(format!(
                "{what} {t:?} is not in the vocabulary of {}",
                tokenizer_json.display()
            ))
        })
    };
    let cfg_path = tokenizer_json.with_file_name("tokenizer_config.json");
    let (eos, eos_choice) = if flags.no_eos {
        (None, "none (--no-eos)".to_string())
    } else if let Some(t) = &flags.eos_token {
        (
            Some((t.clone(), id(t, "--eos-token")?)),
            "--eos-token".to_string(),
        )
    } else if let Some(t) = config_token(tokenizer_json, "eos_token") {
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
    let add_bos = config(tokenizer_json)
        .and_then(|v| v.get("add_bos_token").and_then(|b| b.as_bool()))
        .unwrap_or(false);
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
        let t = config_token(tokenizer_json, "bos_token").ok_or_else(|| {
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
        let b = resolve(&j, &flags, vocab).unwrap();
        assert_eq!(b.eos, Some(("<|endoftext|>".into(), 2)));
        assert_eq!(b.eos_choice, "special token found in tokenizer.json");
        assert_eq!(b.bos, None);
        // Mistral's config: add_bos_token true → its bos_token; eos from the config.
        let d = dir_with(Some(
            serde_json::json!({"add_bos_token": true, "bos_token": "<s>",
            "eos_token": {"content": "</s>"}}),
        ));
        let j = d.path().join("tokenizer.json");
        let b = resolve(&j, &flags, vocab).unwrap();
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
        assert_eq!(resolve(&j, &nb, vocab).unwrap().bos, None);
        let f = Flags {
            bos_token: Some("<pad>".into()),
            eos_token: Some("<|endoftext|>".into()),
            ..Flags::default()
        };
        let b = resolve(&j, &f, vocab).unwrap();
        assert_eq!(b.bos, Some(("<pad>".into(), 3)));
        assert_eq!(b.eos, Some(("<|endoftext|>".into(), 2)));
        // add_bos_token false (or absent) → no BOS; --bos asks for the config's bos_token.
        let d = dir_with(Some(
            serde_json::json!({"add_bos_token": false, "bos_token": "<s>",
            "eos_token": "</s>"}),
        ));
        let j = d.path().join("tokenizer.json");
        assert_eq!(resolve(&j, &flags, vocab).unwrap().bos, None);
        let bos = Flags {
            bos: true,
            ..Flags::default()
        };
        assert_eq!(
            resolve(&j, &bos, vocab).unwrap().bos,
            Some(("<s>".into(), 0))
        );
        // Errors name the token and the file.
        let e = resolve(
            &j,
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
        let e = resolve(&d.path().join("tokenizer.json"), &flags, vocab)
            .unwrap_err()
            .to_string();
        assert!(e.contains("no bos_token") && e.contains("--no-bos"), "{e}");
        let e = resolve(&d.path().join("tokenizer.json"), &flags, |_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("</s>"), "{e}");
        let d = dir_with(None);
        let e = resolve(&d.path().join("tokenizer.json"), &flags, |_| None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no EOS token") && e.contains("--eos-token"),
            "{e}"
        );
    }
}
