//! The word cache all tokenizing threads share: one insert-only table of BPE results per
//! loaded tokenizer, so a word is merged once per run instead of once per thread.
//!
//! Per-thread maps made every one of 16 threads merge the same vocabulary again (5.4× the
//! merges of one thread on the 256 MB code corpus) and each held its own copy in the shared
//! L3; a 256k-word map per thread also overflowed on SentencePiece code, where a word is a whole
//! `foo(bar,baz)` run, and was cleared every few MB. This table is written once per word and
//! then only read: a slot is a `u64` (key tag, entry offset) published by one compare-exchange
//! after the entry's words are stored, so a reader that sees the slot sees the whole entry, and
//! no cache line is written again after warm-up. When it is full (arena spent, or a probe too
//! long) inserts stop and the caller keeps its per-thread map, as before this table existed.
//!
//! Exact by construction: an entry is the deterministic BPE of its key, and two threads racing
//! on one word store the same value (the loser finds the winner's slot).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use super::prefault::Prefaulter;

/// Words a table holds when nothing says how much text comes (the old per-thread bound).
pub const DEFAULT_WORDS: usize = 1 << 18;
/// The most words a table is sized for from its input (about 100 MiB, touched as it fills): a
/// 256k-word map, cleared every few MB of SentencePiece code, merged 3× the words this does.
pub const MAX_WORDS: usize = 1_500_000;
/// Arena words (8 bytes) budgeted per cached word: a header, a key of up to 16 bytes and up to
/// 6 ids take 6; longer words take more, shorter ones less.
const ARENA_PER_WORD: usize = 6;
/// Longest probe before a lookup gives up or an insert declares the table full.
const MAX_PROBE: usize = 32;

/// See the module doc.
pub(in crate::tokenize) struct SharedWords {
    /// Per slot: the key's tag (high half) and its entry offset + 1 (low half); 0 is empty.
    slots: Zeroed,
    /// Entries: a header word (key length, id count, lead flag), the key's bytes packed
    /// little-endian into words (zero-padded), then the ids two to a word.
    arena: Zeroed,
    slot_bits: u32,
    /// Arena words handed out (shared with the [`Prefaulter`], which stays ahead of it).
    next: Arc<Padded<AtomicUsize>>,
    full: Padded<AtomicBool>,
    /// Declared after the mappings' users but dropped first: see [`Drop`] below.
    prefaulter: Option<Prefaulter>,
}

impl Drop for SharedWords {
    fn drop(&mut self) {
        // The prefaulting thread touches the mappings: stop and join it before they go.
        self.prefaulter.take();
    }
}

/// Keeps the two counters written by inserts off the cache lines readers use.
#[repr(align(128))]
struct Padded<T>(T);

/// `n` zeroed atomics in an anonymous mapping: the OS hands the pages over untouched (a table
/// costs memory only as it fills), and asks for huge pages — lookups land at random over tens
/// of MiB, where 4 KiB pages cost a TLB miss each.
struct Zeroed {
    ptr: *mut AtomicU64,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only reached through `&[AtomicU64]`.
unsafe impl Send for Zeroed {}
unsafe impl Sync for Zeroed {}

fn zeroed(n: usize) -> Zeroed {
    if n == 0 {
        return Zeroed {
            ptr: std::ptr::NonNull::dangling().as_ptr(),
            len: 0,
        };
    }
    let bytes = n * std::mem::size_of::<AtomicU64>();
    // SAFETY: a fresh private anonymous mapping; checked for failure below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    assert!(
        p != libc::MAP_FAILED,
        "mapping {bytes} bytes for the word cache: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: advice on our own mapping; a kernel without THP ignores it.
    unsafe { libc::madvise(p, bytes, libc::MADV_HUGEPAGE) };
    Zeroed {
        ptr: p.cast(),
        len: n,
    }
}

impl std::ops::Deref for Zeroed {
    type Target = [AtomicU64];
    fn deref(&self) -> &[AtomicU64] {
        // SAFETY: `len` zero-initialised (valid) AtomicU64s, mapped for the life of `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for Zeroed {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping made in `zeroed`, unmapped once.
            unsafe { libc::munmap(self.ptr.cast(), self.len * std::mem::size_of::<AtomicU64>()) };
        }
    }
}

