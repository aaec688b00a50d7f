//! Added tokens (special or not) split out of the text exactly as the `tokenizers` crate's
//! `AddedVocabulary::extract_and_normalize` does, so a document containing one stays on the
//! fast path: tokens with `normalized: false` are found in the raw text, those with
//! `normalized: true` in each normalized piece (their pattern is their normalized content);
//! leftmost-longest matching, then `single_word`, `lstrip` and `rstrip` exactly as the crate
//! applies them (same `\w` / `\s` definitions: the `regex` crate's, as in the crate).
//!
//! For `--special-tokens-in-text` ([`crate::added_text`]) each token also knows whether it is a
//! marker; [`AddedTries`] holds, per stage (raw, normalized), the trie of all tokens (split
//! mode, template text), of the non-markers only (plain text from data) and of the markers only
//! (finding added-token text in data).

use std::sync::LazyLock;

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use anyhow::{anyhow, Result};
use regex::Regex;

static ENDS_WITH_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\w$").expect("regex"));
static STARTS_WITH_WORD: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\w").expect("regex"));
static SPACE_AT_START: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"^\s*").expect("regex"));
static SPACE_AT_END: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\s*$").expect("regex"));

/// One added token's matching options.
#[derive(Clone, Debug)]
pub struct AddedInfo {
    pub id: u32,
    pub single_word: bool,
    pub lstrip: bool,
    pub rstrip: bool,
    /// Not whitespace only: plain text when it comes from data ([`crate::added_text`]).
    pub marker: bool,
}

/// One trie (raw or normalized) of added tokens.
pub struct Trie {
    ac: AhoCorasick,
    infos: Vec<AddedInfo>,
}

/// A piece of a split: an added token's id, or text `start..end` of the split string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Token id, and its span (with any lstrip / rstrip spaces) in the split string.
    Token(u32, usize, usize),
    Text(usize, usize),
}

impl Trie {
    /// `None` when there is nothing to match.
    pub fn new(patterns: Vec<(String, AddedInfo)>) -> Result<Option<Trie>> {
        if patterns.is_empty() {
            return Ok(None);
        }
        let ac = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .build(patterns.iter().map(|(p, _)| p.as_str()))
            .map_err(|e| anyhow!("added-token matcher: {e}"))?;
        Ok(Some(Trie {
            ac,
            infos: patterns.into_iter().map(|(_, i)| i).collect(),
        }))
    }

    /// The crate's `find_matches`: pieces of `s` in order (text pieces are never empty).
    /// Returns whether any match the automaton reported (kept or discarded) is a marker: when
    /// none is, the pieces are also those of the non-marker tokens alone.
    pub fn split(&self, s: &str, out: &mut Vec<Piece>) -> bool {
        out.clear();
        let mut start_offset = 0;
        let saw = self.split_span(s, 0..s.len(), &mut start_offset, out);
        if start_offset != s.len() {
            out.push(Piece::Text(start_offset, s.len()));
        }
        saw
    }

    /// [`Self::split`] over `span` of `s` only (matches lie inside it; `single_word`,
    /// `lstrip` and `rstrip` look at all of `s`), continuing from `start_offset`; the text
    /// after the last match is left to the caller.
    pub fn split_span(
        &self,
        s: &str,
        span: std::ops::Range<usize>,
        start_offset: &mut usize,
        out: &mut Vec<Piece>,
    ) -> bool {
        let mut saw = false;
        let from = span.start.max(*start_offset).min(span.end);
        let input = aho_corasick::Input::new(s).range(from..span.end);
        for m in self.ac.find_iter(input) {
            let info = &self.infos[m.pattern().as_usize()];
            saw |= info.marker;
            let mut start = m.start();
            let mut stop = m.end();
            if info.single_word {
                let start_space = start == 0 || !ENDS_WITH_WORD.is_match(&s[..start]);
                let stop_space = stop == s.len() || !STARTS_WITH_WORD.is_match(&s[stop..]);
                if !stop_space || !start_space {
                    continue;
                }
            }
            if info.lstrip {
                let newstart = SPACE_AT_END.find(&s[..start]).map_or(start, |m| m.start());
                start = newstart.max(*start_offset);
            }
            if info.rstrip {
                stop += SPACE_AT_START.find(&s[stop..]).map_or(0, |m| m.end());
            }
            if *start_offset < start {
                out.push(Piece::Text(*start_offset, start));
            }
            out.push(Piece::Token(info.id, start, stop));
            *start_offset = stop;
        }
        saw
    }

