//! The BPE model of the fast path: symbols → merges by rank → ids, identical to the
//! `tokenizers` crate's `BPE` (no dropout, no subword prefix/suffix).
//!
//! Two symbol alphabets: byte-level (each UTF-8 byte is a symbol, GPT-2/Llama-3/Qwen) and
//! character-level (SentencePiece-style: each char is a symbol, `<0xNN>` byte fallback, unk with
//! optional fusing). Merging: the lowest-ranked adjacent pair first, leftmost among equals — for
//! short words a scan over per-position pair ranks, each merge looking up only the two pairs it
//! changes (cheaper than a heap below ~48 symbols), and the crate's own heap-over-linked-list
//! algorithm, O(n log n), above that, so one long "word" (a SentencePiece document is one) is
//! never quadratic. Results are cached: per thread a direct-mapped first level (word and ids
//! inline in one 64-byte line), behind it one insert-only table all threads share
//! ([`shared_words`]: a word is merged once per run, not once per thread), and a
//! per-thread arena map once that table is full. On
//! SentencePiece words a leading run of `▁` (indentation) is cut off and taken from a table
//! built at load, where the merges prove the cut exact ([`RunSplit`]), so code's
//! `▁▁▁▁▁▁▁▁return` shares the cache entry and the merging of `▁return`.
//!
//! Why not the `bpe` crate's linear-time encoder: it is exact for vocabularies whose token ids
//! follow merge order (tiktoken), which HF files do not promise, and the per-word cache already
//! removes merging from the profile on natural text (see bench/results/tokenizers.md).

mod cache;
mod hasher;
mod merge;
mod model;
pub(crate) mod prefault;
pub(crate) mod shared_words;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap};

use anyhow::{bail, Context, Result};

use super::json::ModelJson;
use shared_words::{le_word, SharedWords};

#[allow(unused_imports)]
use cache::*;
pub use hasher::{byte_to_char, FxHasher, FxMap, FxSet, StrMap};
#[allow(unused_imports)]
use merge::*;
#[allow(unused_imports)]
use model::*;

/// How text becomes initial symbols.
pub enum Alphabet {
    /// Every byte is a symbol: the id of its GPT-2 byte-level character.
    Bytes([u32; 256]),
    /// Every char is a symbol when in the vocabulary; else `<0xNN>` tokens (byte fallback) or unk.
    Chars {
        ascii: [u32; 128],
        other: FxMap<char, u32>,
        /// `<0xNN>` ids, when byte_fallback is on (all 256 present).
        fallback: Option<Box<[u32; 256]>>,
        unk: Option<u32>,
        fuse_unk: bool,
    },
}

const NONE: u32 = u32::MAX;

/// Merge table, alphabet and the ignore_merges whole-word table.
pub struct Bpe {
    pub alphabet: Alphabet,
    /// (left << 32 | right) → (rank << 32 | merged id).
    merges: FxMap<u64, u64>,
    /// With `ignore_merges`: whole words found in the vocabulary (the word's text as the
    /// pipeline hands it over: raw bytes for byte-level, the normalized string otherwise).
    whole: Option<FxMap<Vec<u8>, u32>>,
    /// The chars that precede `seg_rep` inside some merge result (when asked for).
    pub seg_left: Option<FxSet<char>>,
    /// No merge can cross a newline (see [`Bpe::encode_split_newlines`]).
    newline_barrier: bool,
    /// Runs of the SentencePiece space symbol cut off a word (see [`RunSplit`]).
    run_split: Option<RunSplit>,
    /// Distinct tokens in the model vocabulary (the crate's `get_vocab_size`).
    pub vocab_len: usize,
    /// Token → id of the model vocabulary.
    pub vocab: StrMap<Box<str>, u32>,
    /// Cache generation: thread-local caches never mix tokenizers.
    id: u64,
    /// The word cache every thread shares (the per-thread map takes over when it is full),
    /// made by [`Self::size_shared_cache`], else at the first insert.
    shared: std::sync::OnceLock<SharedWords>,
    shared_words: std::sync::atomic::AtomicUsize,
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// Output ids plus this thread's word cache, threaded through one document's encoding.
pub struct Sink<'a> {
    pub ids: Vec<u32>,
    cache: &'a mut ThreadCache,
}

