//! What the hand-written `Split` scanners ([`super::gpt4_split`], [`super::o200k_split`])
//! share: a char's class flags (ASCII from a 128-entry table inline, other chars through the
//! pattern's own [`ClassTable`] out of line) and the alternatives both patterns end with —
//! the punctuation run, digits, and the three whitespace alternatives.

use super::unicode::{decode, ClassTable};

/// `\p{L}`.
pub const L: u8 = 1;
/// `\p{N}`.
pub const N: u8 = 2;
/// `\s`.
pub const S: u8 = 4;
/// o200k's "upper" set `[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]`.
pub const UP: u8 = 8;
/// o200k's "lower" set `[\p{Ll}\p{Lm}\p{Lo}\p{M}]`.
pub const LO: u8 = 16;

/// Class flags per char for one pattern: flag `f` is set when the char is in any of its atoms.
pub struct ScanClasses {
    /// (atom bits in the table, flag).
    masks: Vec<(u32, u8)>,
    ascii: [u8; 128],
    /// The ASCII chars with flag [`L`] are exactly `A-Za-z` (`\p{L}`), those with [`LO`]
    /// exactly `a-z`: [`Self::letters`] / [`Self::lowers`] may test 16 bytes at once.
    ascii_l_alpha: bool,
    ascii_lo_lower: bool,
}

impl ScanClasses {
    /// The flags of `flags` (each a flag and the atoms whose union it is), when the table holds
    /// every atom and `\r`, `\n` and space are `\s` alone (as the scanners assume).
    pub fn new(table: &ClassTable, flags: &[(u8, &[&str])]) -> Option<ScanClasses> {
        let bit = |a: &str| table.atoms().iter().position(|x| x == a).map(|i| 1u32 << i);
        let mut masks = Vec::new();
        for &(f, atoms) in flags {
            let mut m = 0;
            for a in atoms {
                m |= bit(a)?;
            }
            masks.push((m, f));
        }
        let mut c = ScanClasses {
            masks,
            ascii: [0; 128],
            ascii_l_alpha: false,
            ascii_lo_lower: false,
        };
        for b in 0..128u8 {
            c.ascii[b as usize] = c.class_of(b as char, table);
        }
        let ascii_is = |f: u8, set: fn(&u8) -> bool| {
            (0..128u8).all(|b| (c.ascii[b as usize] & f != 0) == set(&b))
        };
        c.ascii_l_alpha = ascii_is(L, u8::is_ascii_alphabetic);
        c.ascii_lo_lower = ascii_is(LO, u8::is_ascii_lowercase);
        let is_space = |x: u8| c.ascii[x as usize] == S;
        (is_space(b'\r') && is_space(b'\n') && is_space(b' ')).then_some(c)
    }

    fn class_of(&self, c: char, table: &ClassTable) -> u8 {
        let bits = table.bits(c);
        self.masks
            .iter()
            .fold(0, |k, &(m, f)| if bits & m != 0 { k | f } else { k })
    }

    /// Class flags of the ASCII byte `x`.
    #[inline(always)]
    pub fn ascii_class(&self, x: u8) -> u8 {
        self.ascii[x as usize & 0x7f]
    }

    /// Class flags and byte length of the char at `p`: an ASCII byte from the table inline (a
    /// call per char was a tenth of a Llama-3-shaped pack on code), anything else out of line.
    #[inline(always)]
    pub fn at(&self, b: &[u8], p: usize, table: &ClassTable) -> (u8, usize) {
        if b[p] < 0x80 {
            return (self.ascii[b[p] as usize], 1);
        }
        self.at_wide(b, p, table)
    }

    #[inline(never)]
    fn at_wide(&self, b: &[u8], p: usize, table: &ClassTable) -> (u8, usize) {
        let (c, l) = decode(b, p);
        (self.class_of(c, table), l)
    }

    /// End of the run of chars from `p` whose flags satisfy `keep` (ASCII bytes in a tight
    /// loop).
    #[inline(always)]
    pub fn run(&self, b: &[u8], mut p: usize, t: &ClassTable, keep: impl Fn(u8) -> bool) -> usize {
        while p < b.len() {
            let x = b[p];
            if x < 0x80 {
                if !keep(self.ascii[x as usize]) {
                    break;
                }
                p += 1;
                continue;
            }
            let (k, l) = self.at_wide(b, p, t);
            if !keep(k) {
                break;
            }
            p += l;
        }
        p
    }

