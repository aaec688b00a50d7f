//! The exact fast tokenizer: the `tokenizers` crate's pipeline (added tokens → normalizer →
//! pre-tokenizer → BPE) for the shapes every modern LLM uses, without offsets, alignment
//! tracking or per-call allocation, so `pack` runs several times faster than the crate with
//! ids identical to `encode(text, add_special_tokens=False)`.
//!
//! Shapes taken (anything else is refused by [`FastTokenizer::from_json`] with the reason, and
//! the caller keeps the crate):
//! - byte-level BPE: `ByteLevel(use_regex=true)` (GPT-2, hand-coded regex), or a `Sequence` of
//!   one or more `Split(Regex, Isolated)` followed by `ByteLevel(use_regex=false)` (Llama-3,
//!   Qwen2, o200k, DeepSeek-V3; the regexes run on [`super::pre_tokenize::split_matcher`]); `ignore_merges`;
//! - SentencePiece-style BPE: `Metaspace` (any prepend_scheme, split or not) or the legacy
//!   `Prepend("▁")` + `Replace(" ", "▁")` normalizer; `byte_fallback`, `unk`, `fuse_unk`;
//! - normalizer none, NFC, or a sequence of NFC / Prepend / Replace(String);
//! - added tokens of every kind (see [`super::added`]).

use std::borrow::Cow;

use anyhow::{bail, Result};

use super::bpe::{Bpe, FxSet, Sink, StrMap};
use super::json::{ModelJson, TokJson};
use super::normalize::{apply_norm, norm_desc, parse_norm, NormStep};
#[cfg(test)]
use super::normalize::{next_non_ascii, nfc};
use super::pre_tokenize::config::{parse_pre, PreTok, PrependScheme};
use super::pre_tokenize::gpt2;
use super::pre_tokenize::scan_classes::Scanner;
use super::pre_tokenize::split_matcher::SplitMatcher;
use super::pre_tokenize::unicode::ClassTable;
use crate::added_text::trie::{AddedTries, Piece, Trie};
use crate::added_text::Hit;

/// A tokenizer.json the fast path reproduces exactly.
pub struct FastTokenizer {
    norm: Vec<NormStep>,
    pre: PreTok,
    pub bpe: Bpe,
    /// Added tokens: all / non-marker / marker tries for the raw and normalized passes.
    pub tries: AddedTries,
    /// SentencePiece whole-piece words: split before `rep` unless the preceding char is here
    /// (`None`: never split — no proof the merges cannot cross such a boundary).
    sp_segment: Option<(char, FxSet<char>)>,
    /// [`Self::sp_splits_after`] of each ASCII char, worked out at load (two hash lookups per
    /// word were 7 % of a SentencePiece tokenizing thread on prose).
    sp_ascii_splits: [bool; 128],
    /// The SentencePiece normalizer is exactly `[Prepend(rep)?, Replace(" ", rep)]` with no
    /// normalized added token and no ignore_merges: pieces are segmented as they are read
    /// (`Some(prepend)`), never copied whole.
    stream_norm: Option<bool>,
    gpt2: Option<gpt2::Gpt2Classes>,
    /// What this tokenizer's path is, for the log and index.json.
    pub describe: String,
    /// The crate's `get_vocab_size(true)`.
    pub vocab_size: usize,
    /// Added token → id, as the crate assigned them.
    added: StrMap<String, u32>,
}

/// The model vocabulary as the crate's `Model` trait, for `AddedVocabulary::add_tokens` (which
/// reads only `token_to_id` and `get_vocab_size`).
struct VocabModel<'a>(&'a Bpe);

