//! Added tokens (special or not) split out of the text exactly as the `tokenizers` crate's
//! `AddedVocabulary::extract_and_normalize` does, so a document containing one stays on the
//! fast path: tokens with `normalized: false` are found in the raw text, those with
//! `normalized: true` in each normalized piece (their pattern is their normalized content);
//! leftmost-longest matching, then `single_word`, `lstrip` and `rstrip` exactly as the crate
//! applies them (same `\w` / `\s` definitions: the `regex` crate's, as in the crate).

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
}

/// One trie (raw or normalized) of added tokens.
pub struct Trie {
    ac: AhoCorasick,
    infos: Vec<AddedInfo>,
}

/// A piece of a split: an added token's id, or text `start..end` of the split string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece {
    Token(u32),
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
    pub fn split(&self, s: &str, out: &mut Vec<Piece>) {
        out.clear();
        let mut start_offset = 0;
        for m in self.ac.find_iter(s) {
            let info = &self.infos[m.pattern().as_usize()];
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
                start = newstart.max(start_offset);
            }
            if info.rstrip {
                stop += SPACE_AT_START.find(&s[stop..]).map_or(0, |m| m.end());
            }
            if start_offset < start {
                out.push(Piece::Text(start_offset, start));
            }
            out.push(Piece::Token(info.id));
            start_offset = stop;
        }
        if start_offset != s.len() {
            out.push(Piece::Text(start_offset, s.len()));
        }
    }

    /// True when some pattern occurs in `s` (a cheap pre-check).
    pub fn any(&self, s: &str) -> bool {
        self.ac.is_match(s)
    }
}
