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

pub(crate) mod prefault;
pub(crate) mod shared_words;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use anyhow::{bail, Context, Result};

use super::json::ModelJson;
use shared_words::{le_word, SharedWords};

/// rustc's Fx hash: a multiply-rotate hash, much cheaper than SipHash for short keys.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            self.add(le_word(rest) ^ (rest.len() as u64) << 59);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    fn write_u32(&mut self, x: u32) {
        self.add(x as u64);
    }
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
    fn finish(&self) -> u64 {
        // The multiply mixes input bits only upwards; hashbrown takes the bucket from the low
        // bits, so without this rotation keys sharing a prefix (every SentencePiece word starts
        // with "▁") collide in long probe chains.
        self.0.rotate_left(26)
    }
}

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;
/// Maps keyed by token strings (load time only): foldhash, which mixes string bytes well.
pub type StrMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
pub type FxSet<K> = std::collections::HashSet<K, BuildHasherDefault<FxHasher>>;

/// GPT-2's byte → unicode map (bytes_to_unicode).
pub fn byte_to_char() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let keep = (b'!' as u32..=b'~' as u32).contains(&b)
            || (0xA1..=0xAC).contains(&b)
            || (0xAE..=0xFF).contains(&b);
        out[b as usize] = if keep {
            char::from_u32(b).expect("latin-1")
        } else {
            let c = char::from_u32(256 + n).expect("valid");
            n += 1;
            c
        };
    }
    out
}

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

pub struct ThreadCache {
    owner: u64,
    /// First level: direct-mapped, one 64-byte line per slot holding the word and its ids
    /// inline, so a hit costs one memory access (the map below chases two heap pointers).
    l1: Vec<Slot>,
    /// Level zero, probed first for words of at most 8 bytes: 16-byte slots holding up to two
    /// ids, four to a cache line, so the short words that are most of the pieces of code
    /// (2 bytes on average) find 4× the slots in the same memory.
    l0: Vec<ShortSlot>,
    words: WordMap,
    /// Scratch for the heap merge.
    syms: Vec<Sym>,
    heap: BinaryHeap<std::cmp::Reverse<(u32, u32, u32)>>,
}

impl ThreadCache {
    /// Cache `ids` of the `n`-byte word keyed `k` (hash `h`, first-level slot `i`) in level
    /// zero when it fits a [`ShortSlot`], else in the first level when it fits a [`Slot`].
    #[inline]
    fn fill_first(&mut self, i: usize, k: [u64; 4], h: u64, n: usize, ids: &[u32], lead: bool) {
        let short = ShortSlot::index(h, n).is_some_and(|j| self.l0[j].fill(k[0], n, ids, lead));
        if !short && ids.len() <= SLOT_IDS {
            self.l1[i].fill(k, ids, lead);
        }
    }
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache {
        owner: 0,
        l1: Vec::new(),
        l0: Vec::new(),
        words: WordMap::default(),
        syms: Vec::new(),
        heap: BinaryHeap::new(),
    });
}

/// The second-level word cache: open addressing over arenas (keys, ids), so filling and
/// clearing it allocates nothing once warm — a map of boxed keys and id vectors spent a tenth
/// of the time in malloc/free and page faults on code, where most words are seen once.
#[derive(Default)]
struct WordMap {
    /// Per slot: the key's tag (high half) and its entry index + 1 (low half; 0 is empty), so
    /// a probe past another key reads no entry. 2^[`MAP_BITS`] slots, at most half full.
    slots: Vec<u64>,
    entries: Vec<MapEntry>,
    keys: Vec<u8>,
    ids: Vec<u32>,
}

#[derive(Clone, Copy)]
struct MapEntry {
    key_off: u32,
    ids_off: u32,
    key_len: u8,
    n_ids: u8,
    /// [`Bpe::merge`]'s lead flag of the word.
    lead: bool,
}

/// log2 of the second-level slots (twice [`MAX_CACHED_WORDS`]).
const MAP_BITS: u32 = 19;

impl WordMap {
    /// Empty, holding no memory until the next insert (most runs never get here: the shared
    /// table takes the words).
    fn release(&mut self) {
        *self = WordMap::default();
    }

    fn reset(&mut self) {
        self.slots.clear();
        self.slots.resize(1 << MAP_BITS, 0);
        self.entries.clear();
        self.keys.clear();
        self.ids.clear();
    }

    #[inline]
    fn tag(h: u64) -> u32 {
        (h >> 16) as u32
    }

    /// The ids and lead flag of `key` (hash `h`).
    #[inline]
    fn get(&self, key: &[u8], h: u64) -> Option<(&[u32], bool)> {
        let mask = (1usize << MAP_BITS) - 1;
        let mut i = (h >> (64 - MAP_BITS)) as usize;
        let tag = Self::tag(h);
        loop {
            let s = *self.slots.get(i)?;
            if s == 0 {
                return None;
            }
            if (s >> 32) as u32 != tag {
                i = (i + 1) & mask;
                continue;
            }
            let e = self.entries[(s as u32) as usize - 1];
            let ko = e.key_off as usize;
            if e.key_len as usize == key.len() && &self.keys[ko..ko + key.len()] == key {
                let io = e.ids_off as usize;
                return Some((&self.ids[io..io + e.n_ids as usize], e.lead));
            }
            i = (i + 1) & mask;
        }
    }