impl tokenizers::Model for VocabModel<'_> {
    type Trainer = tokenizers::models::bpe::BpeTrainer;
    fn tokenize(&self, _: &str) -> tokenizers::Result<Vec<tokenizers::Token>> {
        Err("VocabModel only answers vocabulary lookups".into())
    }
    fn token_to_id(&self, t: &str) -> Option<u32> {
        self.0.vocab.get(t).copied()
    }
    fn id_to_token(&self, _: u32) -> Option<String> {
        None
    }
    fn get_vocab(&self) -> std::collections::HashMap<String, u32> {
        self.0
            .vocab
            .iter()
            .map(|(k, v)| (k.to_string(), *v))
            .collect()
    }
    fn get_vocab_size(&self) -> usize {
        self.0.vocab_len
    }
    fn save(
        &self,
        _: &std::path::Path,
        _: Option<&str>,
    ) -> tokenizers::Result<Vec<std::path::PathBuf>> {
        Err("VocabModel is not saved".into())
    }
    fn get_trainer(&self) -> Self::Trainer {
        tokenizers::models::bpe::BpeTrainer::default()
    }
}

/// `s[a..b]` for a piece a split matcher reported: its ends are char boundaries by
/// construction (every matcher steps whole chars), so the two boundary checks `&s[a..b]` makes
/// per word are skipped in release builds.
#[inline(always)]
fn piece(s: &str, a: usize, b: usize) -> &str {
    debug_assert!(a <= b && s.is_char_boundary(a) && s.is_char_boundary(b));
    // SAFETY: a <= b <= s.len() and both are char boundaries (the matchers' contract, checked
    // in debug builds and by the differential tests against Oniguruma).
    unsafe { s.get_unchecked(a..b) }
}

/// The pieces of `s` split by `trie` alone (all of `s` as text when there is none).
fn replan(trie: Option<&Trie>, s: &str, pieces: &mut Vec<Piece>) {
    match trie {
        Some(t) => {
            t.split(s, pieces);
        }
        None => {
            pieces.clear();
            if !s.is_empty() {
                pieces.push(Piece::Text(0, s.len()));
            }
        }
    }
}

impl FastTokenizer {
    /// The fast tokenizer of a tokenizer.json's text, or why its shape is not taken (the
    /// caller then loads the crate). Added tokens get their ids and normalized forms from the
    /// crate's own `AddedVocabulary` over this model's vocabulary, as `Tokenizer::from_str`.
    pub fn from_json(text: &str) -> Result<FastTokenizer> {
        let j = TokJson::parse(text)?;
        let mut norm = Vec::new();
        let norm_v = TokJson::value(j.normalizer)?;
        parse_norm(Some(&norm_v).filter(|v| !v.is_null()), &mut norm)?;
        let mut desc: Vec<String> = Vec::new();
        let model = ModelJson::parse(j.model_raw)?;
        let m = &model;
        if m.ty.is_none() && m.merges.is_none() {
            bail!("model is not BPE");
        }
        let pt_v = TokJson::value(j.pre_tokenizer)?;
        let (pre, byte_level) = parse_pre(Some(&pt_v).filter(|v| !v.is_null()), &mut desc)?;
        if byte_level && !norm.iter().all(|n| matches!(n, NormStep::Nfc)) {
            bail!("byte-level BPE with a non-NFC normalizer");
        }
        if matches!(pre, PreTok::Metaspace { .. })
            && norm.iter().any(|n| matches!(n, NormStep::Prepend(_)))
        {
            bail!("Metaspace together with a Prepend normalizer");
        }
        if !byte_level && matches!(pre, PreTok::None) && norm.is_empty() {
            bail!("no pre-tokenizer and no SentencePiece normalizer");
        }
        // SentencePiece whole-piece words: prove where merges cannot cross.
        let seg_rep = match &pre {
            PreTok::Metaspace {
                rep, split: false, ..
            } => Some(*rep),
            PreTok::None => Some('\u{2581}'),
            _ => None,
        };
        let mut bpe = Bpe::from_model(m, byte_level, seg_rep)?;
        let sp_segment = seg_rep
            .filter(|rep| bpe.char_id(*rep).is_some())
            .and_then(|rep| bpe.seg_left.take().map(|left| (rep, left)));
        if !norm.is_empty() {
            desc.insert(0, norm_desc(&norm));
        }
        let gpt2 = if matches!(pre, PreTok::Gpt2 { .. }) {
            Some(gpt2::Gpt2Classes::new()?)
        } else {
            None
        };
        let kind = if byte_level {
            "byte-level BPE"
        } else {
            "SentencePiece BPE"
        };
        let mut f = FastTokenizer {
            norm,
            pre,
            bpe,
            tries: AddedTries::new(std::iter::empty(), None)?,
            sp_segment,
            sp_ascii_splits: [false; 128],
            stream_norm: None,
            gpt2,
            describe: format!("exact fast {kind}: {}", desc.join(", ")),
            vocab_size: 0,
            added: StrMap::default(),
        };
        f.attach_added(&j)?;
        if let Some((rep, left)) = &f.sp_segment {
            let table =
                std::array::from_fn(|c| f.sp_splits_after_char(c as u8 as char, *rep, left));
            f.sp_ascii_splits = table;
        }
        Ok(f)
    }

