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
//! greedy-optional at the very end, so it never makes the match fail. The tests compare the
//! pieces with the generic matcher's and Oniguruma's on a mixed corpus and on random strings.

use super::scan_classes::{contraction, ScanClasses, L, LO, N, S, UP};
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
        Some(O200kSplit {
            cls: ScanClasses::new(table, &flags)?,
        })
    }

    /// Calls `emit(start, end)` for each piece of `s`, in order, covering it.
    #[inline]
    pub fn split(&self, s: &str, table: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        let b = s.as_bytes();
        let mut p = 0;
        while p < b.len() {
            let e = self.match_at(b, p, table);
            debug_assert!(e > p);
            emit(p, e);
            p = e;
        }
    }

    /// End of the leftmost-first match at `p` (every position has one).
    #[inline(always)]
    fn match_at(&self, b: &[u8], p: usize, t: &ClassTable) -> usize {
        let c = &self.cls;
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
                    return Ok(c.run(b, k + l, t, |f| f & LO != 0));
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
    use super::super::gpt4_split::tests::{compare, random_texts};
    use super::*;

    /// Code, prose, CJK, Arabic (with harakat), emoji, digits, apostrophes, `\r\n` runs,
    /// combining marks, title case, modifier letters.
    const CORPUS: &[&str] = &[
        "fn main() {\r\n    let x = a/b // c\r\n\r\n    return HTTPServer::new(\"it's\");\n}\n",
        "The CAT's toy; DON'T you SEE?  I'LL go.\tWe'Re here, they'VE gone, he'D say 'ſ.",
        "def parse_URL(urlString):\n\tif x >= 1_000_000: return [1, 22, 333, 4444]\n# TODO///\n//\n",
        "中文文本，包含标点。日本語のテキスト、カタカナ。한국어 문장입니다.",
        "العربية: كَتَبَ الوَلَدُ الدَّرْسَ ١٢٣٤ مرة",
        "emoji 😀😀👍🏽 family 👨\u{200d}👩\u{200d}👧 flags 🇫🇷 ok",
        "café naïve e\u{301}te\u{301} A\u{301}BC \u{301}\u{301}x \u{301}AB \u{301}",
        "ǅemal ǈ Ǌ ʰʰa ʰA Aʰ ABʰC Ǆǅǆ ΣΊΣΥΦΟΣ σίσυφος ÉCOLE école",
        "  \r\n\r\n   \n\n\t \u{a0}\u{3000}x \u{2028}y \u{85}z   ",
        "a/\r\n/b ;/\n/\n/ x//y ./// \\/",
        "12345678 ١٢٣٤٥ ½¾ ⅫⅫⅫⅫ 3.14159 0x1F",
        "''s 'S x'S X'LL 'll''ll y'Ve ſ'ſ K'K",
    ];

    /// Every class boundary the pattern has (upper, lower, title, modifier, other letters,
    /// marks, numbers, spaces, the contraction letters, `/`).
    const ALPHABET: &str = "'’sStTrReEvVmMlLdDſ\u{212A}xyZÉéǅʰ中ع\u{64E}\u{301}\u{903}  \t\r\n\u{a0}\u{3000}\u{85}\u{2028}09٣½Ⅻ.,;:()_-+=*/\\\"#@!?<>|~`$%^&😀\u{200d}";

    #[test]
    fn pieces_equal_the_generic_matchers_and_oniguruma() {
        let mut texts: Vec<String> = CORPUS.iter().map(|s| s.to_string()).collect();
        texts.push(CORPUS.concat());
        texts.extend(random_texts(ALPHABET, 0x9e37_79b9_7f4a_7c15));
        compare(O200K, &texts);
    }

    #[test]
    fn only_the_o200k_pattern_gets_the_scanner() {
        let mut atoms = Vec::new();
        let other = O200K.replace("[\\r\\n/]*", "[\\r\\n]*");
        super::super::regex::parse(&other, &mut atoms).unwrap();
        let table = ClassTable::new(&atoms).unwrap();
        assert!(O200kSplit::for_pattern(&other, &table).is_none());
        assert!(O200kSplit::for_pattern(O200K, &table).is_some());
    }
}
