//! The pre-tokenizer section of tokenizer.json, parsed into the one shape the fast path runs
//! ([`PreTok`]): none, GPT-2's `ByteLevel(use_regex=true)`, `Split`s then `ByteLevel`, or
//! `Metaspace`; anything else refused with the reason (the caller keeps the crate). The
//! composer ([`crate::tokenize::fast`]) runs it.

use anyhow::{bail, Context, Result};

use super::regex::{self, Regex};
use super::split_matcher::SplitMatcher;
use super::unicode::ClassTable;
use crate::tokenize::json::ty;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::tokenize) enum PrependScheme {
    First,
    Always,
    Never,
}

pub(in crate::tokenize) enum PreTok {
    /// No pre-tokenizer: the normalized piece is one model word.
    None,
    /// `ByteLevel(use_regex=true)`, the GPT-2 regex hand-coded.
    Gpt2 { add_prefix_space: bool },
    /// `Split`s (Isolated) then `ByteLevel(use_regex=false, add_prefix_space=false)`.
    Splits {
        regexes: Vec<SplitMatcher>,
        table: ClassTable,
    },
    Metaspace {
        rep: char,
        prepend: PrependScheme,
        split: bool,
    },
}

/// The pre-tokenizer `pt` (None: absent) and whether it is byte-level, or why it is refused;
/// its description goes to `desc`.
pub(in crate::tokenize) fn parse_pre(
    pt: Option<&serde_json::Value>,
    desc: &mut Vec<String>,
) -> Result<(PreTok, bool)> {
    let list: Vec<&serde_json::Value> = match pt {
        None => vec![],
        Some(p) if ty(p) == "Sequence" => p
            .get("pretokenizers")
            .and_then(|x| x.as_array())
            .context("pre_tokenizer Sequence")?
            .iter()
            .collect(),
        Some(p) => vec![p],
    };
    Ok(match list.as_slice() {
        [] => (PreTok::None, false),
        [b] if ty(b) == "ByteLevel"
            && b.get("use_regex").and_then(|x| x.as_bool()) != Some(false) =>
        {
            let aps = b
                .get("add_prefix_space")
                .and_then(|x| x.as_bool())
                .unwrap_or(true);
            desc.push("ByteLevel regex (GPT-2)".into());
            (
                PreTok::Gpt2 {
                    add_prefix_space: aps,
                },
                true,
            )
        }
        [splits @ .., b] if !splits.is_empty() && ty(b) == "ByteLevel" => {
            let pre = parse_splits(splits, b)?;
            desc.push(format!("{} Split regex + ByteLevel", splits.len()));
            (pre, true)
        }
        [ms] if ty(ms) == "Metaspace" => {
            let pre = parse_metaspace(ms)?;
            if let PreTok::Metaspace { prepend, split, .. } = &pre {
                desc.push(format!("Metaspace(prepend {prepend:?}, split {split})"));
            }
            (pre, false)
        }
        _ => bail!("pre-tokenizer shape not supported"),
    })
}

/// `Split`s (Isolated, not inverted) followed by `ByteLevel(use_regex=false,
/// add_prefix_space=false)`.
pub(in crate::tokenize) fn parse_splits(
    splits: &[&serde_json::Value],
    b: &serde_json::Value,
) -> Result<PreTok> {
    if b.get("use_regex").and_then(|x| x.as_bool()) != Some(false) {
        bail!("Split followed by ByteLevel with its own regex");
    }
    if b.get("add_prefix_space")
        .and_then(|x| x.as_bool())
        .unwrap_or(true)
    {
        bail!("ByteLevel add_prefix_space after Split");
    }
    let mut atoms = Vec::new();
    let mut parsed = Vec::new();
    for s in splits {
        if ty(s) != "Split" {
            bail!("pre-tokenizer {} before ByteLevel", ty(s));
        }
        if s.get("behavior").and_then(|x| x.as_str()) != Some("Isolated") {
            bail!("Split behavior other than Isolated");
        }
        if s.get("invert").and_then(|x| x.as_bool()) == Some(true) {
            bail!("inverted Split");
        }
        let pat = s.get("pattern").context("Split pattern")?;
        let re = if let Some(r) = pat.get("Regex").and_then(|x| x.as_str()) {
            r.to_string()
        } else if let Some(st) = pat.get("String").and_then(|x| x.as_str()) {
            st.chars()
                .map(|c| {
                    if c.is_ascii_punctuation() {
                        format!("\\{c}")
                    } else {
                        c.to_string()
                    }
                })
                .collect()
        } else {
            bail!("Split pattern");
        };
        parsed.push(regex::parse(&re, &mut atoms).with_context(|| format!("Split regex {re:?}"))?);
    }
    let table = ClassTable::new(&atoms)?;
    let compiled = parsed.into_iter().map(|p| Regex::compile(p, &table));
    let regexes = SplitMatcher::sequence(compiled.collect(), &table);
    Ok(PreTok::Splits { regexes, table })
}

/// A `Metaspace` pre-tokenizer.
pub(in crate::tokenize) fn parse_metaspace(ms: &serde_json::Value) -> Result<PreTok> {
    let rep = ms
        .get("replacement")
        .and_then(|x| x.as_str())
        .and_then(|s| {
            let mut c = s.chars();
            c.next().filter(|_| c.next().is_none())
        })
        .context("Metaspace replacement")?;
    let mut prepend = match ms.get("prepend_scheme").and_then(|x| x.as_str()) {
        None | Some("always") => PrependScheme::Always,
        Some("first") => PrependScheme::First,
        Some("never") => PrependScheme::Never,
        Some(o) => bail!("prepend_scheme {o}"),
    };
    if ms.get("add_prefix_space").and_then(|x| x.as_bool()) == Some(false) {
        prepend = PrependScheme::Never;
    }
    let split = ms.get("split").and_then(|x| x.as_bool()).unwrap_or(true);
    Ok(PreTok::Metaspace {
        rep,
        prepend,
        split,
    })
}