    /// Insert `key` (absent, at most [`MAX_CACHED_WORD_LEN`] bytes); cleared when full.
    fn insert(&mut self, key: &[u8], h: u64, ids: &[u32], lead: bool) {
        if self.entries.len() >= MAX_CACHED_WORDS || self.slots.is_empty() {
            self.reset();
        }
        let mask = (1usize << MAP_BITS) - 1;
        let mut i = (h >> (64 - MAP_BITS)) as usize;
        while self.slots[i] != 0 {
            i = (i + 1) & mask;
        }
        self.entries.push(MapEntry {
            key_off: self.keys.len() as u32,
            ids_off: self.ids.len() as u32,
            key_len: key.len() as u8,
            n_ids: ids.len() as u8,
            lead,
        });
        self.slots[i] = (Self::tag(h) as u64) << 32 | self.entries.len() as u64;
        self.keys.extend_from_slice(key);
        self.ids.extend_from_slice(ids);
    }
}

/// A word's leading run of the SentencePiece space symbol `rep` (indentation, aligned
/// columns) is cut off and encoded from a table built at load, the rest cached on its own, so
/// `▁▁▁▁▁▁▁▁return` and `▁▁▁▁return` share the cache entry and merging of `▁return`.
///
/// Exact under conditions checked at load: every merge result containing `rep` is a pure run
/// of `rep`, or one `rep` followed by `rep`-free text (so `rep` runs merge only with `rep`
/// runs, and only a single `rep` merges rightwards); `threshold` is the lowest rank of a merge
/// whose left side ends in `rep` and right side starts with `rep`. For a word `rep^k w` (k ≥ 2,
/// `w` non-empty, `rep`-free), BPE(`rep^k w`) = BPE(`rep^(k-1)`) + BPE(`rep w`) whenever, in
/// BPE(`rep w`) alone, the leading `rep` is merged before any merge of rank ≥ `threshold`
/// happens (the "lead" flag [`Bpe::merge`] returns): until then every pair inside the run and
/// the pair across the cut rank ≥ `threshold`, so the whole word's merges are exactly those of
/// `rep w`; once the lead is merged, the pair across the cut would produce `rep rep x…`, which
/// no merge produces, so the two sides never interact again. Otherwise the whole word is merged.
struct RunSplit {
    rep: char,
    threshold: u32,
    /// BPE of `rep` × k for k ≤ [`MAX_RUN`].
    runs: Vec<Vec<u32>>,
}

/// Longest run with a precomputed encoding (longer words take the ordinary path).
const MAX_RUN: usize = 256;

/// A first-level cache slot: a word of at most [`SLOT_KEY`] bytes and at most [`SLOT_IDS`] ids.
/// `head` is the key as [`short_key`] lays it out (zero-padded little-endian words, the length
/// in byte 30; 0xff = empty) with the id count in byte 31 (high bit: the lead flag), so a
/// lookup compares four words instead of calling memcmp.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Slot {
    head: [u64; 4],
    ids: [u32; SLOT_IDS],
}

const SLOT_KEY: usize = 30;
const SLOT_IDS: usize = 8;
/// log2 of the first-level slots per thread (2^14 × 64 B = 1 MiB, a core's L2).
const L1_BITS: u32 = 14;
const LEAD_BIT: u8 = 0x80;
/// `head[3]` without its id-count byte.
const KEY_BITS: u64 = !(0xff << 56);
const EMPTY_SLOT: Slot = Slot {
    head: [0, 0, 0, 0xff << 48],
    ids: [0; SLOT_IDS],
};

impl Slot {
    /// Whether this slot holds the key laid out as `k` ([`short_key`]).
    ///
    /// Word by word, each load as wide as the store that made it: `k` is often still in the
    /// store buffer, and one 16-byte load over two 8-byte stores cannot be forwarded (that
    /// stall was half of `encode_cached`'s time, perf annotate, Llama-3-shaped code).
    #[inline(always)]
    fn holds(&self, k: &[u64; 4]) -> bool {
        let d = (self.head[0] ^ k[0])
            | (self.head[1] ^ k[1])
            | (self.head[2] ^ k[2])
            | ((self.head[3] & KEY_BITS) ^ k[3]);
        d == 0
    }

    /// Append the held ids to `out` and return the lead flag: all [`SLOT_IDS`] words are
    /// copied into reserved room and the length set to the count, one fixed-size copy instead
    /// of a `memmove` call per cached word (~2 % of a phi-2 pack on code).
    #[inline]
    fn append_to(&self, out: &mut Vec<u32>) -> bool {
        let count = (self.head[3] >> 56) as u8;
        let n = (count & !LEAD_BIT) as usize;
        out.reserve(SLOT_IDS);
        let len = out.len();
        // SAFETY: `reserve` made room for SLOT_IDS more ids after `len`; all SLOT_IDS are
        // written (initialised) before the length grows by `n <= SLOT_IDS` of them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ids.as_ptr(), out.as_mut_ptr().add(len), SLOT_IDS);
            out.set_len(len + n);
        }
        count & LEAD_BIT != 0
    }

    /// Hold key `k` ([`short_key`]) with `ids` (at most [`SLOT_IDS`]) and the lead flag.
    #[inline]
    fn fill(&mut self, k: [u64; 4], ids: &[u32], lead: bool) {
        let count = ids.len() as u8 | if lead { LEAD_BIT } else { 0 };
        self.head = k;
        self.head[3] |= (count as u64) << 56;
        self.ids[..ids.len()].copy_from_slice(ids);
    }
}

/// log2 of the level-zero slots per thread (2^15 × 16 B = 512 KiB).
const L0_BITS: u32 = 15;
/// The longest word a [`ShortSlot`] holds.
const SHORT_KEY: usize = 8;
/// A [`ShortSlot`]'s second id fits below this (its top byte holds the length and flags).
const SHORT_ID_LIMIT: u32 = 1 << 24;
const SHORT_TWO: u32 = 1 << 28;
const SHORT_LEAD: u32 = 1 << 31;

