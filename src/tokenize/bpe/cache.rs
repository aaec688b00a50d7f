//! The per-thread word cache of the BPE model: a direct-mapped first level of 64-byte slots
//! (short words: one line holds the word and its ids), a second level of inline short keys,
//! and the arena map behind them; their key layouts and hashes.

#[allow(unused_imports)]
use super::hasher::*;
use super::*;

pub struct ThreadCache {
    pub(super) owner: u64,
    /// First level: direct-mapped, one 64-byte line per slot holding the word and its ids
    /// inline, so a hit costs one memory access (the map below chases two heap pointers).
    pub(super) l1: Vec<Slot>,
    /// Level zero, probed first for words of at most 8 bytes: 16-byte slots holding up to two
    /// ids, four to a cache line, so the short words that are most of the pieces of code
    /// (2 bytes on average) find 4× the slots in the same memory.
    pub(super) l0: Vec<ShortSlot>,
    pub(super) words: WordMap,
    /// Scratch for the heap merge.
    pub(super) syms: Vec<Sym>,
    pub(super) heap: BinaryHeap<std::cmp::Reverse<(u32, u32, u32)>>,
}

impl ThreadCache {
    /// Cache `ids` of the `n`-byte word keyed `k` (hash `h`, first-level slot `i`) in level
    /// zero when it fits a [`ShortSlot`], else in the first level when it fits a [`Slot`].
    #[inline]
    pub(super) fn fill_first(
        &mut self,
        i: usize,
        k: [u64; 4],
        h: u64,
        n: usize,
        ids: &[u32],
        lead: bool,
    ) {
        let short = ShortSlot::index(h, n).is_some_and(|j| self.l0[j].fill(k[0], n, ids, lead));
        if !short && ids.len() <= SLOT_IDS {
            self.l1[i].fill(k, ids, lead);
        }
    }
}

