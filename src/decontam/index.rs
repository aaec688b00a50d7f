//! The compact n-gram index over benchmark items: an open-addressing table of u64 keys
//! (power-of-two, load ≤ 2/3, linear probing) mapping each n-gram to the first item holding it,
//! 12 bytes a slot; plus the items themselves, so a hit can be verified word for word and
//! reported with its benchmark and row.

use rayon::prelude::*;

use super::ngram;

/// One benchmark item (a row of an eval set).
#[derive(Debug, Clone)]
pub struct RefItem {
    /// Index into the benchmark list.
    pub benchmark: u32,
    /// 0-based row within its benchmark file.
    pub row: u64,
    /// Index into the benchmark's file list.
    pub file: u32,
    pub text: String,
}

pub struct NgramIndex {
    pub n: usize,
    mask: usize,
    keys: Vec<u64>,
    vals: Vec<u32>,
    len: usize,
    pub items: Vec<RefItem>,
    /// Items with fewer than `n` words (no n-gram to index).
    pub too_short: Vec<u32>,
}

impl NgramIndex {
    /// Build over `items` (keys computed in parallel, inserted in item order so the first
    /// item holding an n-gram is the one reported).
    pub fn build(n: usize, items: Vec<RefItem>) -> NgramIndex {
        let per_item: Vec<Vec<u64>> = items
            .par_iter()
            .map(|it| ngram::keys(&it.text, n))
            .collect();
        let total: usize = per_item.iter().map(Vec::len).sum();
        let cap = ((total * 3 / 2).max(16)).next_power_of_two();
        let mut idx = NgramIndex {
            n,
            mask: cap - 1,
            keys: vec![0; cap],
            vals: vec![0; cap],
            len: 0,
            items: Vec::new(),
            too_short: Vec::new(),
        };
        for (i, ks) in per_item.iter().enumerate() {
            if ks.is_empty() {
                idx.too_short.push(i as u32);
            }
            for &k in ks {
                idx.insert(k, i as u32);
            }
        }
        idx.items = items;
        idx
    }

    fn insert(&mut self, key: u64, item: u32) {
        let mut i = (key as usize) & self.mask;
        loop {
            let k = self.keys[i];
            if k == 0 {
                self.keys[i] = key;
                self.vals[i] = item;
                self.len += 1;
                return;
            }
            if k == key {
                return;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// The first item holding n-gram `key`.
    #[inline]
    pub fn get(&self, key: u64) -> Option<u32> {
        let mut i = (key as usize) & self.mask;
        loop {
            let k = self.keys[i];
            if k == key {
                return Some(self.vals[i]);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) & self.mask;
        }
    }

    /// Hint the CPU to load `key`'s slot: the scan computes a batch of keys, prefetching
    /// each, then probes them, so the table's cache misses overlap instead of queueing.
    #[inline]
    pub fn prefetch(&self, key: u64) {
        let i = (key as usize) & self.mask;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `i` is masked into `keys`, and a prefetch never faults or writes.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>(self.keys.as_ptr().add(i) as *const i8);
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// Distinct n-grams indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory held by the table, in bytes.
    pub fn table_bytes(&self) -> usize {
        self.keys.len() * 12
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(text: &str) -> RefItem {
        RefItem {
            benchmark: 0,
            row: 0,
            file: 0,
            text: text.into(),
        }
    }

    #[test]
    fn finds_only_indexed_ngrams() {
        let idx = NgramIndex::build(3, vec![item("a b c d"), item("x y"), item("c d e")]);
        assert_eq!(idx.len(), 3); // abc, bcd, cde
        assert_eq!(idx.too_short, vec![1]);
        assert_eq!(idx.get(ngram::keys("A, b c", 3)[0]), Some(0));
        assert_eq!(idx.get(ngram::keys("c d e", 3)[0]), Some(2));
        assert_eq!(idx.get(ngram::keys("b c e", 3)[0]), None);
    }

    #[test]
    fn many_keys_all_found() {
        let items: Vec<RefItem> = (0..2000)
            .map(|i| item(&format!("w{i} a{i} b{i} c{i} d{i} e{i} f{i} g{i}")))
            .collect();
        let idx = NgramIndex::build(8, items);
        assert_eq!(idx.len(), 2000);
        for i in (0..2000).step_by(37) {
            let k = ngram::keys(&format!("w{i} a{i} b{i} c{i} d{i} e{i} f{i} g{i}"), 8)[0];
            assert_eq!(idx.get(k), Some(i as u32));
        }
    }
}
