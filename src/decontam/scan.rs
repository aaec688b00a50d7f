//! Scanning documents against the index, in parallel (rayon): every document's n-grams are
//! looked up; the first matching n-gram per (document, benchmark item) is kept, then verified
//! word for word against the item's text so a 64-bit hash collision can never report a hit.

use rayon::prelude::*;

use super::index::NgramIndex;
use super::ngram::{self, Roller};

/// A verified overlap: document `doc` shares the n-gram at `text[start..end]` with `item`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    pub doc: usize,
    pub item: u32,
    pub start: usize,
    pub end: usize,
}

/// Keys probed per batch: computed (and their slots prefetched) first, then looked up.
const BATCH: usize = 64;

/// Hits of one text: the first n-gram span per distinct item.
pub fn scan_text(index: &NgramIndex, text: &str) -> Vec<(u32, usize, usize)> {
    let mut r = Roller::new(index.n);
    let mut out: Vec<(u32, usize, usize)> = Vec::new();
    let mut batch: Vec<(u64, usize, usize)> = Vec::with_capacity(BATCH);
    let probe = |batch: &mut Vec<(u64, usize, usize)>, out: &mut Vec<(u32, usize, usize)>| {
        for &(k, ws, e) in batch.iter() {
            if let Some(item) = index.get(k) {
                if !out.iter().any(|(i, _, _)| *i == item) {
                    out.push((item, ws, e));
                }
            }
        }
        batch.clear();
    };
    ngram::for_each_word(text, |w, s, e| {
        if let Some((k, ws)) = r.push(w, s) {
            index.prefetch(k);
            batch.push((k, ws, e));
            if batch.len() == BATCH {
                probe(&mut batch, &mut out);
            }
        }
    });
    probe(&mut batch, &mut out);
    out
}

/// Is the n-gram `span` (original text) really inside `item_text` (both normalised)?
pub fn verify(span: &str, item_text: &str) -> bool {
    let g = ngram::words(span);
    let w = ngram::words(item_text);
    !g.is_empty() && w.windows(g.len()).any(|win| win == g.as_slice())
}

/// Scan `texts` (document i = `texts[i]`) and return verified hits, ordered by document.
pub fn scan<'a, T>(index: &NgramIndex, texts: &'a [T]) -> Vec<Hit>
where
    T: AsRef<str> + Sync,
{
    // Off a terminal: a plain line every --progress-interval seconds.
    let ticker =
        crate::progress::SharedTicker::new("decontam scan", "documents", texts.len() as u64);
    let mut hits: Vec<Hit> = texts
        .par_iter()
        .enumerate()
        .flat_map_iter(|(d, t)| {
            let t = t.as_ref();
            ticker.add(1);
            scan_text(index, t)
                .into_iter()
                .filter(|(item, s, e)| verify(&t[*s..*e], &index.items[*item as usize].text))
                .map(move |(item, start, end)| Hit {
                    doc: d,
                    item,
                    start,
                    end,
                })
                .collect::<Vec<_>>()
        })
        .collect();
    ticker.finish();
    hits.sort_by_key(|h| (h.doc, h.start, h.item));
    hits
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decontam::index::RefItem;

    #[test]
    fn finds_planted_and_ignores_clean() {
        let bench = "Which gas do plants absorb from the air during photosynthesis to make glucose and oxygen";
        let idx = NgramIndex::build(
            8,
            vec![RefItem {
                benchmark: 0,
                row: 7,
                file: 0,
                text: bench.into(),
            }],
        );
        let docs = vec![
            "Completely unrelated text about rivers and mountains and the sea and more words here."
                .to_string(),
            format!("Intro words. {}? Then more.", bench.to_uppercase()),
            "absorb from the air during photosynthesis to".to_string(), // 7 words: below n
        ];
        let hits = scan(&idx, &docs);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].doc, 1);
        assert_eq!(ngram::words(&docs[1][hits[0].start..hits[0].end]).len(), 8);
        assert!(verify(&docs[1][hits[0].start..hits[0].end], bench));
        assert!(!verify("plants absorb nitrogen", bench));
    }
}