/// A level-zero slot: a word of 1..=[`SHORT_KEY`] bytes (zero-padded little-endian, as
/// [`short_key`]'s first word) with one or two ids. `meta`: the second id (low 24 bits), the
/// word's length (bits 24..28; 0 = empty), two ids (bit 28), the lead flag (bit 31).
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
struct ShortSlot {
    key: u64,
    id0: u32,
    meta: u32,
}

impl ShortSlot {
    /// The level-zero slot of an `n`-byte word whose cache hash is `h`; None unless the word
    /// has 1..=[`SHORT_KEY`] bytes.
    #[inline(always)]
    fn index(h: u64, n: usize) -> Option<usize> {
        (n.wrapping_sub(1) < SHORT_KEY).then_some((h >> (64 - L0_BITS)) as usize)
    }

    #[inline(always)]
    fn holds(&self, key: u64, n: usize) -> bool {
        (self.key ^ key) | (((self.meta >> 24) & 0xf) as u64 ^ n as u64) == 0
    }

    /// Append the held ids to `out` (both words written, the length grown by the count) and
    /// return the lead flag.
    #[inline(always)]
    fn append_to(&self, out: &mut Vec<u32>) -> bool {
        out.reserve(2);
        let len = out.len();
        let two = (self.meta & SHORT_TWO != 0) as usize;
        // SAFETY: `reserve` made room for 2 more ids after `len`; both are written before the
        // length grows by 1 + two <= 2.
        unsafe {
            let p = out.as_mut_ptr().add(len);
            p.write(self.id0);
            p.add(1).write(self.meta & (SHORT_ID_LIMIT - 1));
            out.set_len(len + 1 + two);
        }
        self.meta & SHORT_LEAD != 0
    }

    /// Hold `ids` (one or two, the second below [`SHORT_ID_LIMIT`]) for the word keyed `key`
    /// of `n` bytes; false (nothing stored) when they do not fit.
    #[inline]
    fn fill(&mut self, key: u64, n: usize, ids: &[u32], lead: bool) -> bool {
        let (id0, id1, two) = match *ids {
            [a] => (a, 0, 0),
            [a, b] if b < SHORT_ID_LIMIT => (a, b, SHORT_TWO),
            _ => return false,
        };
        debug_assert!((1..=SHORT_KEY).contains(&n));
        self.key = key;
        self.id0 = id0;
        self.meta = id1 | (n as u32) << 24 | two | if lead { SHORT_LEAD } else { 0 };
        true
    }
}

/// A key of at most [`SLOT_KEY`] bytes as a [`Slot`] holds it (id-count byte zero).
/// Built with constant indices, so the words stay in registers (a loop over `chunks(8)`
/// wrote them to the stack).
#[inline(always)]
fn short_key(key: &[u8]) -> [u64; 4] {
    let n = key.len();
    let w = |i: usize| {
        if n > 8 * i {
            le_word(&key[8 * i..n.min(8 * i + 8)])
        } else {
            0
        }
    };
    [w(0), w(1), w(2), w(3) | (n as u64) << 48]
}

/// [`short_key`] of the first `n` (at most [`SLOT_KEY`]) bytes of `w`, read as whole words
/// and masked by [`KEY_MASKS`]`[n]`.
#[inline(always)]
fn masked_key(w: &[u8; 32], n: usize) -> [u64; 4] {
    let m = &KEY_MASKS[n];
    let word =
        |i: usize| u64::from_le_bytes(w[8 * i..8 * i + 8].try_into().expect("8 bytes")) & m[i];
    [word(0), word(1), word(2), word(3) | (n as u64) << 48]
}

/// Per key length, the bits of each of a key's four words that are its bytes.
static KEY_MASKS: [[u64; 4]; SLOT_KEY + 1] = {
    let mut t = [[0u64; 4]; SLOT_KEY + 1];
    let mut n = 0;
    while n <= SLOT_KEY {
        let mut i = 0;
        while i < 4 {
            let keep = if n > 8 * i { n - 8 * i } else { 0 };
            t[n][i] = if keep >= 8 {
                !0
            } else {
                (1u64 << (8 * keep)) - 1
            };
            i += 1;
        }
        n += 1;
    }
    t
};

/// [`word_hash`] of a key from its [`short_key`] words.
#[inline(always)]
fn short_hash(k: &[u64; 4], len: usize) -> u64 {
    let mut h = FxHasher(len as u64);
    if len > 0 {
        h.add(k[0]);
    }
    if len > 8 {
        h.add(k[1]);
    }
    if len > 16 {
        h.add(k[2]);
    }
    if len > 24 {
        h.add(k[3] & 0xffff_ffff_ffff);
    }
    h.0
}

/// The cache hash of `key`: Fx over 8-byte words (index from the top bits: the multiply mixes
/// upwards).
#[inline]
fn word_hash(key: &[u8]) -> u64 {
    let mut h = FxHasher(key.len() as u64);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        h.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        h.add(le_word(rest));
    }
    h.0
}

/// Bound on cached words per thread (cleared when reached).
const MAX_CACHED_WORDS: usize = 1 << 18;
/// Words longer than this (bytes) are not cached.
const MAX_CACHED_WORD_LEN: usize = 96;
/// Above this many symbols the heap merge is used (below, the scan's one lookup per changed
/// pair beats the heap's extra validating lookup per pop; code's long identifiers and
/// punctuation runs sit between 24 and 48 symbols).
const HEAP_ABOVE: usize = 48;

