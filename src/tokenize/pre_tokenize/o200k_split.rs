//! The o200k (GPT-4o, tiktoken `o200k_base`) split regex matched by a hand-written scanner
//! instead of the backtracking matcher, which made an o200k-shaped `pack` cost about twice the
//! CPU of a Llama-3-shaped one.
//!
//! ```text
//! [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! |[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//! |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! With `U` = the first bracket ("upper": Lu Lt Lm Lo M), `W` = the second ("lower": Ll Lm Lo
//! M) and `P` = `[^\r\n\p{L}\p{N}]`, Oniguruma's backtracking order at a position `p` is:
//! alternative 1 with `P` taken, then without, then alternative 2 with, then without; then the
//! rest as in Llama-3's pattern ([`super::gpt4_split`]) with `/` among the trailing chars.
//! Alternative 1 from `q` ([`O200kSplit::cased`]): `U*` takes the maximal `U` run; if the char
//! after it is in `W`, `W+` runs from there; else `U*` gives back chars until one it gives back
//! is in `W` too (Lm, Lo or a mark), and the match ends right after that char; else it fails,
//! and alternative 2 from `q` is exactly the `U` run (the `W*` after it is empty, or
//! alternative 1 would have matched). A letter at `p` cannot be `P`; a mark can be both `P` and
//! in `U ∩ W`, so alternative 1 without `P` always matches there. The contraction suffix is
//! greedy-optional at the very end, so it never makes the match fail. Pieces that start in
//! ASCII and whose cased run is ASCII take a fast path that reads the bytes directly (in
//! ASCII, `U` is `A-Z` and `W` is `a-z`, checked against the table at load). The tests (in
//! [`super::split_matcher`]) compare the pieces with the generic matcher's and Oniguruma's on
//! a mixed corpus and on random strings.

use super::scan_classes::{contraction, ScanClasses, Scanner, L, LO, N, S, UP};
use super::unicode::ClassTable;

/// The o200k pattern, as in the tokenizer.json of GPT-4o-style tokenizers.
pub const O200K: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);

pub struct O200kSplit {
    cls: ScanClasses,
}

/// ASCII byte classes of the o200k pattern that [`O200kSplit::match_at`]'s fast path reads
/// straight from the byte (checked against the pattern's own table at load): `a-z` are in the
/// lower set and not the upper one, and every other ASCII byte is in neither.
fn ascii_cases_are_plain(cls: &ScanClasses) -> bool {
    (0..128u8).all(|x| {
        let k = cls.ascii_class(x);
        let lower = k & LO != 0 && k & UP == 0;
        let upper = k & UP != 0 && k & LO == 0;
        match x {
            b'a'..=b'z' => lower,
            b'A'..=b'Z' => upper,
            _ => k & (UP | LO) == 0,
        }
    })
}

impl O200kSplit {
    /// The scanner when `pattern` is [`O200K`] and the table holds its atoms.
    pub fn for_pattern(pattern: &str, table: &ClassTable) -> Option<O200kSplit> {
        if pattern != O200K {
            return None;
        }
        let flags: [(u8, &[&str]); 5] = [
            (L, &[r"\p{L}"]),
            (N, &[r"\p{N}"]),
            (S, &[r"\s"]),
            (UP, &[r"\p{Lu}", r"\p{Lt}", r"\p{Lm}", r"\p{Lo}", r"\p{M}"]),
            (LO, &[r"\p{Ll}", r"\p{Lm}", r"\p{Lo}", r"\p{M}"]),
        ];
        let cls = ScanClasses::new(table, &flags)?;
        ascii_cases_are_plain(&cls).then_some(O200kSplit { cls })
    }
}