    /// Every leftmost-longest occurrence in `s` (`single_word` applied as in matching), as
    /// (token id, start, end), appended to `out`.
    pub fn occurrences(&self, s: &str, out: &mut Vec<(u32, usize, usize)>) {
        for m in self.ac.find_iter(s) {
            let info = &self.infos[m.pattern().as_usize()];
            if info.single_word {
                let (start, stop) = (m.start(), m.end());
                let start_space = start == 0 || !ENDS_WITH_WORD.is_match(&s[..start]);
                let stop_space = stop == s.len() || !STARTS_WITH_WORD.is_match(&s[stop..]);
                if !stop_space || !start_space {
                    continue;
                }
            }
            out.push((info.id, m.start(), m.end()));
        }
    }

    /// The spans of the marker tokens among the matches the automaton picks in `s` (before
    /// `single_word` / strip rules): what [`Self::split`]'s return value summarizes.
    pub fn marker_picks(&self, s: &str) -> Vec<(usize, usize)> {
        self.ac
            .find_iter(s)
            .filter(|m| self.infos[m.pattern().as_usize()].marker)
            .map(|m| (m.start(), m.end()))
            .collect()
    }

    /// True when some pattern occurs in `s` (a cheap pre-check).
    pub fn any(&self, s: &str) -> bool {
        self.ac.is_match(s)
    }
}

/// The tries of one stage (raw text, or normalized pieces).
#[derive(Default)]
pub struct StageTries {
    /// Every token (split mode; template text).
    pub all: Option<Trie>,
    /// Non-marker tokens only (plain text from data).
    pub plain: Option<Trie>,
    /// Marker tokens only (finding added-token text).
    pub markers: Option<Trie>,
}

impl StageTries {
    pub fn new(patterns: Vec<(String, AddedInfo)>) -> Result<StageTries> {
        let plain = patterns.iter().filter(|p| !p.1.marker).cloned().collect();
        let markers = patterns.iter().filter(|p| p.1.marker).cloned().collect();
        Ok(StageTries {
            all: Trie::new(patterns)?,
            plain: Trie::new(plain)?,
            markers: Trie::new(markers)?,
        })
    }
}

/// Added tokens of a tokenizer, split into the crate's two passes: `normalized: false` ones
/// on the raw text, `normalized: true` ones (as their normalized content) on each normalized
/// piece; plus each token's content by id.
pub struct AddedTries {
    pub raw: StageTries,
    pub norm: StageTries,
    pub content: std::collections::HashMap<u32, String>,
}

impl AddedTries {
    /// From the crate's added vocabulary (ids and flags as loaded) and its normalizer.
    pub fn new<'a>(
        decoder: impl IntoIterator<Item = (&'a u32, &'a tokenizers::AddedToken)>,
        normalizer: Option<&tokenizers::NormalizerWrapper>,
    ) -> Result<AddedTries> {
        let mut raw = Vec::new();
        let mut normd = Vec::new();
        let mut content = std::collections::HashMap::new();
        let mut sorted: Vec<_> = decoder.into_iter().collect();
        sorted.sort_by_key(|(id, _)| **id);
        for (&id, t) in sorted {
            if t.content.is_empty() {
                continue;
            }
            content.insert(id, t.content.clone());
            let info = AddedInfo {
                id,
                single_word: t.single_word,
                lstrip: t.lstrip,
                rstrip: t.rstrip,
                marker: super::is_marker(&t.content),
            };
            if t.normalized {
                let pat = match normalizer {
                    Some(n) => {
                        use tokenizers::Normalizer;
                        let mut ns = tokenizers::NormalizedString::from(t.content.as_str());
                        n.normalize(&mut ns).map_err(|e| anyhow!("{e}"))?;
                        ns.get().to_string()
                    }
                    None => t.content.clone(),
                };
                normd.push((pat, info));
            } else {
                raw.push((t.content.clone(), info));
            }
        }
        Ok(AddedTries {
            raw: StageTries::new(raw)?,
            norm: StageTries::new(normd)?,
            content,
        })
    }

    /// Number of added tokens split out of text.
    pub fn len(&self) -> usize {
        self.content.len()
    }

    pub fn is_empty(&self) -> bool {
        self.content.is_empty()
    }

    /// The content of added token `id` (its id in brackets when unknown).
    pub fn name(&self, id: u32) -> String {
        self.content
            .get(&id)
            .cloned()
            .unwrap_or_else(|| format!("[{id}]"))
    }
}