/// A slot's 32-bit key tag, from bits of the hash the slot index does not use (mixed: the
/// low bits of an Fx hash are weak).
#[inline]
fn tag(h: u64) -> u64 {
    (h ^ h >> 29).wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 32
}

/// Up to 8 bytes as a little-endian word, zero-padded. Loads the bytes in place (two
/// overlapping loads for 2–7 bytes): copying a short key into a stack buffer and reading it
/// back as words stalled every lookup on a failed store-to-load forward (~1/6 of the
/// first-level cache's time, perf annotate, phi-2 on code).
#[inline]
pub(in crate::tokenize) fn le_word(b: &[u8]) -> u64 {
    let n = b.len();
    if n >= 8 {
        return u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
    }
    if n >= 4 {
        let lo = u32::from_le_bytes(b[..4].try_into().expect("4 bytes")) as u64;
        let hi = u32::from_le_bytes(b[n - 4..].try_into().expect("4 bytes")) as u64;
        return lo | hi << (8 * (n - 4));
    }
    if n == 0 {
        return 0;
    }
    b[0] as u64 | (b[n / 2] as u64) << (8 * (n / 2)) | (b[n - 1] as u64) << (8 * (n - 1))
}

#[inline]
fn key_word(key: &[u8], w: usize) -> u64 {
    le_word(&key[w * 8..key.len().min(w * 8 + 8)])
}

impl SharedWords {
    /// An empty table of `words` words (0: no shared table, every thread caches in its own
    /// map; `DLM_PACK_WORD_CACHE` sets it through the run's tuning).
    pub fn new(words: usize) -> SharedWords {
        Self::for_words(words)
    }

    /// The table size for `bytes` of input files: small inputs do not fault in pages they never
    /// use (on a VM a page fault costs microseconds; a 32 MB run would spend a fifth of its
    /// time there), large ones get [`MAX_WORDS`].
    ///
    /// `byte_level`: words cut by a regex pre-tokenizer (Split shapes, GPT-2), whose distinct
    /// count grows like the square root of the text (Heaps' law: ~250k on 200 MB of code, ~110k
    /// on its first 30 MB), get `64·√bytes` — 2× that count even when `bytes` are zstd parquet
    /// at 5:1. The whole [`MAX_WORDS`] table (2^22 slots, 32 MB) spread those few words over
    /// 32 MB of slot lines, past a 2-core AMD box's 32 MB L3 that the shard encoders and the
    /// reader stream through too: 2^20 slots took 7–8 % less of a 2-thread pack's CPU there
    /// (Llama-3-shaped code, 200 MB). SentencePiece words (segments between spaces) are far more
    /// numerous (~850k distinct on the same 200 MB) and keep the linear rule.
    pub fn words_for_input(bytes: u64, byte_level: bool) -> usize {
        let words = if byte_level {
            (64.0 * (bytes as f64).sqrt()) as usize
        } else {
            (bytes / 16) as usize
        };
        words.clamp(DEFAULT_WORDS, MAX_WORDS)
    }

    /// An empty table for about `words` words (slots stay under half full).
    pub fn for_words(words: usize) -> SharedWords {
        let slot_bits = (2 * words.max(1))
            .next_power_of_two()
            .trailing_zeros()
            .max(4);
        let t = Self::with_capacity(slot_bits, words * ARENA_PER_WORD);
        if words == 0 {
            t.full.0.store(true, Ordering::Relaxed);
        }
        t
    }

    /// An empty table of 2^`slot_bits` slots and `arena_words` words (tests use small ones).
    pub fn with_capacity(slot_bits: u32, arena_words: usize) -> SharedWords {
        SharedWords {
            slots: zeroed(1 << slot_bits),
            arena: zeroed(arena_words),
            slot_bits,
            next: Arc::new(Padded(AtomicUsize::new(0))),
            full: Padded(AtomicBool::new(false)),
            prefaulter: None,
        }
    }

