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

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, MatchKind};
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
    matcher: Matcher,
    infos: Vec<AddedInfo>,
}

/// How a trie finds its leftmost-longest matches.
enum Matcher {
    Automaton(AhoCorasick),
    Runs(Runs),
}

/// Patterns that are all runs of one ASCII byte, each at least two long (CodeGen / phi-2's
/// indentation tokens: 30 runs of spaces, 8 of tabs): the automaton's prefilter stopped at
/// every single space of the text (~6 % of a phi-2 pack on code); here a match can only start
/// where a byte is doubled, which memchr's pair search finds without stopping at lone spaces.
/// Same matches as the automaton (leftmost, then longest, then the first pattern added).
struct Runs {
    bytes: Vec<RunByte>,
}

struct RunByte {
    /// The doubled byte a match starts with.
    pair: memchr::memmem::Finder<'static>,
    byte: u8,
    /// Per run length `0..=longest`: the longest pattern that fits, as (length, pattern).
    fit: Vec<Option<(usize, usize)>>,
}

impl Runs {
    /// `None` unless every pattern is a run of one ASCII byte of length ≥ 2 with no
    /// `single_word` / `lstrip` / `rstrip` (at most four distinct bytes).
    fn new(patterns: &[(String, AddedInfo)]) -> Option<Runs> {
        let mut bytes: Vec<RunByte> = Vec::new();
        for (i, (p, info)) in patterns.iter().enumerate() {
            let b = p.as_bytes();
            let c = *b.first()?;
            if b.len() < 2
                || !c.is_ascii()
                || b.iter().any(|&x| x != c)
                || info.single_word
                || info.lstrip
                || info.rstrip
            {
                return None;
            }
            let k = match bytes.iter().position(|r| r.byte == c) {
                Some(k) => k,
                None => {
                    bytes.push(RunByte {
                        pair: memchr::memmem::Finder::new(&[c, c]).into_owned(),
                        byte: c,
                        fit: Vec::new(),
                    });
                    bytes.len() - 1
                }
            };
            let fit = &mut bytes[k].fit;
            if fit.len() <= b.len() {
                fit.resize(b.len() + 1, None);
            }
            // The first pattern added wins among equal ones.
            fit[b.len()].get_or_insert((b.len(), i));
        }
        if bytes.len() > 4 {
            return None;
        }
        for r in &mut bytes {
            for n in 1..r.fit.len() {
                if r.fit[n].is_none() {
                    r.fit[n] = r.fit[n - 1];
                }
            }
        }
        Some(Runs { bytes })
    }
}

/// Matches of a [`Runs`] in `hay[pos..]`, in order, not overlapping.
struct RunMatches<'a> {
    runs: &'a Runs,
    hay: &'a [u8],
    pos: usize,
    /// Per run byte: where its next doubling is (`usize::MAX`: none), once searched.
    next: [Option<usize>; 4],
}

impl Iterator for RunMatches<'_> {
    type Item = (usize, usize, usize);

    fn next(&mut self) -> Option<(usize, usize, usize)> {
        loop {
            let mut best = (usize::MAX, 0);
            for (k, r) in self.runs.bytes.iter().enumerate() {
                let at = match self.next[k] {
                    Some(at) if at >= self.pos => at,
                    _ => {
                        let at = r
                            .pair
                            .find(&self.hay[self.pos..])
                            .map_or(usize::MAX, |i| self.pos + i);
                        self.next[k] = Some(at);
                        at
                    }
                };
                best = best.min((at, k));
            }
            let (at, k) = best;
            if at == usize::MAX {
                return None;
            }
            let r = &self.runs.bytes[k];
            // Counted no further than the longest pattern: a longer run takes that one and
            // its rest is found again from the match's end (counting the whole run at every
            // match was quadratic: 15 s for one 2 MB run of spaces).
            let longest = r.fit.len() - 1;
            let run = self.hay[at..]
                .iter()
                .take(longest)
                .take_while(|&&x| x == r.byte)
                .count();
            match r.fit[run] {
                Some((len, pattern)) => {
                    self.pos = at + len;
                    return Some((pattern, at, at + len));
                }
                None => self.pos = at + run,
            }
        }
    }
}

