//! Fixed-length packing: documents' token sequences (BOS? ids EOS) are concatenated and cut
//! into rows of exactly `seq_len` tokens; rows are grouped into shards of `rows_per_shard`.
//!
//! Per row, `doc_offsets` holds the cu_seqlens-style boundaries: `0`, every position where a
//! document starts inside the row, and the row length. `source` is the source of the
//! document holding the row's first token. The stream's final partial row is dropped (its
//! tokens counted) unless `pad_last`, which pads it with `pad_id` (the padding is its own
//! segment in `doc_offsets`). In segment mode ([`Packer::end_segment`], used by `--shard
//! I/N` workers) a unit's partial last row is emitted as a short row instead, so `merge`
//! can concatenate segments and re-cut them exactly (see the module docs of [`super`]).
//!
//! In whole-document mode ([`Packer::whole_docs`], `--format megatron`: Megatron's own
//! convention) nothing is cut: each document (BOS? ids EOS) is one row, `doc_offsets`
//! `[0, len]`, and a shard closes at the first document boundary at or past
//! `rows_per_shard × seq_len` tokens, so no document is split between shards and Megatron's
//! `GPTDataset` does the packing (an EOS before every document boundary it crosses).

use std::sync::Arc;

use crate::shards::{Column, RowBatch};

/// A finished shard's rows and where in the current document the next shard starts.
pub struct ShardOut {
    pub batch: RowBatch,
    /// Tokens of the document being pushed that went into this shard (or earlier shards).
    pub doc_tokens_done: usize,
}

pub struct Packer {
    seq_len: usize,
    rows_per_shard: usize,
    row: Vec<u32>,
    row_offsets: Vec<u32>,
    row_source: Option<Arc<str>>,
    ids: Vec<Vec<u32>>,
    offsets: Vec<Vec<u32>>,
    sources: Vec<String>,
    rows_closed: u64,
    /// Rows of the current shard, including those already taken by [`Packer::take_chunk`].
    shard_rows: usize,
    /// Segment mode: record a document starting at a row's first token too (as a second `0`
    /// in `doc_offsets`), so `merge` can tell it from a continuation.
    mark_row_start_docs: bool,
    /// Whole-document mode: one row per document (see the module doc).
    whole_docs: bool,
    /// Whole-document mode: tokens in the current shard.
    shard_tokens: usize,
}

impl Packer {
    pub fn new(seq_len: usize, rows_per_shard: usize) -> Packer {
        Packer {
            seq_len,
            rows_per_shard: rows_per_shard.max(1),
            row: Vec::with_capacity(seq_len),
            row_offsets: vec![0],
            row_source: None,
            ids: Vec::new(),
            offsets: Vec::new(),
            sources: Vec::new(),
            rows_closed: 0,
            shard_rows: 0,
            mark_row_start_docs: false,
            whole_docs: false,
            shard_tokens: 0,
        }
    }

    /// Whole-document mode (Megatron): every document is its own row, never cut.
    pub fn whole_docs(mut self) -> Packer {
        self.whole_docs = true;
        self
    }

    /// Segment mode (worker parts): also mark documents that start a row (see the field).
    pub fn marking_row_start_docs(mut self) -> Packer {
        self.mark_row_start_docs = true;
        self
    }

    /// Start counting closed rows at `n` (a resumed run).
    pub fn with_rows_closed(mut self, n: u64) -> Packer {
        self.rows_closed = n;
        self
    }

    /// Rows closed so far (in finished shards or waiting for their shard).
    pub fn rows_closed(&self) -> u64 {
        self.rows_closed
    }

    /// Tokens waiting in the current partial row.
    pub fn pending(&self) -> usize {
        self.row.len()
    }

    fn close_row(&mut self, out: &mut Vec<ShardOut>, doc_tokens_done: usize) {
        let mut offs = std::mem::replace(&mut self.row_offsets, vec![0]);
        offs.push(self.row.len() as u32);
        let row = std::mem::replace(&mut self.row, Vec::with_capacity(self.seq_len));
        self.ids.push(row);
        self.offsets.push(offs);
        self.sources.push(
            self.row_source
                .take()
                .map(|s| s.to_string())
                .unwrap_or_default(),
        );
        self.rows_closed += 1;
        self.shard_rows += 1;
        if !self.whole_docs && self.shard_rows == self.rows_per_shard {
            out.push(ShardOut {
                batch: self.take_batch(),
                doc_tokens_done,
            });
        }
    }