    /// Start faulting the table's pages in on a thread of its own — all slots, and the arena
    /// a window ahead of the inserts — so the tokenizing threads do not pay the kernel's
    /// first-touch zeroing (8–16 % of a one-thread run's worker, see [`super::prefault`]).
    pub fn prefault(&mut self) {
        if self.prefaulter.is_none() && !self.is_full() {
            let next = self.next.clone();
            self.prefaulter = Prefaulter::start(&self.slots, &self.arena, move || {
                next.0.load(Ordering::Relaxed)
            });
        }
    }

    /// No more inserts are taken (the caller caches in its own map from now on).
    #[inline]
    pub fn is_full(&self) -> bool {
        self.full.0.load(Ordering::Relaxed)
    }

    #[inline]
    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Index from the top bits (the multiply of an Fx hash mixes upwards).
    #[inline]
    fn first_slot(&self, h: u64) -> usize {
        (h >> (64 - self.slot_bits)) as usize
    }

    /// Whether the entry at `off` holds `key`; its header when it does.
    #[inline]
    fn matches(&self, off: usize, key: &[u8]) -> Option<u64> {
        let head = self.arena[off].load(Ordering::Relaxed);
        if (head & 0xff) as usize != key.len() {
            return None;
        }
        let words = key.len().div_ceil(8);
        (0..words)
            .all(|w| self.arena[off + 1 + w].load(Ordering::Relaxed) == key_word(key, w))
            .then_some(head)
    }

    /// Append the ids of `key` (hash `h`) to `out` and return its lead flag, if cached.
    #[inline]
    pub fn get(&self, key: &[u8], h: u64, out: &mut Vec<u32>) -> Option<bool> {
        let t = tag(h);
        let mut i = self.first_slot(h);
        for _ in 0..MAX_PROBE {
            let s = self.slots[i].load(Ordering::Acquire);
            if s == 0 {
                return None;
            }
            if s >> 32 == t {
                let off = (s & 0xffff_ffff) as usize - 1;
                if let Some(head) = self.matches(off, key) {
                    let n = (head >> 8 & 0xff) as usize;
                    let base = off + 1 + key.len().div_ceil(8);
                    for k in 0..n {
                        let w = self.arena[base + k / 2].load(Ordering::Relaxed);
                        out.push((w >> (32 * (k % 2))) as u32);
                    }
                    return Some(head >> 16 & 1 == 1);
                }
            }
            i = (i + 1) & self.mask();
        }
        None
    }