/// The model options the fast path refuses.
fn check_model(m: &ModelJson<'_>) -> Result<()> {
    if m.ty.as_deref().is_some_and(|t| t != "BPE") {
        bail!("model is not BPE");
    }
    if m.dropout.is_some_and(|d| d > 0.0) {
        bail!("BPE dropout");
    }
    for (k, v) in [
        ("continuing_subword_prefix", &m.continuing_subword_prefix),
        ("end_of_word_suffix", &m.end_of_word_suffix),
    ] {
        if v.as_deref().is_some_and(|s| !s.is_empty()) {
            bail!("{k}");
        }
    }
    Ok(())
}

/// The initial symbols' ids: the 256 byte symbols of a byte-level model, else the vocabulary's
/// one-char tokens with byte fallback / unk.
fn alphabet_of(m: &ModelJson<'_>, vocab: &StrMap<&str, u32>, byte_level: bool) -> Result<Alphabet> {
    let unk = match m.unk_token.as_deref() {
        Some(u) => Some(*vocab.get(u).context("unk_token not in the vocabulary")?),
        None => None,
    };
    let byte_fallback = m.byte_fallback == Some(true);
    if byte_level {
        if byte_fallback {
            bail!("byte_fallback with a byte-level pre-tokenizer");
        }
        let b2c = byte_to_char();
        let mut ids = [0u32; 256];
        for b in 0..256 {
            let mut buf = [0u8; 4];
            ids[b] = *vocab
                .get(&*b2c[b].encode_utf8(&mut buf))
                .with_context(|| format!("byte {b} has no symbol"))?;
        }
        return Ok(Alphabet::Bytes(ids));
    }
    let mut ascii = [NONE; 128];
    let mut other = FxMap::default();
    for (t, &id) in vocab {
        let mut cs = t.chars();
        if let (Some(c), None) = (cs.next(), cs.next()) {
            if (c as u32) < 128 {
                ascii[c as usize] = id;
            } else {
                other.insert(c, id);
            }
        }
    }
    let fallback = if byte_fallback {
        let mut f = Box::new([0u32; 256]);
        for b in 0..256 {
            f[b] = *vocab
                .get(format!("<0x{b:02X}>").as_str())
                .with_context(|| format!("byte_fallback without <0x{b:02X}>"))?;
        }
        Some(f)
    } else {
        None
    };
    Ok(Alphabet::Chars {
        ascii,
        other,
        fallback,
        unk,
        fuse_unk: m.fuse_unk == Some(true),
    })
}

/// The merge table and what the load-time proofs read off the merges.
struct MergeScan {
    merges: FxMap<u64, u64>,
    /// The chars that precede `seg_rep` inside some merge result.
    seg_left: FxSet<char>,
    /// Some merge involves a newline symbol ('\n' itself, or its byte-fallback token).
    newline_merges: bool,
    /// Every merge result holding `run_rep` has a [`RunSplit`] shape.
    run_ok: bool,
    /// [`RunSplit::threshold`].
    threshold: u32,
}

/// The merges as (left << 32 | right) → (rank << 32 | merged id), with the facts the
/// segmentation (`seg_rep`) and run-split (`run_rep`) proofs need.
fn scan_merges(
    merge_list: &[(Cow<'_, str>, Cow<'_, str>)],
    vocab: &StrMap<&str, u32>,
    run_rep: Option<char>,
    seg_rep: Option<char>,
) -> Result<MergeScan> {
    let mut s = MergeScan {
        merges: FxMap::default(),
        seg_left: FxSet::default(),
        newline_merges: false,
        run_ok: run_rep.is_some(),
        threshold: u32::MAX,
    };
    s.merges.reserve(merge_list.len());
    let mut merged = String::new();
    for (rank, (a, b)) in merge_list.iter().enumerate() {
        let ia = *vocab.get(a.as_ref()).context("merge token not in vocab")?;
        let ib = *vocab.get(b.as_ref()).context("merge token not in vocab")?;
        merged.clear();
        merged.push_str(a);
        merged.push_str(b);
        let im = *vocab
            .get(merged.as_str())
            .context("merged token not in vocab")?;
        // The crate collects into a map: a later duplicate overwrites an earlier one.
        s.merges.insert(
            (ia as u64) << 32 | ib as u64,
            (rank as u64) << 32 | im as u64,
        );
        if a.contains('\n') || b.contains('\n') || a.as_ref() == "<0x0A>" || b.as_ref() == "<0x0A>"
        {
            s.newline_merges = true;
        }
        if let Some(rep) = run_rep {
            if merged.contains(rep) {
                let tail = merged.strip_prefix(rep).unwrap_or("");
                let pure = merged.chars().all(|c| c == rep);
                if !pure && (tail.is_empty() || tail.contains(rep) || !merged.starts_with(rep)) {
                    s.run_ok = false;
                }
            }
            if a.ends_with(rep) && b.starts_with(rep) {
                s.threshold = s.threshold.min(rank as u32);
            }
        }
        if let Some(rep) = seg_rep {
            let mut prev: Option<char> = None;
            for c in merged.chars() {
                if c == rep {
                    if let Some(p) = prev {
                        s.seg_left.insert(p);
                    }
                }
                prev = Some(c);
            }
        }
    }
    Ok(s)
}

