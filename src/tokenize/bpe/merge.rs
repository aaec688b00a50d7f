//! Encoding with the BPE model: a word through the cache levels, then its symbols merged by
//! rank (a scan for short words, the heap above [`HEAP_ABOVE`] symbols), the SentencePiece
//! leading run cut off ([`RunSplit`]).

#[allow(unused_imports)]
use super::cache::*;
#[allow(unused_imports)]
use super::hasher::*;
use super::*;

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
pub(super) struct RunSplit {
    pub(super) rep: char,
    pub(super) threshold: u32,
    /// BPE of `rep` × k for k ≤ [`MAX_RUN`].
    pub(super) runs: Vec<Vec<u32>>,
}

/// Longest run with a precomputed encoding (longer words take the ordinary path).
pub(super) const MAX_RUN: usize = 256;

/// Above this many symbols the heap merge is used (below, the scan's one lookup per changed
/// pair beats the heap's extra validating lookup per pop; code's long identifiers and
/// punctuation runs sit between 24 and 48 symbols).
pub(super) const HEAP_ABOVE: usize = 48;

impl Bpe {
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

    pub(super) fn shared(&self) -> &SharedWords {
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
    pub(super) fn encode_sp(&self, word: &str, out: &mut Sink<'_>) {
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
    pub(super) fn encode_cached(&self, word: &str, out: &mut Sink<'_>, whole: bool) -> bool {
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
    pub(super) fn encode_keyed(
        &self,
        word: &str,
        k: [u64; 4],
        out: &mut Sink<'_>,
        whole: bool,
    ) -> bool {
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
    pub(super) fn encode_missed(
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
    pub(super) fn symbols(&self, word: &str, syms: &mut Vec<Sym>) {
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
    pub(super) fn lookup(&self, a: u32, b: u32) -> Option<u64> {
        self.merges.get(&((a as u64) << 32 | b as u64)).copied()
    }

    /// Merge `syms` and append the ids to `out`. Returns the lead flag: the first symbol was
    /// merged before any merge of rank ≥ `threshold` (see [`RunSplit`]).
    pub(super) fn merge(
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
    pub(super) fn merge_heap(
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
pub(super) fn leading_run(b: &[u8], r: &[u8]) -> usize {
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
pub(super) fn note_lead(lead: &mut Option<bool>, rank: u32, first: bool, threshold: u32) {
    if lead.is_none() {
        if rank >= threshold {
            *lead = Some(false);
        } else if first {
            *lead = Some(true);
        }
    }
}
