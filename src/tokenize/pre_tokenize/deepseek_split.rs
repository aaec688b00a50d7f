//! DeepSeek-V3's pre-tokenizer — three `Split`s applied in sequence — matched by one
//! hand-written scanner in one pass, instead of the backtracking matcher run three times over
//! nested pieces, which made a DeepSeek-V3-shaped `pack` cost ≈ 1.75× a Llama-3-shaped one.
//!
//! ```text
//! 1. \p{N}{1,3}
//! 2. [一-龥぀-ゟ゠-ヿ]+                     (U+4E00–U+9FA5, U+3040–U+30FF)
//! 3. [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
//!    | ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! Each `Split` (Isolated) cuts every piece of the one before into its matches and the gaps
//! between them. Split 1 cuts the text into groups of up to three numbers and the runs between
//! them. Split 2 cuts each group (no number is in the CJK/kana ranges) into nothing, and each
//! run into CJK/kana runs (`K`) and the runs between. Split 3 leaves a number group whole (no
//! number starts or continues a match, so the group is one gap) and cuts the rest: inside a run
//! free of numbers and `K`, the next number or `K` char ends the piece exactly as the end of the
//! text would (the runs below stop there and `(?!\S)` sees the end). So one pass: at a number,
//! a group; at a `K` char, split 3 over the `K` run; else split 3 from here up to the next
//! number or `K` char.
//!
//! Split 3 at a position `p`, leftmost-first (every alternative's quantifiers only ever give
//! back in the whitespace ones): an ASCII punctuation char followed by ASCII letters takes the
//! letters; one char outside `\r \n \p{L} \p{P} \p{S}` followed by `\p{L}\p{M}` chars takes that
//! run, as does a letter or a mark; an optional space then a `\p{P}\p{S}` run then any
//! `\r`/`\n`; the three whitespace alternatives (as Llama-3's, [`ScanClasses::spaces`] with the
//! piece's end). Where none matches (a control, format or unassigned char not followed by a
//! letter or mark), the position is in a gap, which runs to the next position where one
//! matches. The tests (in [`super::split_matcher`]) compare the pieces with the three generic
//! matchers' chained and with Oniguruma's on a mixed corpus and on random strings.

use super::scan_classes::{ScanClasses, L, N, S};
use super::unicode::ClassTable;

/// DeepSeek-V3's three `Split` regexes, in order, as in its tokenizer.json (which escapes the
/// `"`; the same without that `\` is taken too).
pub const DEEPSEEK3: [&str; 3] = [
    r"\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    concat!(
        r##"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"##,
        r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
];

/// `\p{M}`.
const M: u8 = 8;
/// `\p{P}`.
const P: u8 = 16;
/// `\p{S}` (symbols; `S` is `\s`).
const SY: u8 = 32;
/// In split 2's ranges.
const K: u8 = 64;

pub struct DeepSeekSplit {
    cls: ScanClasses,
}

