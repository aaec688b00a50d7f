//! Text is text: a document, question, option or prompt that holds the content of an added
//! token (`<|endoftext|>`, `<|im_start|>`, MiniCPM5's mask `<unused_token_0>`, `/think` …)
//! must not turn into that token's id. This module holds what `pack`, `mcq` and `distill`
//! share about it: the `--special-tokens-in-text` policy, one occurrence found in data
//! ([`Hit`]), and the per-source / per-token counts written to index.json and the summaries
//! ([`AddedTextCounts`]); the added-token matcher every encoder uses ([`trie`]), the exact
//! encoder through the `tokenizers` crate for text with data ranges ([`ranged`]: mcq, the
//! teacher, pack's crate path) and the policy check ([`check_policy`]). The fast path
//! (`tokenize::fast`) uses the same tries.
//!
//! Which added tokens count: every added token whose content is not whitespace only.
//! Whitespace-run added tokens (CodeGen / phi-2's 39 runs of spaces and tabs) are how those
//! models encode indentation, not markers; they stay as they are in every mode.

pub mod ranged;
pub mod trie;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `--special-tokens-in-text`: what text from data that equals an added token becomes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SpecialTokensInText {
    /// Ordinary text, through the normalizer / pre-tokenizer / model as if the added token did
    /// not exist (the default).
    #[default]
    Plain,
    /// The added token's id (the `tokenizers` default), except the mask token: refused.
    Split,
    /// Refuse the input, naming the file, row and byte offset.
    Refuse,
}

impl SpecialTokensInText {
    pub fn as_str(self) -> &'static str {
        match self {
            SpecialTokensInText::Plain => "plain",
            SpecialTokensInText::Split => "split",
            SpecialTokensInText::Refuse => "refuse",
        }
    }
}

/// True when an added token with this content is a marker (counted, and plain text in data).
pub fn is_marker(content: &str) -> bool {
    !content.is_empty() && !content.chars().all(char::is_whitespace)
}

/// One occurrence of an added token's content in text from data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The added token's id.
    pub id: u32,
    /// Byte offset in the text (for a token matched after normalization: where its content
    /// starts in the text, or the normalized offset when the normalizer changed it).
    pub offset: usize,
}

/// The first occurrences named in the log (per command run).
pub const EXAMPLES_LOGGED: usize = 5;

/// Per source: how many documents / items / prompts held added-token text, per token.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCounts {
    /// Documents (items, prompts) holding at least one added token's content.
    pub documents: u64,
    /// Per token content: documents holding it.
    pub per_token: BTreeMap<String, u64>,
}

/// `added_token_text` in index.json, the mcq and distill summaries and `--json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedTextCounts {
    /// The policy the run used (`plain`, `split`, `refuse`).
    pub mode: String,
    /// Documents (items, prompts) holding added-token text, all sources.
    pub documents: u64,
    /// Per source name.
    pub per_source: BTreeMap<String, SourceCounts>,
}

impl AddedTextCounts {
    pub fn new(mode: SpecialTokensInText) -> AddedTextCounts {
        AddedTextCounts {
            mode: mode.as_str().to_string(),
            ..AddedTextCounts::default()
        }
    }

    /// Count one document of `source` whose hits are `hits` (nothing when empty); `name`
    /// gives a token's content.
    pub fn add(&mut self, source: &str, hits: &[Hit], name: impl Fn(u32) -> String) {
        if hits.is_empty() {
            return;
        }
        let mut ids: Vec<u32> = hits.iter().map(|h| h.id).collect();
        ids.sort_unstable();
        ids.dedup();
        self.documents += 1;
        let s = self.per_source.entry(source.to_string()).or_default();
        s.documents += 1;
        for id in ids {
            *s.per_token.entry(name(id)).or_default() += 1;
        }
    }