    /// The first `n` closed rows of the current shard, when that many wait, for a writer that
    /// encodes the shard while packing goes on; the shard's [`ShardOut`] (or `finish`) then
    /// holds only the rows not taken.
    pub fn take_chunk(&mut self, n: usize) -> Option<RowBatch> {
        if n == 0 || self.ids.len() < n {
            return None;
        }
        Some(RowBatch {
            input_ids: self.ids.drain(..n).collect(),
            columns: vec![
                (
                    "doc_offsets".into(),
                    Column::U32List(self.offsets.drain(..n).collect()),
                ),
                (
                    "source".into(),
                    Column::Str(self.sources.drain(..n).collect()),
                ),
            ],
        })
    }

    fn take_batch(&mut self) -> RowBatch {
        self.shard_rows = 0;
        self.shard_tokens = 0;
        RowBatch {
            input_ids: std::mem::take(&mut self.ids),
            columns: vec![
                (
                    "doc_offsets".into(),
                    Column::U32List(std::mem::take(&mut self.offsets)),
                ),
                (
                    "source".into(),
                    Column::Str(std::mem::take(&mut self.sources)),
                ),
            ],
        }
    }

    /// Push one document's tokens, skipping the first `skip` (a resumed document). Returns
    /// the shards completed by this document.
    pub fn push_doc(&mut self, tokens: &[u32], source: &Arc<str>, skip: usize) -> Vec<ShardOut> {
        let mut out = Vec::new();
        if self.whole_docs {
            // A resumed document (skip > 0) was written whole before the cut.
            if skip == 0 && !tokens.is_empty() {
                self.row.extend_from_slice(tokens);
                self.row_source = Some(source.clone());
                self.shard_tokens += tokens.len();
                self.close_row(&mut out, tokens.len());
                if self.shard_tokens >= self.rows_per_shard.saturating_mul(self.seq_len) {
                    out.push(ShardOut {
                        batch: self.take_batch(),
                        doc_tokens_done: tokens.len(),
                    });
                }
            }
            return out;
        }
        let mut i = skip.min(tokens.len());
        if i < tokens.len() && skip == 0 && (!self.row.is_empty() || self.mark_row_start_docs) {
            self.row_offsets.push(self.row.len() as u32);
        }
        while i < tokens.len() {
            if self.row.is_empty() {
                self.row_source = Some(source.clone());
            }
            let take = (self.seq_len - self.row.len()).min(tokens.len() - i);
            self.row.extend_from_slice(&tokens[i..i + take]);
            i += take;
            if self.row.len() == self.seq_len {
                self.close_row(&mut out, i);
            }
        }
        out
    }

    /// Segment mode: emit the partial row (if any) as a short row.
    pub fn end_segment(&mut self) -> Vec<ShardOut> {
        let mut out = Vec::new();
        if !self.row.is_empty() {
            self.close_row(&mut out, 0);
        }
        out
    }

    /// End of stream: the remaining rows as a last (possibly smaller) shard, and the number of
    /// tail tokens dropped. With `pad`, the tail row is padded with the id instead.
    pub fn finish(&mut self, pad: Option<u32>) -> (Option<RowBatch>, u64, u64) {
        let mut dropped = 0;
        let mut padded = 0;
        if !self.row.is_empty() {
            match pad {
                Some(p) => {
                    let real = self.row.len();
                    self.row_offsets.push(real as u32);
                    padded = (self.seq_len - real) as u64;
                    self.row.resize(self.seq_len, p);
                    let mut sink = Vec::new();
                    // close_row appends seq_len as the final offset.
                    self.close_row(&mut sink, 0);
                    if let Some(s) = sink.pop() {
                        return (Some(s.batch), 0, padded);
                    }
                }
                None => {
                    dropped = self.row.len() as u64;
                    self.row.clear();
                    self.row_offsets = vec![0];
                    self.row_source = None;
                }
            }
        }
        if self.shard_rows == 0 {
            (None, dropped, padded)
        } else {
            (Some(self.take_batch()), dropped, padded)
        }
    }
}