    /// Added tokens, with the ids and normalized forms the crate gives them on load
    /// (`AddedVocabulary::add_tokens` over this model's vocabulary and the crate's normalizer).
    fn attach_added(&mut self, j: &TokJson<'_>) -> Result<()> {
        let crate_norm = j.crate_normalizer()?;
        let model = VocabModel(&self.bpe);
        let mut av = tokenizers::AddedVocabulary::new();
        av.add_tokens(
            j.added_tokens.iter().map(|t| t.token.clone()),
            &model,
            crate_norm.as_ref(),
        )
        .map_err(|e| anyhow::anyhow!("added tokens: {e}"))?;
        self.tries = AddedTries::new(av.get_added_tokens_decoder().iter(), crate_norm.as_ref())?;
        let n_added = self.tries.len();
        if n_added > 0 {
            self.describe
                .push_str(&format!(", {n_added} added tokens split"));
        }
        // The crate's get_vocab_size(true): model tokens plus added tokens not among them.
        let overlapping = av
            .get_vocab()
            .keys()
            .filter(|t| self.bpe.vocab.contains_key(t.as_str()))
            .count();
        self.vocab_size = self.bpe.vocab_len + av.len() - overlapping;
        self.added = av
            .get_vocab()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        self.stream_norm = self.streamable_norm();
        Ok(())
    }

    /// The crate's `token_to_id`: added tokens first, then the model vocabulary.
    pub fn token_to_id(&self, t: &str) -> Option<u32> {
        self.added
            .get(t)
            .copied()
            .or_else(|| self.bpe.vocab.get(t).copied())
    }

    /// Ids of `text` (Python: `encode(text, add_special_tokens=False)`).
    pub fn encode(&self, text: &str) -> Vec<u32> {
        self.encode_mode(text, false, &mut Vec::new())
    }

    /// Ids of `text` from data: with `plain`, marker added tokens are not matched (Python:
    /// the same tokenizer without them); otherwise as [`Self::encode`]. Either way every
    /// marker token's content found in the text is appended to `hits`.
    ///
    /// Speed: the tries of all tokens are scanned once per pass as in split mode; only when
    /// the automaton reports a marker (rare in real data) are the markers located and the
    /// text split again by the non-marker tokens alone — when it reports none, the pieces of
    /// all tokens are exactly those of the non-marker tokens (leftmost-longest matching picks
    /// the same match at every step when no marker is ever the pick).
    pub fn encode_mode(&self, text: &str, plain: bool, hits: &mut Vec<Hit>) -> Vec<u32> {
        self.bpe.with_sink(text.len() / 3 + 1, |out| {
            self.encode_into(text, plain, hits, out);
            std::mem::take(&mut out.ids)
        })
    }

    fn encode_into(&self, text: &str, plain: bool, hits: &mut Vec<Hit>, out: &mut Sink<'_>) {
        match &self.tries.raw.all {
            Some(t) if t.any(text) => {
                let mut pieces = Vec::new();
                if t.split(text, &mut pieces) {
                    if let Some(m) = &self.tries.raw.markers {
                        let mut occ = Vec::new();
                        m.occurrences(text, &mut occ);
                        hits.extend(occ.into_iter().map(|(id, offset, _)| Hit { id, offset }));
                    }
                    if plain {
                        replan(self.tries.raw.plain.as_ref(), text, &mut pieces);
                    }
                }
                for p in pieces {
                    match p {
                        Piece::Token(id, ..) => out.push(id),
                        Piece::Text(a, b) => {
                            self.normalized_piece(&text[a..b], a, a == 0, plain, hits, out)
                        }
                    }
                }
            }
            _ => self.normalized_piece(text, 0, true, plain, hits, out),
        }
    }