    /// Whether [`Self::letters`] and [`Self::lowers`] take their vector paths.
    #[cfg(test)]
    pub fn vector_runs(&self) -> (bool, bool) {
        (self.ascii_l_alpha, self.ascii_lo_lower)
    }

    /// End of the run of `\p{L}` chars from `p`: [`Self::run`], with ASCII letters tested 16
    /// bytes at a time first when the pattern's letters are `A-Za-z` in ASCII (a byte loop's
    /// exit is a mispredicted branch per word; the vector test's stop is a bit scan).
    #[inline(always)]
    pub fn letters(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        if self.ascii_l_alpha {
            return self.vector_run(b, p, t, true, L);
        }
        self.run(b, p, t, |k| k & L != 0)
    }

    /// End of the run of [`LO`] chars from `p`, as [`Self::letters`] (when the ASCII ones are
    /// `a-z`).
    #[inline(always)]
    pub fn lowers(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        if self.ascii_lo_lower {
            return self.vector_run(b, p, t, false, LO);
        }
        self.run(b, p, t, |k| k & LO != 0)
    }

    /// The run of chars with `flag` from `p`, whose ASCII members are the letters
    /// ([`ascii_letters_prefix`] with `fold`): 16 bytes at a time while they are ASCII, then
    /// [`Self::run`] from the first non-ASCII char.
    #[inline(always)]
    fn vector_run(&self, b: &[u8], mut p: usize, t: &ClassTable, fold: bool, flag: u8) -> usize {
        while let Some(chunk) = b.get(p..p + 16) {
            let stop = ascii_letters_prefix(chunk.try_into().expect("16 bytes"), fold);
            p += stop;
            if stop < 16 {
                if b[p] < 0x80 {
                    return p;
                }
                break;
            }
        }
        self.run(b, p, t, |k| k & flag != 0)
    }

    /// `\p{N}{1,max}` at `p` (a number char): its end.
    #[inline(always)]
    pub fn digits(&self, b: &[u8], p: usize, t: &ClassTable, max: u32) -> usize {
        let mut q = p;
        let mut n = 0;
        while n < max && q < b.len() {
            let (k, l) = self.at(b, q, t);
            if k & N == 0 {
                break;
            }
            q += l;
            n += 1;
        }
        q
    }

    /// ` ?[^\s\p{L}\p{N}]+[\r\n]*` (with `slash`: `[\r\n/]*`) at `p`, whose char has flags
    /// `k0`: its end, if it matches.
    #[inline(always)]
    pub fn punct(&self, b: &[u8], p: usize, k0: u8, t: &ClassTable, slash: bool) -> Option<usize> {
        let other = |k: u8| k & (L | N | S) == 0;
        let q = if b[p] == b' ' && p + 1 < b.len() && other(self.at(b, p + 1, t).0) {
            p + 1
        } else if other(k0) {
            p
        } else {
            return None;
        };
        let mut e = self.run(b, q, t, other);
        while e < b.len() && (b[e] == b'\r' || b[e] == b'\n' || (slash && b[e] == b'/')) {
            e += 1;
        }
        Some(e)
    }

    /// `\s*[\r\n]+|\s+(?!\S)|\s+` at `p`, a `\s` char: the end of the first that matches. With
    /// `W` the maximal `\s` run there: `W` up to and including its last `\r`/`\n`; `W` at the
    /// end of the text, else `W` less its last char when that leaves one; `W`.
    #[inline(always)]
    pub fn spaces(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        // A run of plain spaces ending at a non-`\s` ASCII char (code's indentation, aligned
        // columns), counted 16 bytes at once: `W` is those spaces, with no `\r`/`\n`.
        if let Some(w) = b.get(p..p + 16) {
            let run = leading_spaces(w.try_into().expect("16 bytes"));
            if run < 16 {
                let x = b[p + run];
                if x < 0x80 && self.ascii[x as usize] & S == 0 {
                    return if run >= 2 { p + run - 1 } else { p + run };
                }
            }
        }
        let mut q = p;
        let mut last_nl_end = None;
        let mut last_start = p;
        let mut chars = 0;
        while q < b.len() {
            let (k, l) = self.at(b, q, t);
            if k & S == 0 {
                break;
            }
            if b[q] == b'\r' || b[q] == b'\n' {
                last_nl_end = Some(q + 1);
            }
            last_start = q;
            q += l;
            chars += 1;
        }
        // \s*[\r\n]+
        if let Some(e) = last_nl_end {
            return e;
        }
        // \s+(?!\S)
        if q == b.len() {
            return q;
        }
        if chars >= 2 {
            return last_start;
        }
        // \s+
        q
    }
}