/// Shuffle a shard's rows in place with a permutation seeded by (seed, shard number).
pub fn shuffle_rows(batch: &mut RowBatch, seed: u64, shard: usize) {
    let n = batch.rows();
    let mut rng = crate::util::SplitMix(seed ^ (shard as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut perm: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        perm.swap(i, j);
    }
    fn apply<T: Clone>(v: &mut Vec<T>, perm: &[usize]) {
        let old = std::mem::take(v);
        *v = perm.iter().map(|&i| old[i].clone()).collect();
    }
    apply(&mut batch.input_ids, &perm);
    for (_, c) in batch.columns.iter_mut() {
        match c {
            Column::U32List(v) => apply(v, &perm),
            Column::U32(v) => apply(v, &perm),
            Column::Str(v) => apply(v, &perm),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offsets(b: &RowBatch) -> Vec<Vec<u32>> {
        match b.column("doc_offsets").unwrap() {
            Column::U32List(v) => v.clone(),
            _ => unreachable!(),
        }
    }

    #[test]
    fn rows_offsets_and_tail() {
        let src: Arc<str> = Arc::from("s");
        let mut p = Packer::new(4, 2);
        // docs of 3, 3, 5 tokens = 11 tokens = 2 rows + 3 tail.
        let mut shards = p.push_doc(&[1, 2, 3], &src, 0);
        shards.extend(p.push_doc(&[4, 5, 6], &src, 0));
        assert_eq!(shards.len(), 0);
        shards.extend(p.push_doc(&[7, 8, 9, 10, 11], &src, 0));
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].doc_tokens_done, 2);
        let b = &shards[0].batch;
        assert_eq!(b.input_ids, vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]]);
        assert_eq!(offsets(b), vec![vec![0, 3, 4], vec![0, 2, 4]]);
        let (last, dropped, _) = p.finish(None);
        assert!(last.is_none());
        assert_eq!(dropped, 3);
    }

    #[test]
    fn pad_last_and_resume_skip() {
        let src: Arc<str> = Arc::from("s");
        let mut p = Packer::new(4, 10);
        p.push_doc(&[1, 2, 3, 4, 5, 6], &src, 2);
        let (last, dropped, padded) = p.finish(Some(0));
        let last = last.unwrap();
        assert_eq!(dropped, 0);
        assert_eq!(padded, 0);
        assert_eq!(last.input_ids, vec![vec![3, 4, 5, 6]]);
        let mut p = Packer::new(4, 10);
        p.push_doc(&[1, 2, 3, 4, 5], &src, 0);
        let (last, _, padded) = p.finish(Some(9));
        let last = last.unwrap();
        assert_eq!(padded, 3);
        assert_eq!(last.input_ids[1], vec![5, 9, 9, 9]);
        assert_eq!(offsets(&last)[1], vec![0, 1, 4]);
    }

    #[test]
    fn whole_docs_are_rows_and_shards_end_at_documents() {
        let src: Arc<str> = Arc::from("s");
        // seq_len 4 × 2 rows: a shard closes at the first document end at or past 8 tokens.
        let mut p = Packer::new(4, 2).whole_docs();
        assert!(p.push_doc(&[1, 2, 3], &src, 0).is_empty());
        let shards = p.push_doc(&[4, 5, 6, 7, 8, 9], &src, 0);
        assert_eq!(shards.len(), 1);
        assert_eq!(shards[0].doc_tokens_done, 6);
        let b = &shards[0].batch;
        assert_eq!(b.input_ids, vec![vec![1, 2, 3], vec![4, 5, 6, 7, 8, 9]]);
        assert_eq!(offsets(b), vec![vec![0, 3], vec![0, 6]]);
        // A resumed document already written whole adds nothing.
        assert!(p.push_doc(&[4, 5, 6, 7, 8, 9], &src, 6).is_empty());
        assert!(p.push_doc(&[10], &src, 0).is_empty());
        let (last, dropped, padded) = p.finish(Some(0));
        assert_eq!((dropped, padded), (0, 0), "nothing cut, nothing padded");
        assert_eq!(last.unwrap().input_ids, vec![vec![10]]);
        assert_eq!(p.rows_closed(), 3);
    }

    #[test]
    fn shuffle_is_a_seeded_permutation() {
        let mut b = RowBatch {
            input_ids: (0..20u32).map(|i| vec![i]).collect(),
            columns: vec![(
                "source".into(),
                Column::Str((0..20).map(|i| i.to_string()).collect()),
            )],
        };
        let orig = b.clone();
        shuffle_rows(&mut b, 7, 0);
        assert_ne!(b, orig);
        let mut c = orig.clone();
        shuffle_rows(&mut c, 7, 0);
        assert_eq!(b, c);
        let mut ids: Vec<u32> = b.input_ids.iter().map(|r| r[0]).collect();
        if let Column::Str(s) = b.column("source").unwrap() {
            for (i, r) in b.input_ids.iter().enumerate() {
                assert_eq!(s[i], r[0].to_string());
            }
        }
        ids.sort();
        assert_eq!(ids, (0..20).collect::<Vec<_>>());
    }
}