    /// Cache `ids` (and the lead flag) for `key` (hash `h`; at most 255 bytes and 255 ids).
    /// False when the table is full: the caller caches it elsewhere.
    pub fn insert(&self, key: &[u8], h: u64, ids: &[u32], lead: bool) -> bool {
        if self.is_full() || key.len() > 255 || ids.len() > 255 {
            return false;
        }
        let key_words = key.len().div_ceil(8);
        let n = 1 + key_words + ids.len().div_ceil(2);
        let off = self.next.0.fetch_add(n, Ordering::Relaxed);
        if off + n > self.arena.len() || off + 1 > u32::MAX as usize {
            self.full.0.store(true, Ordering::Relaxed);
            return false;
        }
        let a = &self.arena;
        a[off].store(
            key.len() as u64 | (ids.len() as u64) << 8 | (lead as u64) << 16,
            Ordering::Relaxed,
        );
        for w in 0..key_words {
            a[off + 1 + w].store(key_word(key, w), Ordering::Relaxed);
        }
        for (k, pair) in ids.chunks(2).enumerate() {
            let w = pair[0] as u64 | pair.get(1).map_or(0, |&b| (b as u64) << 32);
            a[off + 1 + key_words + k].store(w, Ordering::Relaxed);
        }
        let mine = tag(h) << 32 | (off as u64 + 1);
        let mut i = self.first_slot(h);
        for _ in 0..MAX_PROBE {
            let mut s = self.slots[i].load(Ordering::Acquire);
            if s == 0 {
                // Release: the entry's words above are visible to whoever reads this slot.
                match self.slots[i].compare_exchange(0, mine, Ordering::Release, Ordering::Acquire)
                {
                    Ok(_) => return true,
                    Err(cur) => s = cur,
                }
            }
            if s >> 32 == tag(h) && self.matches((s & 0xffff_ffff) as usize - 1, key).is_some() {
                // Another thread cached the same word first (same ids: BPE is deterministic).
                return true;
            }
            i = (i + 1) & self.mask();
        }
        self.full.0.store(true, Ordering::Relaxed);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(key: &[u8]) -> u64 {
        // A deliberately weak hash in the tests: 7 values, so many keys share a first slot and
        // a tag and are told apart by their bytes.
        (key.iter()
            .fold(0u64, |a, &b| a.wrapping_mul(31).wrapping_add(b as u64))
            % 7)
            << 61
    }

    #[test]
    fn byte_level_tables_grow_with_the_square_root_of_the_input_and_sentencepiece_linearly() {
        // Small inputs: the default either way.
        assert_eq!(SharedWords::words_for_input(0, true), DEFAULT_WORDS);
        assert_eq!(SharedWords::words_for_input(1 << 20, false), DEFAULT_WORDS);
        // 40 MB of zstd parquet (200 MB of text): byte-level gets ~405k words, 2^20 slots (8 MB)
        // instead of the whole table; SentencePiece the whole table.
        let bl = SharedWords::words_for_input(40_000_000, true);
        assert_eq!(bl, (64.0 * 40_000_000f64.sqrt()) as usize);
        assert_eq!((2 * bl).next_power_of_two().trailing_zeros(), 20);
        assert_eq!(SharedWords::words_for_input(40_000_000, false), MAX_WORDS);
        // Both stop at the most; the byte-level size never falls as the input grows.
        assert_eq!(SharedWords::words_for_input(1 << 40, true), MAX_WORDS);
        let sizes: Vec<usize> = (20..40)
            .map(|b| SharedWords::words_for_input(1 << b, true))
            .collect();
        assert!(sizes.windows(2).all(|w| w[0] <= w[1]), "{sizes:?}");
    }

    #[test]
    fn stores_and_returns_words_of_every_length() {
        let t = SharedWords::with_capacity(8, 1 << 12);
        let words: Vec<(Vec<u8>, Vec<u32>)> = (0..40usize)
            .map(|k| {
                let key: Vec<u8> = (0..k + 1)
                    .map(|j| b'a' + ((j * 7 + k) % 26) as u8)
                    .collect();
                let ids: Vec<u32> = (0..k % 9 + 1).map(|j| (k * 1000 + j) as u32).collect();
                (key, ids)
            })
            .collect();
        for (k, (key, ids)) in words.iter().enumerate() {
            assert!(t.insert(key, h(key), ids, k % 2 == 0));
        }
        for (k, (key, ids)) in words.iter().enumerate() {
            let mut out = vec![7];
            assert_eq!(t.get(key, h(key), &mut out), Some(k % 2 == 0), "{k}");
            assert_eq!(out[1..], ids[..], "{k}");
        }
        // A prefix of a stored key, or a key with a trailing zero byte, is another word.
        let stored: std::collections::HashSet<&[u8]> = words.iter().map(|w| &w.0[..]).collect();
        let mut z = words[5].0.clone();
        z.push(0);
        let others = [&words[20].0[..9], &words[33].0[..17], &z[..], b"not stored"];
        let mut out = Vec::new();
        for k in others {
            assert!(!stored.contains(k));
            assert_eq!(t.get(k, h(k), &mut out), None, "{k:?}");
        }
        assert!(out.is_empty());
    }

    #[test]
    fn a_full_table_refuses_inserts_and_keeps_what_it_has() {
        let t = SharedWords::with_capacity(6, 64);
        let mut stored = Vec::new();
        for k in 0..100u32 {
            let key = format!("word{k}");
            if !t.insert(key.as_bytes(), h(key.as_bytes()), &[k, k + 1, k + 2], false) {
                break;
            }
            stored.push(k);
        }
        assert!(t.is_full());
        assert!(!stored.is_empty() && stored.len() < 100);
        for k in stored {
            let key = format!("word{k}");
            let mut out = Vec::new();
            assert_eq!(
                t.get(key.as_bytes(), h(key.as_bytes()), &mut out),
                Some(false)
            );
            assert_eq!(out, [k, k + 1, k + 2]);
        }
        assert!(!t.insert(b"late", h(b"late"), &[1], true));
    }

    /// Pages of `z[from..to]` (in words) the kernel has in memory (mincore).
    fn resident(z: &Zeroed, from: usize, to: usize) -> usize {
        let page = 4096;
        let start = z.ptr as usize + from * 8;
        let len = (to - from) * 8;
        let mut v = vec![0u8; len.div_ceil(page)];
        // SAFETY: a page-aligned range inside the live mapping; `v` has a byte per page.
        let r = unsafe { libc::mincore(start as *mut _, len, v.as_mut_ptr()) };
        assert_eq!(r, 0, "mincore: {}", std::io::Error::last_os_error());
        v.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn prefaulting_takes_every_slot_page_and_the_arena_only_ahead_of_the_inserts() {
        const MIB: usize = 1 << 17; // words
        let mut t = SharedWords::with_capacity(17, 64 * MIB);
        let pages = |mib: usize| mib * 256;
        assert_eq!(resident(&t.slots, 0, t.slots.len()), 0);
        t.prefault();
        let wait = |what: &str, f: &dyn Fn() -> bool| {
            let t0 = std::time::Instant::now();
            while !f() {
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "{what}: not faulted in after 20 s"
                );
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        };
        wait("slots", &|| {
            resident(&t.slots, 0, t.slots.len()) == pages(1)
        });
        wait("the arena's first 16 MiB", &|| {
            resident(&t.arena, 0, 16 * MIB) == pages(16)
        });
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert_eq!(
            resident(&t.arena, 20 * MIB, 64 * MIB),
            0,
            "faulted in too far ahead"
        );
        // Inserts move the window: 24 MiB of entries in, the thread takes up to 40 MiB.
        let ids = [7u32; 254];
        let mut k = 0u64;
        while t.next.0.load(Ordering::Relaxed) < 24 * MIB {
            let key = k.to_le_bytes();
            assert!(t.insert(&key, k.wrapping_mul(0x9e37_79b9_7f4a_7c15), &ids, false));
            k += 1;
        }
        wait("the window past the inserts", &|| {
            resident(&t.arena, 0, 40 * MIB) == pages(40)
        });
        assert_eq!(resident(&t.arena, 44 * MIB, 64 * MIB), 0);
        let mut out = Vec::new();
        let h = 5u64.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        assert_eq!(t.get(&5u64.to_le_bytes(), h, &mut out), Some(false));
        assert_eq!(out, ids);
        drop(t); // stops and joins the thread before unmapping
    }

    #[test]
    fn threads_racing_on_the_same_words_all_read_them_back() {
        let t = SharedWords::with_capacity(12, 1 << 16);
        let ids = |k: u32| -> Vec<u32> { (0..k % 5 + 1).map(|j| k * 10 + j).collect() };
        std::thread::scope(|s| {
            for th in 0..8u32 {
                let t = &t;
                s.spawn(move || {
                    for round in 0..3 {
                        for k in 0..500u32 {
                            let k = (k + th * 37) % 500;
                            let key = format!("w{k}-{}", "x".repeat(k as usize % 20));
                            let kh = key
                                .bytes()
                                .fold(1u64, |a, b| a.wrapping_mul(0x100000001b3) ^ b as u64);
                            let mut out = Vec::new();
                            match t.get(key.as_bytes(), kh, &mut out) {
                                Some(lead) => {
                                    assert_eq!(out, ids(k));
                                    assert_eq!(lead, k % 3 == 0);
                                }
                                None => {
                                    assert!(round == 0 || t.is_full());
                                    assert!(t.insert(key.as_bytes(), kh, &ids(k), k % 3 == 0));
                                }
                            }
                        }
                    }
                });
            }
        });
        assert!(!t.is_full());
    }
}