    /// `Some(prepend)` when the normalizer + `PreTok::None` can be run as [`Self::sp_stream`].
    fn streamable_norm(&self) -> Option<bool> {
        let (rep, _) = self.sp_segment.as_ref()?;
        if !matches!(self.pre, PreTok::None)
            || self.tries.norm.all.is_some()
            || self.bpe.has_whole()
        {
            return None;
        }
        let r = rep.to_string();
        match self.norm.as_slice() {
            [NormStep::Prepend(p), NormStep::Replace(a, b)] if *p == r && a == " " && *b == r => {
                Some(true)
            }
            [NormStep::Replace(a, b)] if a == " " && *b == r => Some(false),
            _ => None,
        }
    }

    /// A raw piece `s` (at byte `base` of the text): normalized, then the normalized added
    /// tokens, then the pre-tokenizer.
    fn normalized_piece(
        &self,
        s: &str,
        base: usize,
        at_origin: bool,
        plain: bool,
        hits: &mut Vec<Hit>,
        out: &mut Sink<'_>,
    ) {
        if let Some(prepend) = self.stream_norm {
            if !s.is_empty() {
                self.sp_stream(s, prepend, out);
            }
            return;
        }
        let n = apply_norm(&self.norm, s);
        match &self.tries.norm.all {
            Some(t) if t.any(&n) => {
                let mut pieces = Vec::new();
                if t.split(&n, &mut pieces) {
                    if let Some(m) = &self.tries.norm.markers {
                        let mut occ = Vec::new();
                        m.occurrences(&n, &mut occ);
                        let same = matches!(n, Cow::Borrowed(_));
                        hits.extend(occ.into_iter().map(|(id, off, _)| {
                            // Where the content starts in the raw piece when the normalizer
                            // moved it.
                            let at = if same {
                                off
                            } else {
                                self.tries
                                    .content
                                    .get(&id)
                                    .and_then(|c| s.find(c.as_str()))
                                    .unwrap_or(off.min(s.len()))
                            };
                            Hit {
                                id,
                                offset: base + at,
                            }
                        }));
                    }
                    if plain {
                        replan(self.tries.norm.plain.as_ref(), &n, &mut pieces);
                    }
                }
                for p in pieces {
                    match p {
                        Piece::Token(id, ..) => out.push(id),
                        Piece::Text(a, b) => self.pre_tokenize(&n[a..b], at_origin && a == 0, out),
                    }
                }
            }
            _ => self.pre_tokenize(&n, at_origin, out),
        }
    }

    fn pre_tokenize(&self, s: &str, at_origin: bool, out: &mut Sink<'_>) {
        if s.is_empty() {
            return;
        }
        match &self.pre {
            PreTok::Gpt2 { add_prefix_space } => {
                let owned;
                let s = if *add_prefix_space && !s.starts_with(' ') {
                    owned = format!(" {s}");
                    owned.as_str()
                } else {
                    s
                };
                let cls = self.gpt2.as_ref().expect("gpt2 classes");
                self.scan_words(s, out, |_, p| cls.match_at(s, p));
            }
            PreTok::Splits { regexes, table } => self.split_rec(regexes, table, s, out),
            PreTok::None => self.sp_word(s, out),
            PreTok::Metaspace {
                rep,
                prepend,
                split,
            } => {
                let mut buf = [0u8; 4];
                let reps: &str = rep.encode_utf8(&mut buf);
                let pre = match prepend {
                    PrependScheme::Always => true,
                    PrependScheme::First => at_origin,
                    PrependScheme::Never => false,
                };
                if !*split && !self.bpe.has_whole() && self.sp_segment.is_some() {
                    let first = s.chars().next();
                    let prefix = pre && first != Some(' ') && first != Some(*rep);
                    self.sp_stream(s, prefix, out);
                    return;
                }
                let mut w: String = if s.contains(' ') {
                    s.replace(' ', reps)
                } else {
                    s.to_string()
                };
                if pre && !w.starts_with(*rep) {
                    w.insert(0, *rep);
                }
                if *split {
                    let mut start = 0;
                    for (i, c) in w.char_indices() {
                        if c == *rep && i > start {
                            self.bpe.encode_word(&w[start..i], out);
                            start = i;
                        }
                    }
                    if start < w.len() {
                        self.bpe.encode_word(&w[start..], out);
                    }
                } else {
                    self.sp_word(&w, out);
                }
            }
        }
    }