/// `ignore_merges`: every vocabulary token as the word the pipeline hands over (raw bytes for
/// byte-level, the normalized string otherwise).
fn whole_words(vocab: &StrMap<&str, u32>, byte_level: bool) -> FxMap<Vec<u8>, u32> {
    let mut w = FxMap::default();
    if byte_level {
        let mut c2b: HashMap<char, u8> = HashMap::new();
        for (b, c) in byte_to_char().iter().enumerate() {
            c2b.insert(*c, b as u8);
        }
        for (tok, id) in vocab {
            let bytes: Option<Vec<u8>> = tok.chars().map(|c| c2b.get(&c).copied()).collect();
            if let Some(bytes) = bytes {
                w.insert(bytes, *id);
            }
        }
    } else {
        for (tok, id) in vocab {
            w.insert(tok.as_bytes().to_vec(), *id);
        }
    }
    w
}

/// The rest of [`RunSplit`]'s proof: it reads token strings through ids, so ids must name one
/// string each, and no initial symbol other than `rep`'s own may contain `rep` (unk, `<0xNN>`).
fn run_proof_holds(
    m: &ModelJson<'_>,
    vocab: &StrMap<&str, u32>,
    alphabet: &Alphabet,
    rep: char,
) -> bool {
    let mut ids: Vec<u32> = vocab.values().copied().collect();
    ids.sort_unstable();
    ids.dedup();
    let Alphabet::Chars {
        ascii,
        other,
        fallback,
        ..
    } = alphabet
    else {
        return false;
    };
    let has_id = if (rep as u32) < 128 {
        ascii[rep as usize] != NONE
    } else {
        other.contains_key(&rep)
    };
    has_id
        && ids.len() == vocab.len()
        && !m.unk_token.as_deref().is_some_and(|u| u.contains(rep))
        && !(fallback.is_some() && "<0x>0123456789ABCDEF".contains(rep))
}

impl Bpe {
    /// The model of a tokenizer.json `model` object, or why it is not supported exactly.
    /// `byte_level`: the pre-tokenizer maps bytes to GPT-2 characters. `seg_rep`: collect the
    /// chars that precede this char inside some merge result (for the SentencePiece
    /// segmentation proof in [`super::fast`]).
    pub fn from_model(m: &ModelJson<'_>, byte_level: bool, seg_rep: Option<char>) -> Result<Bpe> {
        check_model(m)?;
        let vocab_list = &m.vocab.as_ref().context("vocab")?.0;
        let merge_list = &m.merges.as_ref().context("merges")?.0;
        let mut vocab: StrMap<&str, u32> = StrMap::default();
        vocab.reserve(vocab_list.len());
        for (k, id) in vocab_list {
            vocab.insert(k.as_ref(), *id);
        }
        let alphabet = alphabet_of(m, &vocab, byte_level)?;
        // The run-split conditions (see [`RunSplit`]): char-level SentencePiece words only.
        let run_rep = seg_rep.filter(|_| !byte_level);
        let scan = scan_merges(merge_list, &vocab, run_rep, seg_rep)?;
        let whole = (m.ignore_merges == Some(true)).then(|| whole_words(&vocab, byte_level));
        // A newline symbol that no merge touches and that never becomes an unk (which
        // `fuse_unk` could fuse with its neighbours): character-level alphabets only.
        let newline_barrier = !byte_level
            && !scan.newline_merges
            && (vocab.contains_key("\n")
                || (matches!(
                    &alphabet,
                    Alphabet::Chars {
                        fallback: Some(_),
                        ..
                    }
                ) && vocab.contains_key("<0x0A>")));
        let run_rep =
            run_rep.filter(|&rep| scan.run_ok && run_proof_holds(m, &vocab, &alphabet, rep));
        let mut bpe = Bpe {
            alphabet,
            merges: scan.merges,
            whole,
            newline_barrier,
            run_split: None,
            seg_left: seg_rep.map(|_| scan.seg_left),
            vocab_len: vocab.len(),
            vocab: vocab
                .iter()
                .map(|(k, v)| (Box::<str>::from(*k), *v))
                .collect(),
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            shared: std::sync::OnceLock::new(),
            shared_words: std::sync::atomic::AtomicUsize::new(shared_words::DEFAULT_WORDS),
        };
        if let Some(rep) = run_rep {
            let rep_id = bpe.char_id(rep).expect("checked above");
            let mut heap = BinaryHeap::new();
            let runs = (0..=MAX_RUN)
                .map(|k| {
                    let mut syms = vec![Sym::new(rep_id); k];
                    let mut out = Vec::new();
                    bpe.merge(&mut syms, &mut out, &mut heap, 0);
                    out
                })
                .collect();
            bpe.run_split = Some(RunSplit {
                rep,
                threshold: scan.threshold,
                runs,
            });
        }
        Ok(bpe)
    }

    /// Ids of the char-level symbol of `c` (in the vocabulary), if any.
    pub fn char_id(&self, c: char) -> Option<u32> {
        match &self.alphabet {
            Alphabet::Chars { ascii, other, .. } => {
                if (c as u32) < 128 {
                    Some(ascii[c as usize]).filter(|&i| i != NONE)
                } else {
                    other.get(&c).copied()
                }
            }
            Alphabet::Bytes(_) => None,
        }
    }

    /// True for a char-level alphabet with `<0xNN>` byte fallback.
    pub fn has_byte_fallback(&self) -> bool {
        matches!(
            &self.alphabet,
            Alphabet::Chars {
                fallback: Some(_),
                ..
            }
        )
    }

    /// True with `ignore_merges` (whole words are looked up first).
    pub fn has_whole(&self) -> bool {
        self.whole.is_some()
    }

    /// Whether the model's alphabet is bytes (byte-level BPE: words come from a regex
    /// pre-tokenizer) rather than chars (SentencePiece).
    pub fn is_byte_level(&self) -> bool {
        matches!(self.alphabet, Alphabet::Bytes(_))
    }