    /// Fold another run's (a resumed or parallel part's) counts into these.
    pub fn merge(&mut self, other: &AddedTextCounts) {
        if self.mode.is_empty() {
            self.mode = other.mode.clone();
        }
        self.documents += other.documents;
        for (src, c) in &other.per_source {
            let s = self.per_source.entry(src.clone()).or_default();
            s.documents += c.documents;
            for (t, n) in &c.per_token {
                *s.per_token.entry(t.clone()).or_default() += n;
            }
        }
    }

    /// One line for the log: `N documents held added-token text (a: k, b: m)`.
    pub fn summary(&self, what: &str) -> String {
        let mut per: BTreeMap<&str, u64> = BTreeMap::new();
        for s in self.per_source.values() {
            for (t, n) in &s.per_token {
                *per.entry(t.as_str()).or_default() += n;
            }
        }
        let list: Vec<String> = per.iter().map(|(t, n)| format!("{t:?}: {n}")).collect();
        format!(
            "{} {what} held added-token text ({}), encoded as {}",
            self.documents,
            list.join(", "),
            match self.mode.as_str() {
                "split" => "the added tokens (--special-tokens-in-text split)",
                _ => "plain text",
            }
        )
    }
}

/// A short excerpt of `text` around byte `offset` for the log (at most ~40 bytes each side).
pub fn excerpt(text: &str, offset: usize) -> String {
    let mut a = offset.saturating_sub(40).min(text.len());
    while !text.is_char_boundary(a) {
        a -= 1;
    }
    let mut b = (offset + 60).min(text.len());
    while !text.is_char_boundary(b) {
        b += 1;
    }
    format!("{:?}", &text[a..b])
}

/// `--special-tokens-in-text` and the mask rule for one text: `refuse` fails on any marker
/// content; `split` on the mask token's content; every mode on a mask id among `ids`. Errors
/// name the byte offset and the token.
pub fn check_policy(
    mode: SpecialTokensInText,
    mask: Option<&(String, u32)>,
    text: &str,
    ids: &[u32],
    hits: &[Hit],
    name: impl Fn(u32) -> String,
) -> anyhow::Result<()> {
    if mode == SpecialTokensInText::Refuse {
        if let Some(h) = hits.iter().min_by_key(|h| h.offset) {
            anyhow::bail!(
                "byte offset {}: text {:?} is added token {} {} (--special-tokens-in-text refuse; \
                 `plain` encodes it as text)",
                h.offset,
                name(h.id),
                h.id,
                excerpt(text, h.offset)
            );
        }
    }
    if let Some((m, mid)) = mask {
        let split = mode == SpecialTokensInText::Split;
        if let Some(h) = hits.iter().find(|h| split && h.id == *mid) {
            anyhow::bail!(
                "byte offset {}: text {m:?} would become the mask token (id {mid}), which text \
                 never may (--special-tokens-in-text {}; `plain` encodes it as text) {}",
                h.offset,
                mode.as_str(),
                excerpt(text, h.offset)
            );
        }
        if ids.contains(mid) {
            anyhow::bail!(
                "the text encodes to the mask token {m:?} (id {mid}) through the model's own \
                 merges: text may never hold the mask id"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_and_counts() {
        assert!(is_marker("<unused_token_0>"));
        assert!(is_marker("/think"));
        assert!(!is_marker("    "));
        assert!(!is_marker("\t\t"));
        let mut c = AddedTextCounts::new(SpecialTokensInText::Plain);
        let name = |id: u32| format!("t{id}");
        c.add("web", &[], name);
        c.add(
            "web",
            &[
                Hit { id: 3, offset: 0 },
                Hit { id: 3, offset: 9 },
                Hit { id: 4, offset: 2 },
            ],
            name,
        );
        c.add("web", &[Hit { id: 4, offset: 1 }], name);
        assert_eq!(c.documents, 2);
        assert_eq!(c.per_source["web"].per_token["t3"], 1);
        assert_eq!(c.per_source["web"].per_token["t4"], 2);
        let mut d = c.clone();
        d.merge(&c);
        assert_eq!(d.per_source["web"].per_token["t4"], 4);
        assert!(c.summary("documents").starts_with("2 documents"));
    }
}