impl Sink<'_> {
    #[inline]
    pub fn push(&mut self, id: u32) {
        self.ids.push(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys of every length a slot holds, with zero bytes and 0xff bytes (the empty marker's
    /// value) inside: the four-word compare must tell them apart exactly as byte equality does,
    /// and the short hash must be the long one.
    #[test]
    fn slot_keys_compare_and_hash_as_bytes() {
        let mut keys: Vec<Vec<u8>> = vec![vec![]];
        for len in 1..=SLOT_KEY {
            keys.push((0..len).map(|i| b'a' + (i % 26) as u8).collect());
            keys.push(vec![0u8; len]);
            keys.push(vec![0xffu8; len]);
            let mut k: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            k[len - 1] = 0;
            keys.push(k);
        }
        for a in &keys {
            let ka = short_key(a);
            assert_eq!(short_hash(&ka, a.len()), word_hash(a), "{a:?}");
            let mut slot = EMPTY_SLOT;
            assert!(!slot.holds(&ka), "the empty slot matched {a:?}");
            // Fewer ids after more: the stale ones past the count never show.
            for (n, lead) in [(SLOT_IDS, true), (0, false), (3, true), (1, false)] {
                let ids: Vec<u32> = (0..n as u32).map(|i| 100 + i).collect();
                slot.fill(ka, &ids, lead);
                let mut out = vec![7, 7];
                assert_eq!(slot.append_to(&mut out), lead);
                assert_eq!(out[2..], ids[..], "{a:?}: {n} ids");
                assert_eq!(out[..2], [7, 7]);
            }
            for b in &keys {
                assert_eq!(slot.holds(&short_key(b)), a == b, "{a:?} vs {b:?}");
            }
        }
    }

    /// Level-zero slots: keys of 1..=8 bytes (zeros and 0xff inside) compare as bytes, the
    /// empty slot holds nothing, one or two ids round-trip with the lead flag, and what does
    /// not fit (three ids, a second id of 2^24 or more) is refused and leaves the slot as it was.
    #[test]
    fn short_slots_hold_one_or_two_ids_of_words_up_to_eight_bytes() {
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for len in 1..=SHORT_KEY {
            keys.push((0..len).map(|i| b'a' + i as u8).collect());
            keys.push(vec![0u8; len]);
            keys.push(vec![0xffu8; len]);
        }
        for a in &keys {
            let ka = short_key(a)[0];
            let mut slot = ShortSlot::default();
            assert!(!slot.holds(ka, a.len()), "the empty slot matched {a:?}");
            for (ids, lead) in [
                (vec![5u32], true),
                (vec![u32::MAX, SHORT_ID_LIMIT - 1], false),
            ] {
                assert!(slot.fill(ka, a.len(), &ids, lead));
                let mut out = vec![7];
                assert_eq!(slot.append_to(&mut out), lead);
                assert_eq!(out[1..], ids[..], "{a:?}");
                assert_eq!(out[0], 7);
            }
            assert!(!slot.fill(ka, a.len(), &[1, 2, 3], true));
            assert!(!slot.fill(ka, a.len(), &[1, SHORT_ID_LIMIT], true));
            let mut out = Vec::new();
            assert!(!slot.append_to(&mut out), "a refused fill changed the slot");
            assert_eq!(out, [u32::MAX, SHORT_ID_LIMIT - 1]);
            for b in &keys {
                assert_eq!(
                    slot.holds(short_key(b)[0], b.len()),
                    a == b,
                    "{a:?} vs {b:?}"
                );
            }
        }
    }

    /// Every length up to a slot's, every content: the masked whole-word loads build the key
    /// the zero-padded loads do.
    #[test]
    fn masked_key_is_short_key() {
        let mut rng = crate::util::SplitMix(7);
        for _ in 0..200 {
            let w: [u8; 32] = std::array::from_fn(|_| rng.next_u64() as u8);
            for n in 0..=SLOT_KEY {
                assert_eq!(masked_key(&w, n), short_key(&w[..n]), "{n} bytes of {w:?}");
            }
        }
    }

    /// Every length 0..=8 and every byte position: the in-place loads build the word a
    /// zero-padded copy does.
    #[test]
    fn le_word_is_the_zero_padded_little_endian_word() {
        let src: Vec<u8> = (1..=8u8).map(|i| i.wrapping_mul(37) | 0x80).collect();
        for n in 0..=8 {
            let mut b = [0u8; 8];
            b[..n].copy_from_slice(&src[..n]);
            assert_eq!(le_word(&src[..n]), u64::from_le_bytes(b), "{n} bytes");
        }
    }

    #[test]
    fn leading_runs_of_one_to_four_byte_chars() {
        for r in ["a", "é", "▁", "𝄞"] {
            let rb = r.as_bytes();
            for k in 0..6 {
                // A tail of the char's first byte only: a 1-byte char repeats once more, a
                // longer one does not (a partial char is no repeat).
                for tail in [&b""[..], b"x", &rb[..1]] {
                    let mut w = rb.repeat(k);
                    w.extend_from_slice(tail);
                    let want = if tail == &rb[..1] && rb.len() == 1 {
                        k + 1
                    } else {
                        k
                    };
                    assert_eq!(leading_run(&w, rb), want, "{r} x {k} + {tail:?}");
                }
            }
        }
    }
}