    /// `ignore_merges`: the whole word's id when it is a vocabulary token.
    #[inline]
    pub fn whole_word(&self, word: &[u8]) -> Option<u32> {
        self.whole.as_ref().and_then(|w| w.get(word).copied())
    }

    /// Make the shared word cache for `words` words now (before the first document; later
    /// calls change nothing) and, with `prefault`, start faulting its pages in on a thread of
    /// its own, so the tokenizing threads do not (see [`prefault`]).
    pub fn size_shared_cache(&self, words: usize, prefault: bool) {
        self.shared_words
            .store(words, std::sync::atomic::Ordering::Relaxed);
        self.shared.get_or_init(|| {
            let mut t = SharedWords::new(words);
            if prefault {
                t.prefault();
            }
            t
        });
    }

    fn shared(&self) -> &SharedWords {
        self.shared.get_or_init(|| {
            SharedWords::new(self.shared_words.load(std::sync::atomic::Ordering::Relaxed))
        })
    }

    /// Run `f` with this thread's word cache (one cache borrow per document, not per word).
    pub fn with_sink<R>(&self, capacity: usize, f: impl FnOnce(&mut Sink<'_>) -> R) -> R {
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if c.owner != self.id {
                c.owner = self.id;
                c.words.release();
                c.l1.clear();
                c.l1.resize(1 << L1_BITS, EMPTY_SLOT);
                c.l0.clear();
                c.l0.resize(1 << L0_BITS, ShortSlot::default());
            }
            let mut sink = Sink {
                ids: Vec::with_capacity(capacity),
                cache: &mut c,
            };
            f(&mut sink)
        })
    }

    /// Ids of one model input `word` (with the ignore_merges shortcut).
    #[inline(always)]
    pub fn encode_word(&self, word: &str, out: &mut Sink<'_>) {
        if self.has_whole() && self.is_byte_level() {
            // Byte-level words only ever come through here, so the first-level cache may hold
            // the final (ignore_merges) result: one lookup per word instead of two.
            self.encode_cached(word, out, true);
            return;
        }
        if let Some(id) = self.whole_word(word.as_bytes()) {
            out.ids.push(id);
            return;
        }
        self.encode_plain(word, out);
    }

    /// Plain BPE of `word` (no ignore_merges), cached for short words.
    pub fn encode_plain(&self, word: &str, out: &mut Sink<'_>) {
        self.encode_cached(word, out, false);
    }

    /// [`Self::encode_plain`] of a character-level word, cut at its newlines when no merge
    /// involves a newline (proven at load): code's `"):\n"` tails then share the cache with
    /// every other line, and long multi-line words stay off the O(n log n) path. Exact: a
    /// merge across a cut would need a merge with the newline symbol on one side.
    pub fn encode_split_newlines(&self, word: &str, out: &mut Sink<'_>) {
        if !self.newline_barrier {
            return self.encode_sp(word, out);
        }
        let b = word.as_bytes();
        let mut start = 0;
        for i in memchr::memchr_iter(b'\n', b) {
            if i > start {
                self.encode_sp(&word[start..i], out);
            }
            self.encode_cached("\n", out, false);
            start = i + 1;
        }
        if start < b.len() {
            self.encode_sp(&word[start..], out);
        }
    }

    /// Plain BPE of a SentencePiece word: a leading run of `rep` from the table and the rest
    /// through the cache when [`RunSplit`]'s condition holds, else the whole word.
    #[inline]
    fn encode_sp(&self, word: &str, out: &mut Sink<'_>) {
        if let Some(rs) = &self.run_split {
            let mut buf = [0u8; 4];
            let r = rs.rep.encode_utf8(&mut buf).as_bytes();
            let b = word.as_bytes();
            let k = leading_run(b, r);
            if k >= 2 {
                let cut = (k - 1) * r.len();
                if k * r.len() == b.len() {
                    if k <= MAX_RUN {
                        out.ids.extend_from_slice(&rs.runs[k]);
                        return;
                    }
                } else if k - 1 <= MAX_RUN && !word[cut + r.len()..].contains(rs.rep) {
                    let start = out.ids.len();
                    out.ids.extend_from_slice(&rs.runs[k - 1]);
                    if self.encode_cached(&word[cut..], out, false) {
                        return;
                    }
                    out.ids.truncate(start);
                }
            }
        }
        self.encode_cached(word, out, false);
    }

    /// BPE of `word` through the caches; `whole`: the ignore_merges lookup after a first-level
    /// miss (its result is cached there too, never in the map of plain results). Returns the
    /// word's lead flag ([`Self::merge`]). The first-level hit is inlined into the caller (the
    /// scanner's loop); everything after a miss is [`Self::encode_missed`], out of line.
    #[inline(always)]
    fn encode_cached(&self, word: &str, out: &mut Sink<'_>, whole: bool) -> bool {
        let key = word.as_bytes();
        if key.len() > SLOT_KEY {
            return self.encode_missed(word, out, whole, word_hash(key), None);
        }
        self.encode_keyed(word, short_key(key), out, whole)
    }

    /// [`Self::encode_word`] of a byte-level word (`whole` = [`Self::has_whole`]) whose next 32
    /// bytes of text, when readable, are `ahead`: the first-level key is then those bytes as
    /// four whole words masked to the word's length (the word-by-word zero-padded loads were
    /// 6 % of the instructions on code).
    #[inline(always)]
    pub fn encode_piece(
        &self,
        word: &str,
        ahead: Option<&[u8; 32]>,
        whole: bool,
        out: &mut Sink<'_>,
    ) {
        let n = word.len();
        if n > SLOT_KEY {
            self.encode_missed(word, out, whole, word_hash(word.as_bytes()), None);
            return;
        }
        let k = match ahead {
            Some(w) => masked_key(w, n),
            None => short_key(word.as_bytes()),
        };
        self.encode_keyed(word, k, out, whole);
    }

    /// The first-level probe of `word`, whose [`short_key`] is `k`: a hit appends the cached
    /// ids, a miss goes to [`Self::encode_missed`]. Returns the lead flag.
    #[inline(always)]
    fn encode_keyed(&self, word: &str, k: [u64; 4], out: &mut Sink<'_>, whole: bool) -> bool {
        let n = word.len();
        let h = short_hash(&k, n);
        if let Some(j) = ShortSlot::index(h, n) {
            let s0 = &out.cache.l0[j];
            if s0.holds(k[0], n) {
                return s0.append_to(&mut out.ids);
            }
        }
        let i = (h >> (64 - L1_BITS)) as usize;
        let sl = &out.cache.l1[i];
        if sl.holds(&k) {
            return sl.append_to(&mut out.ids);
        }
        self.encode_missed(word, out, whole, h, Some((i, k)))
    }

    /// [`Self::encode_cached`] after a first-level miss: `h` is the word's cache hash, `slot`
    /// its first-level slot and key (None: too long for one).
    #[inline(never)]
    fn encode_missed(
        &self,
        word: &str,
        out: &mut Sink<'_>,
        whole: bool,
        h: u64,
        slot: Option<(usize, [u64; 4])>,
    ) -> bool {
        let c = &mut *out.cache;
        let key = word.as_bytes();
        let start = out.ids.len();
        let cacheable = key.len() <= MAX_CACHED_WORD_LEN;
        let mut hit = None;
        let shared = self.shared();
        // With `whole` (byte-level ignore_merges, whose words all come this way) the shared
        // table holds final results, vocabulary words' single ids included, so it is read
        // before the whole-word map: a hit there costs one probe instead of the map's
        // pointer chase to its boxed key plus the probe.
        if cacheable && whole {
            hit = shared.get(key, h, &mut out.ids);
        }
        if whole && hit.is_none() {
            if let Some(id) = self.whole_word(key) {
                out.ids.push(id);
                if let Some((i, k)) = slot {
                    c.fill_first(i, k, h, key.len(), &[id], false);
                }
                if cacheable {
                    shared.insert(key, h, &[id], false);
                }
                return false;
            }
        }
        if cacheable {
            if !whole {
                hit = shared.get(key, h, &mut out.ids);
            }
            if hit.is_none() && shared.is_full() {
                if let Some((ids, lead)) = c.words.get(key, h) {
                    out.ids.extend_from_slice(ids);
                    hit = Some(lead);
                }
            }
        }
        let (in_map, lead) = match hit {
            Some(lead) => (true, lead),
            None => {
                self.symbols(word, &mut c.syms);
                let threshold = self.run_split.as_ref().map_or(0, |r| r.threshold);
                let lead = self.merge(&mut c.syms, &mut out.ids, &mut c.heap, threshold);
                (false, lead)
            }
        };
        let ids = &out.ids[start..];
        if let Some((i, k)) = slot {
            c.fill_first(i, k, h, key.len(), ids, lead);
        }
        if !in_map && cacheable && !shared.insert(key, h, ids, lead) {
            c.words.insert(key, h, ids, lead);
        }
        lead
    }

    /// Initial symbols of `word`, exactly as the crate's `merge_word` builds them.
    fn symbols(&self, word: &str, syms: &mut Vec<Sym>) {
        syms.clear();
        match &self.alphabet {
            Alphabet::Bytes(ids) => {
                syms.extend(word.bytes().map(|b| Sym::new(ids[b as usize])));
            }
            Alphabet::Chars {
                fallback,
                unk,
                fuse_unk,
                ..
            } => {
                let mut pending: Option<u32> = None;
                for c in word.chars() {
                    if let Some(id) = self.char_id(c) {
                        if let Some(u) = pending.take() {
                            syms.push(Sym::new(u));
                        }
                        syms.push(Sym::new(id));
                        continue;
                    }
                    if let Some(f) = fallback {
                        let mut buf = [0u8; 4];
                        for b in c.encode_utf8(&mut buf).bytes() {
                            syms.push(Sym::new(f[b as usize]));
                        }
                        continue;
                    }
                    if let Some(u) = unk {
                        match (pending, fuse_unk) {
                            (Some(_), true) => {}
                            (Some(p), false) => {
                                syms.push(Sym::new(p));
                                pending = Some(*u);
                            }
                            (None, _) => pending = Some(*u),
                        }
                    }
                }
                if let Some(u) = pending {
                    syms.push(Sym::new(u));
                }
            }
        }
    }

    #[inline]
    fn lookup(&self, a: u32, b: u32) -> Option<u64> {
        self.merges.get(&((a as u64) << 32 | b as u64)).copied()
    }

    /// Merge `syms` and append the ids to `out`. Returns the lead flag: the first symbol was
    /// merged before any merge of rank ≥ `threshold` (see [`RunSplit`]).
    fn merge(
        &self,
        syms: &mut [Sym],
        out: &mut Vec<u32>,
        heap: &mut BinaryHeap<std::cmp::Reverse<(u32, u32, u32)>>,
        threshold: u32,
    ) -> bool {
        // Lead: None while undecided, then whether the first symbol merged in time.
        let mut lead: Option<bool> = None;
        let n = syms.len();
        if n <= HEAP_ABOVE {
            // Pair values (rank << 32 | merged id; MAX = no merge) kept per position, so each
            // merge looks up only the two pairs it changes: O(n) lookups, not O(n^2).
            let mut ids = [0u32; HEAP_ABOVE];
            let mut val = [u64::MAX; HEAP_ABOVE];
            for (i, s) in syms.iter().enumerate() {
                ids[i] = s.id;
            }
            let mut n = n;
            for i in 0..n.saturating_sub(1) {
                val[i] = self.lookup(ids[i], ids[i + 1]).unwrap_or(u64::MAX);
            }
            loop {
                // The lowest value, leftmost among equals (as the crate's heap pops it).
                let mut best = u64::MAX;
                let mut at = 0;
                for (i, &v) in val[..n.saturating_sub(1)].iter().enumerate() {
                    if v < best {
                        best = v;
                        at = i;
                    }
                }
                if best == u64::MAX {
                    break;
                }
                note_lead(&mut lead, (best >> 32) as u32, at == 0, threshold);
                ids[at] = best as u32;
                ids.copy_within(at + 2..n, at + 1);
                val.copy_within(at + 2..n, at + 1);
                n -= 1;
                val[n - 1] = u64::MAX;
                if at + 1 < n {
                    val[at] = self.lookup(ids[at], ids[at + 1]).unwrap_or(u64::MAX);
                } else {
                    val[at] = u64::MAX;
                }
                if at > 0 {
                    val[at - 1] = self.lookup(ids[at - 1], ids[at]).unwrap_or(u64::MAX);
                }
            }
            out.extend_from_slice(&ids[..n]);
            return lead == Some(true);
        }
        self.merge_heap(syms, out, heap, threshold)
    }

    /// The crate's `Word::merge_all`: a min-heap of (rank, position) over a linked list.
    fn merge_heap(
        &self,
        s: &mut [Sym],
        out: &mut Vec<u32>,
        heap: &mut BinaryHeap<std::cmp::Reverse<(u32, u32, u32)>>,
        threshold: u32,
    ) -> bool {
        let mut lead: Option<bool> = None;
        let n = s.len();
        for i in 0..n {
            s[i].prev = if i == 0 { NONE } else { i as u32 - 1 };
            s[i].next = if i + 1 == n { NONE } else { i as u32 + 1 };
        }
        heap.clear();
        for i in 0..n.saturating_sub(1) {
            if let Some(v) = self.lookup(s[i].id, s[i + 1].id) {
                heap.push(std::cmp::Reverse(((v >> 32) as u32, i as u32, v as u32)));
            }
        }
        while let Some(std::cmp::Reverse((rank, pos, new_id))) = heap.pop() {
            let p = pos as usize;
            if s[p].dead || s[p].next == NONE {
                continue;
            }
            let q = s[p].next as usize;
            // Expired entry: the pair at `p` is no longer the one that produces `new_id`.
            if self
                .lookup(s[p].id, s[q].id)
                .is_none_or(|v| v as u32 != new_id)
            {
                continue;
            }
            note_lead(&mut lead, rank, p == 0, threshold);
            s[p].id = new_id;
            s[p].next = s[q].next;
            s[q].dead = true;
            if s[q].next != NONE {
                s[s[q].next as usize].prev = pos;
            }
            if s[p].prev != NONE {
                let l = s[p].prev as usize;
                if let Some(v) = self.lookup(s[l].id, s[p].id) {
                    heap.push(std::cmp::Reverse(((v >> 32) as u32, l as u32, v as u32)));
                }
            }
            if s[p].next != NONE {
                let r = s[p].next as usize;
                if let Some(v) = self.lookup(s[p].id, s[r].id) {
                    heap.push(std::cmp::Reverse(((v >> 32) as u32, pos, v as u32)));
                }
            }
        }
        out.extend(s.iter().filter(|x| !x.dead).map(|x| x.id));
        lead == Some(true)
    }
}