/// A trie's matches: (pattern, start, end).
enum Matches<'a> {
    Automaton(aho_corasick::FindIter<'a, 'a>),
    Runs(RunMatches<'a>),
}

impl Iterator for Matches<'_> {
    type Item = (usize, usize, usize);

    #[inline]
    fn next(&mut self) -> Option<(usize, usize, usize)> {
        match self {
            Matches::Automaton(it) => it
                .next()
                .map(|m| (m.pattern().as_usize(), m.start(), m.end())),
            Matches::Runs(it) => it.next(),
        }
    }
}

/// The most pattern bytes an added-token automaton may be built as a DFA from (real
/// tokenizers' sets of up to 100 added tokens are a few hundred bytes).
const DFA_MAX_BYTES: usize = 1024;

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
        Self::build(patterns, true)
    }

    /// [`Self::new`]; `runs`: take the run scanner when the patterns allow it.
    fn build(patterns: Vec<(String, AddedInfo)>, runs: bool) -> Result<Option<Trie>> {
        if patterns.is_empty() {
            return Ok(None);
        }
        // aho-corasick picks a DFA for up to 100 patterns; building one follows failure links
        // per state and byte class, quadratic in a long repetitive pattern (a fuzzed 16 KiB
        // added token took over a minute). Past DFA_MAX_BYTES of patterns, its NFA (same
        // matches, built in linear time).
        let bytes: usize = patterns.iter().map(|(p, _)| p.len()).sum();
        let matcher = match Runs::new(&patterns).filter(|_| runs) {
            Some(r) => Matcher::Runs(r),
            None => Matcher::Automaton(
                AhoCorasickBuilder::new()
                    .match_kind(MatchKind::LeftmostLongest)
                    .kind((bytes > DFA_MAX_BYTES).then_some(AhoCorasickKind::ContiguousNFA))
                    .build(patterns.iter().map(|(p, _)| p.as_str()))
                    .map_err(|e| anyhow!("added-token matcher: {e}"))?,
            ),
        };
        Ok(Some(Trie {
            matcher,
            infos: patterns.into_iter().map(|(_, i)| i).collect(),
        }))
    }

    /// Leftmost-longest matches inside `range` of `s`, in order.
    fn find_iter<'a>(&'a self, s: &'a str, range: std::ops::Range<usize>) -> Matches<'a> {
        match &self.matcher {
            Matcher::Automaton(ac) => {
                Matches::Automaton(ac.find_iter(aho_corasick::Input::new(s).range(range)))
            }
            Matcher::Runs(r) => Matches::Runs(RunMatches {
                runs: r,
                hay: &s.as_bytes()[..range.end],
                pos: range.start,
                next: [None; 4],
            }),
        }
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
        for (pattern, mut start, mut stop) in self.find_iter(s, from..span.end) {
            let info = &self.infos[pattern];
            saw |= info.marker;
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
        for (pattern, start, stop) in self.find_iter(s, 0..s.len()) {
            let info = &self.infos[pattern];
            if info.single_word {
                let start_space = start == 0 || !ENDS_WITH_WORD.is_match(&s[..start]);
                let stop_space = stop == s.len() || !STARTS_WITH_WORD.is_match(&s[stop..]);
                if !stop_space || !start_space {
                    continue;
                }
            }
            out.push((info.id, start, stop));
        }
    }

    /// The spans of the marker tokens among the matches the automaton picks in `s` (before
    /// `single_word` / strip rules): what [`Self::split`]'s return value summarizes.
    pub fn marker_picks(&self, s: &str) -> Vec<(usize, usize)> {
        self.find_iter(s, 0..s.len())
            .filter(|&(pattern, ..)| self.infos[pattern].marker)
            .map(|(_, start, stop)| (start, stop))
            .collect()
    }

    /// True when some pattern occurs in `s` (a cheap pre-check).
    pub fn any(&self, s: &str) -> bool {
        match &self.matcher {
            Matcher::Automaton(ac) => ac.is_match(s),
            Matcher::Runs(_) => self.find_iter(s, 0..s.len()).next().is_some(),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(id: u32) -> AddedInfo {
        AddedInfo {
            id,
            single_word: false,
            lstrip: false,
            rstrip: false,
            marker: false,
        }
    }

    fn with_ids(pats: &[String]) -> Vec<(String, AddedInfo)> {
        pats.iter()
            .enumerate()
            .map(|(i, p)| (p.clone(), info(i as u32)))
            .collect()
    }

    /// xorshift64: the same pseudo-random texts every run.
    fn next(r: &mut u64) -> usize {
        *r ^= *r << 13;
        *r ^= *r >> 7;
        *r ^= *r << 17;
        *r as usize
    }

    /// The run scanner against the automaton on random texts of spaces, tabs, letters, a
    /// two-byte char and runs longer than any pattern: the same pieces from `split`,
    /// `split_span` over a random span and start, `occurrences` and `any`. Pattern sets: phi-2's (spaces 2–31, tabs 2–9, longest first as
    /// in its file) and one with gaps, a duplicate (the first added wins), a minimum of 3 and a
    /// letter run.
    #[test]
    fn runs_match_exactly_as_the_automaton_does() {
        let phi2: Vec<String> = (2..=31)
            .rev()
            .map(|n| " ".repeat(n))
            .chain((2..=9).rev().map(|n| "\t".repeat(n)))
            .collect();
        let gaps: Vec<String> = ["   ", "     ", "\t\t", "   ", "xxxx", "\t\t\t\t\t"]
            .map(String::from)
            .to_vec();
        // Runs longer than the longest pattern too (the scanner counts no further).
        let (long_spaces, long_tabs) = (" ".repeat(40), "\t".repeat(11));
        let alphabet = [
            " ",
            " ",
            " ",
            "\t",
            "\t",
            "x",
            "a",
            "\n",
            "é",
            &long_spaces,
            &long_tabs,
        ];
        let mut r = 0x9e37_79b9_7f4a_7c15u64;
        for pats in [phi2, gaps] {
            let runs = Trie::build(with_ids(&pats), true).unwrap().unwrap();
            assert!(matches!(runs.matcher, Matcher::Runs(_)), "{pats:?}");
            let ac = Trie::build(with_ids(&pats), false).unwrap().unwrap();
            assert!(matches!(ac.matcher, Matcher::Automaton(_)));
            for _ in 0..4000 {
                let len = next(&mut r) % 90;
                let s: String = (0..len)
                    .map(|_| alphabet[next(&mut r) % alphabet.len()])
                    .collect();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                assert_eq!(ac.split(&s, &mut a), runs.split(&s, &mut b));
                assert_eq!(a, b, "split {s:?}");
                let bounds: Vec<usize> = (0..=s.len()).filter(|&i| s.is_char_boundary(i)).collect();
                let mut pick = || bounds[next(&mut r) % bounds.len()];
                let (x, y, z) = (pick(), pick(), pick());
                let (lo, hi) = (x.min(y), x.max(y));
                let (mut oa, mut ob) = (z, z);
                let (mut a, mut b) = (Vec::new(), Vec::new());
                ac.split_span(&s, lo..hi, &mut oa, &mut a);
                runs.split_span(&s, lo..hi, &mut ob, &mut b);
                assert_eq!((a, oa), (b, ob), "span {lo}..{hi} from {z} of {s:?}");
                let (mut a, mut b) = (Vec::new(), Vec::new());
                ac.occurrences(&s, &mut a);
                runs.occurrences(&s, &mut b);
                assert_eq!(a, b, "occurrences {s:?}");
                assert_eq!(ac.any(&s), runs.any(&s), "any {s:?}");
            }
        }
    }

    /// Anything but plain runs of one ASCII byte, two or more long, keeps the automaton.
    #[test]
    fn only_plain_ascii_runs_take_the_run_scanner() {
        for pats in [&[" "][..], &["  ", " x"], &["éé"], &["  ", "<|endoftext|>"]] {
            let pats: Vec<String> = pats.iter().map(|p| p.to_string()).collect();
            assert!(Runs::new(&with_ids(&pats)).is_none(), "{pats:?}");
        }
        let mut stripped = with_ids(&["  ".to_string()]);
        stripped[0].1.lstrip = true;
        assert!(Runs::new(&stripped).is_none());
        let five: Vec<String> = ["aa", "bb", "cc", "dd", "ee"].map(String::from).to_vec();
        assert!(Runs::new(&with_ids(&five)).is_none());
        assert!(Runs::new(&with_ids(&five[..4])).is_some());
    }
}