/// How many of the leading bytes of `w` are spaces (0x20).
#[inline(always)]
pub fn leading_spaces(w: &[u8; 16]) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86_64; the load is unaligned and reads exactly `w`.
        unsafe {
            let v = _mm_loadu_si128(w.as_ptr() as *const __m128i);
            let m = _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b' ' as i8))) as u32;
            (!m).trailing_zeros() as usize
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        w.iter().take_while(|&&c| c == b' ').count()
    }
}

/// How many of the leading bytes of `w` are ASCII letters: `A-Za-z` with `fold`, else `a-z`.
#[inline(always)]
pub fn ascii_letters_prefix(w: &[u8; 16], fold: bool) -> usize {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86_64; the load is unaligned and reads exactly `w`.
        unsafe {
            let mut v = _mm_loadu_si128(w.as_ptr() as *const __m128i);
            if fold {
                // Upper case folds to lower; nothing else lands in a-z (bytes >= 0x80 stay).
                v = _mm_or_si128(v, _mm_set1_epi8(0x20));
            }
            // x - 'a' < 26, unsigned.
            let d = _mm_sub_epi8(v, _mm_set1_epi8(b'a' as i8));
            let is = _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(25)), d);
            let m = _mm_movemask_epi8(is) as u32;
            (!m).trailing_zeros() as usize
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let set = if fold {
            u8::is_ascii_alphabetic
        } else {
            u8::is_ascii_lowercase
        };
        w.iter().take_while(|c| set(c)).count()
    }
}

/// A hand-written scanner of one `Split` pattern whose alternatives match at every position
/// (the Llama-3 / Qwen2 and o200k patterns): the pieces are its matches, one after another.
pub trait Scanner {
    /// End of the leftmost-first match at `p` (every position has one, never empty).
    fn match_at(&self, b: &[u8], p: usize, t: &ClassTable) -> usize;

    /// Calls `emit(start, end)` for each piece of `s`, in order, covering it.
    #[inline(always)]
    fn split(&self, s: &str, t: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        let b = s.as_bytes();
        let mut p = 0;
        while p < b.len() {
            let e = self.match_at(b, p, t);
            debug_assert!(e > p);
            emit(p, e);
            p = e;
        }
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after the apostrophe at `p - 1`: the match end. Case
/// insensitive as Oniguruma folds: the ASCII pair, and `ſ` (U+017F) for `s`.
#[inline]
pub fn contraction(b: &[u8], p: usize) -> Option<usize> {
    let lower = |i: usize| b.get(i).map(|c| c.to_ascii_lowercase());
    match lower(p)? {
        b's' | b't' | b'm' | b'd' => Some(p + 1),
        b'r' | b'v' if lower(p + 1) == Some(b'e') => Some(p + 2),
        b'l' if lower(p + 1) == Some(b'l') => Some(p + 2),
        0xC5 if b.get(p + 1) == Some(&0xBF) => Some(p + 2),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value at every position after a letter prefix, folded and not: the vector
    /// count equals the byte loop's.
    #[test]
    fn ascii_letters_prefix_counts_as_the_byte_loop() {
        for fold in [true, false] {
            let set = if fold {
                u8::is_ascii_alphabetic
            } else {
                u8::is_ascii_lowercase
            };
            for stop in 0..16 {
                for x in 0..=255u8 {
                    let mut w = [b'q'; 16];
                    w[stop] = x;
                    for (i, c) in w.iter_mut().enumerate().skip(stop + 1) {
                        *c = [b'A', b'z', 0xC3, b'0', b' '][i % 5];
                    }
                    let want = w.iter().take_while(|c| set(c)).count();
                    let got = ascii_letters_prefix(&w, fold);
                    assert_eq!(got, want, "fold {fold}, stop {stop}, byte {x:#x}");
                }
            }
            assert_eq!(ascii_letters_prefix(b"abcdefghijklmnop", fold), 16);
        }
    }

    /// Every byte value at every position after a run of spaces.
    #[test]
    fn leading_spaces_counts_as_the_byte_loop() {
        for stop in 0..16 {
            for x in 0..=255u8 {
                let mut w = [b' '; 16];
                w[stop] = x;
                let want = w.iter().take_while(|&&c| c == b' ').count();
                assert_eq!(leading_spaces(&w), want, "stop {stop}, byte {x:#x}");
            }
        }
        assert_eq!(leading_spaces(&[b' '; 16]), 16);
    }
}
