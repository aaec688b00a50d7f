//! The hashers of the BPE model: Fx (a multiply-rotate hash, for the merge table and the
//! word caches) and the map types keyed by it; GPT-2's byte → char table.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::shared_words::le_word;

/// rustc's Fx hash: a multiply-rotate hash, much cheaper than SipHash for short keys.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(pub(super) u64);

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
    pub(super) fn add(&mut self, w: u64) {
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