impl DeepSeekSplit {
    /// The scanner when `patterns` are [`DEEPSEEK3`] and the table holds their atoms.
    pub fn for_patterns(patterns: &[&str], table: &ClassTable) -> Option<DeepSeekSplit> {
        let unescaped = DEEPSEEK3[2].replacen(r#"\""#, "\"", 1);
        let same = |i: usize| patterns[i] == DEEPSEEK3[i] || (i == 2 && patterns[i] == unescaped);
        if patterns.len() != 3 || !(0..3).all(same) {
            return None;
        }
        let flags: [(u8, &[&str]); 6] = [
            (L, &[r"\p{L}"]),
            (N, &[r"\p{N}"]),
            (S, &[r"\s"]),
            (M, &[r"\p{M}"]),
            (P, &[r"\p{P}"]),
            (SY, &[r"\p{S}"]),
        ];
        Some(DeepSeekSplit {
            cls: ScanClasses::new(table, &flags)?,
        })
    }

    /// Calls `emit(start, end)` for each piece of the three splits of `s`, in order, covering
    /// it.
    #[inline]
    pub fn split(&self, s: &str, t: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        let b = s.as_bytes();
        let mut p = 0;
        while p < b.len() {
            let (k, _) = self.at(b, p, t);
            if k & N != 0 {
                let e = self.cls.digits(b, p, t, 3);
                emit(p, e);
                p = e;
            } else if k & K != 0 {
                let e = self.run(b, p, t, |k| k & K != 0);
                p = self.pattern(&b[..e], p, t, 0, emit);
            } else {
                p = self.pattern(b, p, t, N | K, emit);
            }
        }
    }

    /// Class flags and byte length of the char at `p` (`K` from the UTF-8 bytes: every char of
    /// split 2's ranges is three bytes long).
    #[inline(always)]
    fn at(&self, b: &[u8], p: usize, t: &ClassTable) -> (u8, usize) {
        let (k, l) = self.cls.at(b, p, t);
        if l == 3 && (0xE3..=0xE9).contains(&b[p]) {
            let u =
                (b[p] as u32 & 0x0F) << 12 | (b[p + 1] as u32 & 0x3F) << 6 | b[p + 2] as u32 & 0x3F;
            if (0x3040..=0x30FF).contains(&u) || (0x4E00..=0x9FA5).contains(&u) {
                return (k | K, 3);
            }
        }
        (k, l)
    }

    /// End of the run of chars from `p` whose flags satisfy `keep`.
    #[inline(always)]
    fn run(&self, b: &[u8], mut p: usize, t: &ClassTable, keep: impl Fn(u8) -> bool) -> usize {
        while p < b.len() {
            let (k, l) = self.at(b, p, t);
            if !keep(k) {
                break;
            }
            p += l;
        }
        p
    }

    /// Split 3's pieces (matches and the gaps between) from `p` up to the first char with a
    /// flag in `stop`, or the end of `b`: that end.
    #[inline(always)]
    fn pattern(
        &self,
        b: &[u8],
        mut p: usize,
        t: &ClassTable,
        stop: u8,
        emit: &mut impl FnMut(usize, usize),
    ) -> usize {
        let mut gap = p;
        while p < b.len() {
            let (k, l) = self.at(b, p, t);
            if k & stop != 0 {
                break;
            }
            match self.match_at(b, p, (k, l), t, stop) {
                Some(e) => {
                    if gap < p {
                        emit(gap, p);
                    }
                    emit(p, e);
                    p = e;
                    gap = e;
                }
                None => p += l,
            }
        }
        if gap < p {
            emit(gap, p);
        }
        p
    }

    /// End of split 3's leftmost-first match at `p` (whose char has flags `k0` and length
    /// `l0`), in a piece that ends at the first char with a flag in `stop`.
    #[inline(always)]
    fn match_at(
        &self,
        b: &[u8],
        p: usize,
        (k0, l0): (u8, usize),
        t: &ClassTable,
        stop: u8,
    ) -> Option<usize> {
        let x = b[p];
        // [!"#…~][A-Za-z]+
        if x.is_ascii_punctuation() && p + 1 < b.len() && b[p + 1].is_ascii_alphabetic() {
            let mut e = p + 2;
            while e < b.len() && b[e].is_ascii_alphabetic() {
                e += 1;
            }
            return Some(e);
        }
        // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
        let lm = |k: u8| k & (L | M) != 0 && k & stop == 0;
        if k0 & (L | P | SY) == 0 && x != b'\r' && x != b'\n' && p + l0 < b.len() {
            let (k1, l1) = self.at(b, p + l0, t);
            if lm(k1) {
                return Some(self.run(b, p + l0 + l1, t, lm));
            }
        }
        if k0 & (L | M) != 0 {
            return Some(self.run(b, p + l0, t, lm));
        }
        //  ?[\p{P}\p{S}]+[\r\n]*
        let ps = |k: u8| k & (P | SY) != 0 && k & stop == 0;
        let q = if x == b' ' && p + 1 < b.len() && ps(self.at(b, p + 1, t).0) {
            Some(p + 1)
        } else if k0 & (P | SY) != 0 {
            Some(p)
        } else {
            None
        };
        if let Some(q) = q {
            let mut e = self.run(b, q, t, ps);
            while e < b.len() && (b[e] == b'\r' || b[e] == b'\n') {
                e += 1;
            }
            return Some(e);
        }
        // \s*[\r\n]+|\s+(?!\S)|\s+ — in the piece, which ends at the next `stop` char: where
        // the text's match is the run less its last char (no newline in it, `(?!\S)`), the
        // piece's is the whole run when a `stop` char follows it.
        if k0 & S != 0 {
            let e = self.cls.spaces(b, p, t);
            if e < b.len() && b[e - 1] != b'\r' && b[e - 1] != b'\n' {
                let (k, l) = self.at(b, e, t);
                if k & S != 0 && self.at(b, e + l, t).0 & stop != 0 {
                    return Some(e + l);
                }
            }
            return Some(e);
        }
        None
    }
}