    fn split_rec(&self, regexes: &[SplitMatcher], table: &ClassTable, s: &str, out: &mut Sink<'_>) {
        match regexes {
            [] => self.bpe.encode_word(s, out),
            // One Split (Llama-3, Qwen2, o200k): each piece straight to the model, no call per
            // word (the recursion's and the emit closure's prologues and epilogues were 13 % of
            // the instructions on code).
            [SplitMatcher::Scanner(g)] => self.scan_words(s, out, |b, p| g.match_at(b, p, table)),
            [SplitMatcher::O200k(o)] => self.scan_words(s, out, |b, p| o.match_at(b, p, table)),
            [re] => re.split(s, table, &mut |a, b| {
                self.bpe.encode_word(piece(s, a, b), out)
            }),
            [re, rest @ ..] => re.split(s, table, &mut |a, b| {
                self.split_rec(rest, table, piece(s, a, b), out)
            }),
        }
    }

    /// The model's ids of each piece of `s`, where `match_at(bytes, p)` is the end of the
    /// piece at `p` (a hand-written scanner: the Split shapes' `Scanner`s, the GPT-2
    /// pre-tokenizer): the scanner's match and the word cache's first-level hit in one loop,
    /// inlined together (a per-word call into a closure or `split_rec`'s recursion was 13 % of
    /// the instructions on code).
    #[inline(always)]
    fn scan_words(&self, s: &str, out: &mut Sink<'_>, match_at: impl Fn(&[u8], usize) -> usize) {
        let b = s.as_bytes();
        let whole = self.bpe.has_whole();
        let mut p = 0;
        while p < b.len() {
            let e = match_at(b, p);
            debug_assert!(e > p);
            let ahead = b.get(p..p + 32).map(|w| w.try_into().expect("32 bytes"));
            self.bpe.encode_piece(piece(s, p, e), ahead, whole, out);
            p = e;
        }
    }

    /// [`Self::sp_word`] of `rep? + s.replace(' ', rep)` without building that string: the
    /// segments (split before `rep` where no merge can cross, as proven at load) are assembled
    /// one by one from the slices between spaces / `rep`s. Needs `sp_segment` and no
    /// ignore_merges (the whole-word lookup would need the whole string).
    fn sp_stream(&self, s: &str, prefix: bool, out: &mut Sink<'_>) {
        let Some((rep, left)) = &self.sp_segment else {
            unreachable!("sp_stream without a segmentation proof")
        };
        let rep = *rep;
        let mut buf = [0u8; 4];
        let reps: &str = rep.encode_utf8(&mut buf);
        let lead = reps.as_bytes()[0];
        let mut seg = String::with_capacity(64);
        let mut prev: Option<char> = None;
        if prefix {
            seg.push(rep);
            prev = Some(rep);
        }
        let b = s.as_bytes();
        let mut pos = 0;
        loop {
            // The next space or `rep` at or after pos.
            let mut next = None;
            let mut from = pos;
            while let Some(k) = memchr::memchr2(b' ', lead, &b[from..]) {
                let i = from + k;
                if b[i] == b' ' {
                    next = Some((i, 1));
                    break;
                }
                if s[i..].starts_with(reps) {
                    next = Some((i, reps.len()));
                    break;
                }
                from = i + 1;
            }
            let end = next.map_or(b.len(), |(i, _)| i);
            if end > pos {
                let piece = &s[pos..end];
                seg.push_str(piece);
                prev = piece.chars().next_back();
            }
            let Some((i, len)) = next else { break };
            if !seg.is_empty() && prev.is_some_and(|p| self.sp_splits_after(p, rep, left)) {
                self.bpe.encode_split_newlines(&seg, out);
                seg.clear();
            }
            seg.push_str(reps);
            prev = Some(rep);
            pos = i + len;
        }
        if !seg.is_empty() {
            self.bpe.encode_split_newlines(&seg, out);
        }
    }