impl Scanner for O200kSplit {
    #[inline(always)]
    fn match_at(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        let c = &self.cls;
        // ASCII starts, straight from the bytes (the general path below tries the cased
        // alternatives char by char first, for every start). `q`: where a cased run would begin
        // (after a `P` byte, else at `p`). A lowercase letter there: alternative 1, the `U` run
        // empty. An uppercase run there: alternative 1 when a lowercase letter ends it, else
        // (an ASCII non-letter or the end: no char of the run is in `W` too) alternative 2,
        // the run itself; a non-ASCII char after it takes the general path. Whitespace before
        // whitespace (or `\r` / `\n` itself, never `P`): no letter follows and the punctuation
        // run needs a non-space, so only the whitespace alternatives can match.
        let x = b[p];
        if x < 0x80 {
            let k = c.ascii_class(x);
            let q = if k & (L | N) == 0 && x != b'\r' && x != b'\n' {
                p + 1
            } else {
                p
            };
            if let Some(&y) = b.get(q) {
                if y.is_ascii_lowercase() {
                    return suffix(b, c.lowers(b, q + 1, t));
                }
                if y.is_ascii_uppercase() {
                    let mut r = q + 1;
                    while r < b.len() && b[r].is_ascii_uppercase() {
                        r += 1;
                    }
                    match b.get(r) {
                        Some(z) if z.is_ascii_lowercase() => {
                            return suffix(b, c.lowers(b, r + 1, t))
                        }
                        Some(&z) if z >= 0x80 => {}
                        _ => return suffix(b, r),
                    }
                } else if k & S != 0 && y < 0x80 && c.ascii_class(y) & S != 0 {
                    return c.spaces(b, p, t);
                }
            }
        }
        let (k0, l0) = c.at(b, p, t);
        // The two cased alternatives, `P` taken first.
        let mut alt2 = None;
        if k0 & (L | N) == 0 && b[p] != b'\r' && b[p] != b'\n' && p + l0 < b.len() {
            match self.cased(b, p + l0, t) {
                Ok(e) => return suffix(b, e),
                Err(u) if u > p + l0 => alt2 = Some(u),
                Err(_) => {}
            }
        }
        if k0 & (UP | LO) != 0 {
            // A letter (never `P`) or a mark (alternative 1 always matches it).
            let e = self.cased(b, p, t).unwrap_or_else(|u| u);
            debug_assert!(e > p);
            return suffix(b, e);
        }
        if let Some(u) = alt2 {
            return suffix(b, u);
        }
        // \p{N}{1,3}
        if k0 & N != 0 {
            return c.digits(b, p, t, 3);
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n/]*
        if let Some(e) = c.punct(b, p, k0, t, true) {
            return e;
        }
        // The rest start with whitespace.
        debug_assert!(k0 & S != 0);
        c.spaces(b, p, t)
    }
}

impl O200kSplit {
    /// `U*W+` from `q` (before the contraction): `Ok(end)`, or `Err(end of the U run)` when it
    /// does not match.
    #[inline(always)]
    fn cased(&self, b: &[u8], q: usize, t: &ClassTable) -> Result<usize, usize> {
        let c = &self.cls;
        let mut k = q;
        // End of the last char of the U run that is in W too.
        let mut last_both = None;
        while k < b.len() {
            let (f, l) = c.at(b, k, t);
            if f & UP == 0 {
                if f & LO != 0 {
                    return Ok(c.lowers(b, k + l, t));
                }
                break;
            }
            if f & LO != 0 {
                last_both = Some(k + l);
            }
            k += l;
        }
        last_both.ok_or(k)
    }
}

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)?` at `e`: the end after it.
#[inline(always)]
fn suffix(b: &[u8], e: usize) -> usize {
    if e < b.len() && b[e] == b'\'' {
        return contraction(b, e + 1).unwrap_or(e);
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_o200k_pattern_gets_the_scanner() {
        let mut atoms = Vec::new();
        let other = O200K.replace("[\\r\\n/]*", "[\\r\\n]*");
        super::super::regex::parse(&other, &mut atoms).unwrap();
        let table = ClassTable::new(&atoms).unwrap();
        assert!(O200kSplit::for_pattern(&other, &table).is_none());
        assert!(O200kSplit::for_pattern(O200K, &table).is_some());
    }

    /// The pattern's letters in ASCII are A-Za-z and its lower set a-z: both runs take the
    /// 16-byte path (a table that said otherwise would silently fall back to the byte loop).
    #[test]
    fn ascii_letter_runs_take_the_vector_path() {
        let mut atoms = Vec::new();
        super::super::regex::parse(O200K, &mut atoms).unwrap();
        let table = ClassTable::new(&atoms).unwrap();
        let o = O200kSplit::for_pattern(O200K, &table).unwrap();
        assert_eq!(o.cls.vector_runs(), (true, true));
    }
}