thread_local! {
    pub(super) static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache {
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
pub(super) struct WordMap {
    /// Per slot: the key's tag (high half) and its entry index + 1 (low half; 0 is empty), so
    /// a probe past another key reads no entry. 2^[`MAP_BITS`] slots, at most half full.
    pub(super) slots: Vec<u64>,
    pub(super) entries: Vec<MapEntry>,
    pub(super) keys: Vec<u8>,
    pub(super) ids: Vec<u32>,
}

#[derive(Clone, Copy)]
pub(super) struct MapEntry {
    pub(super) key_off: u32,
    pub(super) ids_off: u32,
    pub(super) key_len: u8,
    pub(super) n_ids: u8,
    /// [`Bpe::merge`]'s lead flag of the word.
    pub(super) lead: bool,
}

/// log2 of the second-level slots (twice [`MAX_CACHED_WORDS`]).
pub(super) const MAP_BITS: u32 = 19;

impl WordMap {
    /// Empty, holding no memory until the next insert (most runs never get here: the shared
    /// table takes the words).
    pub(super) fn release(&mut self) {
        *self = WordMap::default();
    }

    pub(super) fn reset(&mut self) {
        self.slots.clear();
        self.slots.resize(1 << MAP_BITS, 0);
        self.entries.clear();
        self.keys.clear();
        self.ids.clear();
    }

    #[inline]
    pub(super) fn tag(h: u64) -> u32 {
        (h >> 16) as u32
    }

    /// The ids and lead flag of `key` (hash `h`).
    #[inline]
    pub(super) fn get(&self, key: &[u8], h: u64) -> Option<(&[u32], bool)> {
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
    pub(super) fn insert(&mut self, key: &[u8], h: u64, ids: &[u32], lead: bool) {
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

/// A first-level cache slot: a word of at most [`SLOT_KEY`] bytes and at most [`SLOT_IDS`] ids.
/// `head` is the key as [`short_key`] lays it out (zero-padded little-endian words, the length
/// in byte 30; 0xff = empty) with the id count in byte 31 (high bit: the lead flag), so a
/// lookup compares four words instead of calling memcmp.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Slot {
    pub(super) head: [u64; 4],
    pub(super) ids: [u32; SLOT_IDS],
}

pub(super) const SLOT_KEY: usize = 30;
pub(super) const SLOT_IDS: usize = 8;
/// log2 of the first-level slots per thread (2^14 × 64 B = 1 MiB, a core's L2).
pub(super) const L1_BITS: u32 = 14;
pub(super) const LEAD_BIT: u8 = 0x80;
/// `head[3]` without its id-count byte.
pub(super) const KEY_BITS: u64 = !(0xff << 56);
pub(super) const EMPTY_SLOT: Slot = Slot {
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
    pub(super) fn holds(&self, k: &[u64; 4]) -> bool {
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
    pub(super) fn append_to(&self, out: &mut Vec<u32>) -> bool {
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
    pub(super) fn fill(&mut self, k: [u64; 4], ids: &[u32], lead: bool) {
        let count = ids.len() as u8 | if lead { LEAD_BIT } else { 0 };
        self.head = k;
        self.head[3] |= (count as u64) << 56;
        self.ids[..ids.len()].copy_from_slice(ids);
    }
}

/// log2 of the level-zero slots per thread (2^15 × 16 B = 512 KiB).
pub(super) const L0_BITS: u32 = 15;
/// The longest word a [`ShortSlot`] holds.
pub(super) const SHORT_KEY: usize = 8;
/// A [`ShortSlot`]'s second id fits below this (its top byte holds the length and flags).
pub(super) const SHORT_ID_LIMIT: u32 = 1 << 24;
pub(super) const SHORT_TWO: u32 = 1 << 28;
pub(super) const SHORT_LEAD: u32 = 1 << 31;

/// A level-zero slot: a word of 1..=[`SHORT_KEY`] bytes (zero-padded little-endian, as
/// [`short_key`]'s first word) with one or two ids. `meta`: the second id (low 24 bits), the
/// word's length (bits 24..28; 0 = empty), two ids (bit 28), the lead flag (bit 31).
#[derive(Clone, Copy, Default)]
#[repr(C, align(16))]
pub(super) struct ShortSlot {
    pub(super) key: u64,
    pub(super) id0: u32,
    pub(super) meta: u32,
}

impl ShortSlot {
    /// The level-zero slot of an `n`-byte word whose cache hash is `h`; None unless the word
    /// has 1..=[`SHORT_KEY`] bytes.
    #[inline(always)]
    pub(super) fn index(h: u64, n: usize) -> Option<usize> {
        (n.wrapping_sub(1) < SHORT_KEY).then_some((h >> (64 - L0_BITS)) as usize)
    }

    #[inline(always)]
    pub(super) fn holds(&self, key: u64, n: usize) -> bool {
        (self.key ^ key) | (((self.meta >> 24) & 0xf) as u64 ^ n as u64) == 0
    }

    /// Append the held ids to `out` (both words written, the length grown by the count) and
    /// return the lead flag.
    #[inline(always)]
    pub(super) fn append_to(&self, out: &mut Vec<u32>) -> bool {
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
    pub(super) fn fill(&mut self, key: u64, n: usize, ids: &[u32], lead: bool) -> bool {
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
pub(super) fn short_key(key: &[u8]) -> [u64; 4] {
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
pub(super) fn masked_key(w: &[u8; 32], n: usize) -> [u64; 4] {
    let m = &KEY_MASKS[n];
    let word =
        |i: usize| u64::from_le_bytes(w[8 * i..8 * i + 8].try_into().expect("8 bytes")) & m[i];
    [word(0), word(1), word(2), word(3) | (n as u64) << 48]
}

/// Per key length, the bits of each of a key's four words that are its bytes.
pub(super) static KEY_MASKS: [[u64; 4]; SLOT_KEY + 1] = {
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
pub(super) fn short_hash(k: &[u64; 4], len: usize) -> u64 {
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
pub(super) fn word_hash(key: &[u8]) -> u64 {
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
pub(super) const MAX_CACHED_WORDS: usize = 1 << 18;
/// Words longer than this (bytes) are not cached.
pub(super) const MAX_CACHED_WORD_LEN: usize = 96;

#[derive(Clone, Copy)]
pub(super) struct Sym {
    pub(super) id: u32,
    pub(super) prev: u32,
    pub(super) next: u32,
    pub(super) dead: bool,
}

impl Sym {
    pub(super) fn new(id: u32) -> Sym {
        Sym {
            id,
            prev: NONE,
            next: NONE,
            dead: false,
        }
    }
}