    /// Whether a segment may end after char `p`, before a `rep` (the load-time proof: no merge
    /// has a left side ending in the last char of `p`'s symbol). That last char is `p` itself,
    /// or '>' of its `<0xNN>` byte-fallback token; `rep` itself, unk and dropped chars: never.
    #[inline]
    fn sp_splits_after(&self, p: char, rep: char, left: &FxSet<char>) -> bool {
        if p.is_ascii() {
            return self.sp_ascii_splits[p as usize];
        }
        self.sp_splits_after_char(p, rep, left)
    }

    /// [`Self::sp_splits_after`] from the vocabulary and the proof's set.
    fn sp_splits_after_char(&self, p: char, rep: char, left: &FxSet<char>) -> bool {
        if p == rep {
            return false;
        }
        let last = if self.bpe.char_id(p).is_some() {
            Some(p)
        } else if self.bpe.has_byte_fallback() {
            Some('>')
        } else {
            None
        };
        last.is_some_and(|l| !left.contains(&l))
    }

    /// One SentencePiece model word (a whole normalized piece): the ignore_merges lookup on the
    /// whole word, then plain BPE on the segments no merge can cross (cached per segment).
    fn sp_word(&self, w: &str, out: &mut Sink<'_>) {
        if let Some(id) = self.bpe.whole_word(w.as_bytes()) {
            out.push(id);
            return;
        }
        let Some((rep, left)) = &self.sp_segment else {
            self.bpe.encode_split_newlines(w, out);
            return;
        };
        let mut start = 0;
        let mut prev: Option<char> = None;
        for (i, c) in w.char_indices() {
            if c == *rep && i > start {
                if prev.is_some_and(|p| self.sp_splits_after(p, *rep, left)) {
                    self.bpe.encode_split_newlines(&w[start..i], out);
                    start = i;
                }
            }
            prev = Some(c);
        }
        if start < w.len() {
            self.bpe.encode_split_newlines(&w[start..], out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use unicode_normalization_alignments::UnicodeNormalization;

    /// `nfc` (ASCII skipped eight bytes at a time, quick-checked runs left alone) equals the
    /// crate's NFC of the whole string, on random strings of ASCII, precomposed and decomposed
    /// letters, combining marks in and out of canonical order, singletons (Ω, Å), Hangul jamo
    /// and CJK, at every offset against the eight-byte steps.
    #[test]
    fn nfc_equals_the_crates_on_mixed_strings() {
        let alphabet: Vec<char> =
            "abcXYZ 09.\n\té\u{301}e\u{301}\u{323}\u{323}\u{301}Å\u{212B}\u{2126}A\u{30A}\u{1100}\u{1161}\u{11A8}가ﬁ中\u{344}\u{F900}ǅ"
                .chars()
                .collect();
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut changed = 0;
        for n in 0..4000 {
            let len = 1 + n % 40;
            let s: String = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    // Mostly ASCII, as text is, so runs land across the eight-byte steps.
                    if x % 4 != 0 {
                        alphabet[(x >> 8) as usize % 10]
                    } else {
                        alphabet[(x >> 8) as usize % alphabet.len()]
                    }
                })
                .collect();
            let want: String = s.nfc().map(|(c, _)| c).collect();
            let got = nfc(&s);
            assert_eq!(got, want, "{s:?}");
            changed += matches!(got, Cow::Owned(_)) as usize;
        }
        assert!(changed > 100, "only {changed} strings needed normalizing");
    }

    #[test]
    fn next_non_ascii_finds_the_first_high_byte_at_every_offset() {
        for len in 0..40 {
            for at in 0..=len {
                let mut b = vec![b'a'; len];
                if at < len {
                    b[at] = 0xC3;
                }
                for from in 0..=at.min(len) {
                    assert_eq!(
                        next_non_ascii(&b, from),
                        at,
                        "len {len} at {at} from {from}"
                    );
                }
            }
        }
    }
}
