//! Exact encoding through the `tokenizers` crate's own pipeline (normalizer, pre-tokenizer,
//! model) with the added-token pass under our control, so that text from data stays text:
//! the byte ranges of a rendered string that came from data (a document, an MCQ question or
//! option, a prompt inside a chat template) are matched against the non-marker added tokens
//! only, the rest (the template's own `<|im_start|>`, `<s>`, `<think>` …) against all of them.
//!
//! Used where the fast path is not: `pack`'s crate fallback (the whole document is data),
//! `mcq` (its prompt template around the question and options) and the teacher (the chat
//! template around the prompt).
//!
//! Exactness: with no data range, ids are the crate's `encode(text, false)`; with the whole
//! text as data, they are those of the same tokenizer.json without its marker added tokens.
//! When no marker picked by the crate's matching overlaps data, the pieces are the crate's
//! own, so the ids equal split mode's wherever the data holds no added-token text. Otherwise
//! the string is matched run by run (maximal runs of template or data bytes, mapped through
//! the normalizer's alignments in the second pass): all tokens in template runs, non-markers
//! in data runs; no added token spans a run boundary.

use std::ops::Range;

use anyhow::{anyhow, Result};
use tokenizers::tokenizer::normalizer::Range as NRange;
use tokenizers::{
    Model, NormalizedString, Normalizer, OffsetType, PreTokenizedString, PreTokenizer, Token,
    Tokenizer,
};

use super::trie::{AddedTries, Piece, StageTries};
use super::Hit;

/// The added-token tries of a crate tokenizer.
pub struct Ranged {
    pub tries: AddedTries,
}

/// Whether `r` overlaps any of the sorted, disjoint `data` ranges.
fn overlaps(data: &[Range<usize>], r: Range<usize>) -> bool {
    data.iter().any(|d| d.start < r.end && r.start < d.end)
        || (r.start == r.end && data.iter().any(|d| d.start <= r.start && r.start < d.end))
}

impl Ranged {
    pub fn new(tok: &Tokenizer) -> Result<Ranged> {
        let dec = tok.get_added_tokens_decoder();
        Ok(Ranged {
            tries: AddedTries::new(dec.iter(), tok.get_normalizer())?,
        })
    }

    /// Ids of `text` (no special tokens added), in which the sorted, disjoint byte ranges
    /// `data` came from data. With `plain`, marker added tokens are not matched inside data;
    /// without, every token is (the crate's behaviour). Marker contents found in data are
    /// appended to `hits` (offsets in `text`).
    pub fn encode(
        &self,
        tok: &Tokenizer,
        text: &str,
        data: &[Range<usize>],
        plain: bool,
        hits: &mut Vec<Hit>,
    ) -> Result<Vec<u32>> {
        let mut pts = PreTokenizedString::from(text);
        let err = |e: tokenizers::Error| anyhow!("tokenizer: {e}");
        pts.split(|_, ns| Ok(self.stage(&self.tries.raw, ns, data, plain, hits)))
            .map_err(err)?;
        let norm = tok.get_normalizer();
        pts.split(|_, mut ns| {
            if let Some(n) = norm {
                n.normalize(&mut ns)?;
            }
            Ok(self.stage(&self.tries.norm, ns, data, plain, hits))
        })
        .map_err(err)?;
        if let Some(p) = tok.get_pre_tokenizer() {
            p.pre_tokenize(&mut pts).map_err(err)?;
        }
        let model = tok.get_model();
        pts.tokenize(|ns| model.tokenize(ns.get())).map_err(err)?;
        let enc = pts.into_encoding(None, 0, OffsetType::None).map_err(err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// One added-token pass over the piece `ns`.
    fn stage(
        &self,
        st: &StageTries,
        ns: NormalizedString,
        data: &[Range<usize>],
        plain: bool,
        hits: &mut Vec<Hit>,
    ) -> Vec<(NormalizedString, Option<Vec<Token>>)> {
        let Some(all) = &st.all else {
            return vec![(ns, None)];
        };
        let s = ns.get();
        let shift = ns.offsets_original().0;
        // The text's byte range that normalized bytes a..b came from.
        let orig = |a: usize, b: usize| -> Range<usize> {
            ns.convert_offsets(NRange::Normalized(a..b))
                .map_or(shift..shift, |r| r.start + shift..r.end + shift)
        };
        let mut pieces = Vec::new();
        let saw = all.split(s, &mut pieces);
        let (o0, o1) = ns.offsets_original();
        if saw && overlaps(data, o0..o1.max(o0 + 1)) {
            if let Some(m) = &st.markers {
                let mut occ = Vec::new();
                m.occurrences(s, &mut occ);
                for (id, a, b) in occ {
                    let r = orig(a, b);
                    if overlaps(data, r.clone()) {
                        hits.push(Hit {
                            id,
                            offset: r.start,
                        });
                    }
                }
            }
            let clash = all
                .marker_picks(s)
                .into_iter()
                .any(|(a, b)| overlaps(data, orig(a, b)));
            if plain && clash {
                pieces.clear();
                let mut start_offset = 0;
                let mut run_start = 0;
                let mut run_data: Option<bool> = None;
                let flush = |a: usize, b: usize, is_data: bool, so: &mut usize, p: &mut _| {
                    let t = if is_data {
                        st.plain.as_ref()
                    } else {
                        Some(all)
                    };
                    if let Some(t) = t {
                        t.split_span(s, a..b, so, p);
                    }
                };
                for (i, c) in s.char_indices() {
                    let d = overlaps(data, orig(i, i + c.len_utf8()));
                    match run_data {
                        Some(rd) if rd == d => {}
                        Some(rd) => {
                            flush(run_start, i, rd, &mut start_offset, &mut pieces);
                            run_start = i;
                            run_data = Some(d);
                        }
                        None => run_data = Some(d),
                    }
                }
                if let Some(rd) = run_data {
                    flush(run_start, s.len(), rd, &mut start_offset, &mut pieces);
                }
                if start_offset < s.len() {
                    pieces.push(Piece::Text(start_offset, s.len()));
                }
            }
        }
        pieces
            .into_iter()
            .map(|p| match p {
                Piece::Text(a, b) => (
                    ns.slice(NRange::Normalized(a..b))
                        .expect("added-token split on char boundaries"),
                    None,
                ),
                Piece::Token(id, a, b) => {
                    let slice = ns
                        .slice(NRange::Normalized(a..b))
                        .expect("added-token split on char boundaries");
                    let value = slice.get().to_owned();
                    let len = value.len();
                    (slice, Some(vec![Token::new(id, value, (0, len))]))
                }
            })
            .collect()
    }
}
