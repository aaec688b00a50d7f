//! The cl100k / Llama-3 split regex (and Qwen2's, which takes one digit at a time) matched by a
//! hand-written scanner instead of the backtracking matcher: the pattern of Llama-3, Qwen2 and
//! MiniCPM5 tokenizers, where the generic matcher's recursion and failed alternatives were a
//! third of `pack`'s CPU time on code.
//!
//! ```text
//! (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//! ```
//!
//! Leftmost-first alternation resolved by hand at each position (`W` = the maximal `\s` run
//! there): a contraction; a letter run, or one char outside `\r \n \p{L} \p{N}` followed by a
//! letter run; up to `digits` numbers; an optional space then a run of "other" chars (not `\s`,
//! letter or number) then any `\r`/`\n`; `W` up to and including its last `\r`/`\n`; `W` at the
//! end of the text, else `W` less its last char when that leaves one; `W`. Every char starts
//! one of these, so the pieces are exactly the matches. The classes are the same [`ClassTable`]
//! bits (Oniguruma's) the generic matcher reads, and the tests compare both matchers piece by
//! piece on generated text.

use super::scan_classes::{contraction, ScanClasses, Scanner, L, N, S};
use super::unicode::ClassTable;

/// The Llama-3 / cl100k pattern.
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with single digits.
pub const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

pub struct Gpt4Split {
    cls: ScanClasses,
    /// Longest digit group (3, or 1 for Qwen2).
    digits: u32,
}

impl Gpt4Split {
    /// The scanner for `pattern` when it is one of the two above and the table holds its
    /// atoms (with `\r`, `\n` and space in `\s`, as the analysis assumes).
    pub fn for_pattern(pattern: &str, table: &ClassTable) -> Option<Gpt4Split> {
        let digits = match pattern {
            LLAMA3 => 3,
            QWEN2 => 1,
            _ => return None,
        };
        let flags: [(u8, &[&str]); 3] = [(L, &[r"\p{L}"]), (N, &[r"\p{N}"]), (S, &[r"\s"])];
        Some(Gpt4Split {
            cls: ScanClasses::new(table, &flags)?,
            digits,
        })
    }
}

impl Scanner for Gpt4Split {
    #[inline(always)]
    fn match_at(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        let c = &self.cls;
        let (k0, l0) = c.at(b, p, t);
        if b[p] == b'\'' {
            if let Some(e) = contraction(b, p + 1) {
                return e;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if k0 & L != 0 {
            return c.letters(b, p, t);
        }
        if k0 & (L | N) == 0 && b[p] != b'\r' && b[p] != b'\n' && p + l0 < b.len() {
            let (k1, _) = c.at(b, p + l0, t);
            if k1 & L != 0 {
                return c.letters(b, p + l0, t);
            }
        }
        // \p{N}{1,digits}
        if k0 & N != 0 {
            return c.digits(b, p, t, self.digits);
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        if let Some(e) = c.punct(b, p, k0, t, false) {
            return e;
        }
        // The rest start with whitespace.
        debug_assert!(k0 & S != 0);
        c.spaces(b, p, t)
    }
}

#[cfg(test)]
mod tests {
    use super::super::regex;
    use super::*;

    /// Llama-3's and Qwen2's letters in ASCII are A-Za-z: letter runs take the 16-byte path.
    #[test]
    fn ascii_letter_runs_take_the_vector_path() {
        for p in [LLAMA3, QWEN2] {
            let mut atoms = Vec::new();
            regex::parse(p, &mut atoms).unwrap();
            let table = ClassTable::new(&atoms).unwrap();
            let g = Gpt4Split::for_pattern(p, &table).unwrap();
            assert!(g.cls.vector_runs().0, "{p}");
        }
    }

    #[test]
    fn other_patterns_keep_the_generic_matcher() {
        for p in [
            &LLAMA3[1..],
            r"\p{N}{1,3}",
            &QWEN2.replace(r"\p{N}|", r"\p{N}{1,2}|"),
        ] {
            let mut atoms = Vec::new();
            if regex::parse(p, &mut atoms).is_ok() {
                let table = ClassTable::new(&atoms).unwrap();
                assert!(Gpt4Split::for_pattern(p, &table).is_none(), "{p}");
            }
        }
    }
}
