//! Word n-grams as the GPT-3 / lm-eval-harness decontamination defines them: lowercase,
//! punctuation stripped (so `don't` → `dont`, `H2O.` → `h2o`), words split on whitespace;
//! each word hashed to u64 and each window of `n` words folded by a rolling polynomial hash,
//! in one pass over the bytes with no allocation.

/// Allowed n-gram sizes.
pub const MIN_N: usize = 8;
pub const MAX_N: usize = 13;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;
/// Base of the rolling polynomial hash (odd, so multiplication is invertible mod 2^64).
const BASE: u64 = 0x9E37_79B9_7F4A_7C15;

/// splitmix64's finaliser: spreads a hash over all 64 bits.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline]
fn feed(h: u64, byte: u8) -> u64 {
    (h ^ byte as u64).wrapping_mul(FNV_PRIME)
}

/// Call `f(word_hash, start, end)` for every normalised word of `text`; `start..end` is the
/// word's byte span in `text` (punctuation inside the span is not part of the word).
#[inline]
pub fn for_each_word(text: &str, mut f: impl FnMut(u64, usize, usize)) {
    let b = text.as_bytes();
    let mut h = FNV_OFFSET;
    let mut in_word = false;
    let mut start = 0;
    let mut end = 0;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c < 0x80 {
            if c.is_ascii_alphanumeric() {
                if !in_word {
                    in_word = true;
                    start = i;
                    h = FNV_OFFSET;
                }
                h = feed(h, c.to_ascii_lowercase());
                end = i + 1;
            } else if c.is_ascii_whitespace() && in_word {
                f(mix(h), start, end);
                in_word = false;
            }
            i += 1;
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or(' ');
        let len = ch.len_utf8();
        if ch.is_alphanumeric() {
            if !in_word {
                in_word = true;
                start = i;
                h = FNV_OFFSET;
            }
            let mut buf = [0u8; 4];
            for lc in ch.to_lowercase() {
                for byte in lc.encode_utf8(&mut buf).bytes() {
                    h = feed(h, byte);
                }
            }
            end = i + len;
        } else if ch.is_whitespace() && in_word {
            f(mix(h), start, end);
            in_word = false;
        }
        i += len;
    }
    if in_word {
        f(mix(h), start, end);
    }
}

/// The normalised words of `text` (for display and for verifying a hash hit).
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// Rolling hash over the last `n` word hashes.
pub struct Roller {
    n: usize,
    /// BASE^(n-1), to remove the outgoing word.
    top: u64,
    ring: [u64; MAX_N],
    starts: [usize; MAX_N],
    pos: usize,
    count: usize,
    h: u64,
}

impl Roller {
    pub fn new(n: usize) -> Roller {
        assert!((1..=MAX_N).contains(&n));
        let mut top = 1u64;
        for _ in 1..n {
            top = top.wrapping_mul(BASE);
        }
        Roller {
            n,
            top,
            ring: [0; MAX_N],
            starts: [0; MAX_N],
            pos: 0,
            count: 0,
            h: 0,
        }
    }

    /// Push a word; once `n` words are in, returns the window's key and its first word's start.
    #[inline]
    pub fn push(&mut self, word: u64, start: usize) -> Option<(u64, usize)> {
        if self.count >= self.n {
            let out = self.ring[self.pos];
            self.h = self.h.wrapping_sub(out.wrapping_mul(self.top));
        } else {
            self.count += 1;
        }
        self.h = self.h.wrapping_mul(BASE).wrapping_add(word);
        self.ring[self.pos] = word;
        self.starts[self.pos] = start;
        self.pos += 1;
        if self.pos == self.n {
            self.pos = 0;
        }
        if self.count < self.n {
            return None;
        }
        // The oldest word sits at `pos` now.
        Some((key(self.h), self.starts[self.pos]))
    }
}

/// Final key of a window hash: mixed, never 0 (0 marks an empty index slot).
#[inline]
pub fn key(h: u64) -> u64 {
    let k = mix(h);
    if k == 0 {
        1
    } else {
        k
    }
}

/// Every n-gram key of `text`, in order.
pub fn keys(text: &str, n: usize) -> Vec<u64> {
    let mut r = Roller::new(n);
    let mut out = Vec::new();
    for_each_word(text, |w, s, _| {
        if let Some((k, _)) = r.push(w, s) {
            out.push(k);
        }
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn direct_keys(text: &str, n: usize) -> Vec<u64> {
        // Hash each window from scratch with the same word hashes.
        let mut ws = Vec::new();
        for_each_word(text, |w, _, _| ws.push(w));
        ws.windows(n)
            .map(|win| {
                key(win
                    .iter()
                    .fold(0u64, |h, w| h.wrapping_mul(BASE).wrapping_add(*w)))
            })
            .collect()
    }

    #[test]
    fn normalisation() {
        assert_eq!(
            words("Don't PANIC: H2O, isn't   it?\n—"),
            vec!["dont", "panic", "h2o", "isnt", "it"]
        );
        assert_eq!(words("Ünïcode Straße"), vec!["ünïcode", "straße"]);
        // Case and punctuation do not change the keys.
        assert_eq!(
            keys("The cat's hat, is RED and big", 3),
            keys("the cats hat is red and big!", 3)
        );
        assert_ne!(keys("the cat sat", 3), keys("the cat sit", 3));
    }

    #[test]
    fn rolling_equals_direct() {
        let t = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen";
        for n in [1, 3, 8, 13] {
            assert_eq!(keys(t, n), direct_keys(t, n), "n={n}");
        }
        assert_eq!(keys(t, 13).len(), 3);
        assert!(keys("too short", 8).is_empty());
    }

    #[test]
    fn spans_point_at_the_words() {
        let t = "Alpha, beta gamma. Delta";
        let mut spans = Vec::new();
        for_each_word(t, |_, s, e| spans.push(&t[s..e]));
        assert_eq!(spans, vec!["Alpha", "beta", "gamma", "Delta"]);
        let mut r = Roller::new(2);
        let mut starts = Vec::new();
        for_each_word(t, |w, s, _| {
            if let Some((_, st)) = r.push(w, s) {
                starts.push(st);
            }
        });
        assert_eq!(starts, vec![0, 7, 12]);
    }
}