/// How many times `r` (one char's UTF-8) repeats at the start of `b`: fixed-width compares
/// (a `starts_with` loop called memcmp once per `▁` of every indented word, 7 % of a
/// SentencePiece pack on code).
#[inline]
fn leading_run(b: &[u8], r: &[u8]) -> usize {
    fn count<const N: usize>(b: &[u8], r: &[u8]) -> usize {
        let r: [u8; N] = r.try_into().expect("N bytes");
        b.chunks_exact(N)
            .take_while(|c| <[u8; N]>::try_from(*c).expect("N bytes") == r)
            .count()
    }
    match r.len() {
        1 => count::<1>(b, r),
        2 => count::<2>(b, r),
        3 => count::<3>(b, r),
        _ => count::<4>(b, r),
    }
}

/// The lead flag's rule for one merge (rank `rank`, of the first symbol when `first`), shared by
/// both merge loops: undecided until a merge ranked at or above `threshold` (false) or one of
/// the first symbol (true), whichever comes first (see [`RunSplit`]).
#[inline]
fn note_lead(lead: &mut Option<bool>, rank: u32, first: bool, threshold: u32) {
    if lead.is_none() {
        if rank >= threshold {
            *lead = Some(false);
        } else if first {
            *lead = Some(true);
        }
    }
}

#[derive(Clone, Copy)]
struct Sym {
    id: u32,
    prev: u32,
    next: u32,
    dead: bool,
}

impl Sym {
    fn new(id: u32) -> Sym {
        Sym {
            id,
            prev: NONE,
            next: NONE,
            dead: false,
        }
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
