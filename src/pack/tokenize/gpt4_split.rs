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

use super::o200k_split::O200kSplit;
use super::regex::Regex;
use super::scan_classes::{contraction, ScanClasses, L, N, S};
use super::unicode::ClassTable;

/// The Llama-3 / cl100k pattern.
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with single digits.
pub const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The matcher of one `Split` pattern: this module's scanner for the two patterns above,
/// [`O200kSplit`] for o200k's, the generic matcher for any other (same pieces either way).
pub enum SplitMatcher {
    Scanner(Gpt4Split),
    O200k(O200kSplit),
    Generic(Regex),
}

impl SplitMatcher {
    /// The scanner when `re`'s pattern is one it knows, else `re` itself.
    pub fn new(re: Regex, table: &ClassTable) -> SplitMatcher {
        if let Some(g) = Gpt4Split::for_pattern(re.source(), table) {
            return SplitMatcher::Scanner(g);
        }
        match O200kSplit::for_pattern(re.source(), table) {
            Some(o) => SplitMatcher::O200k(o),
            None => SplitMatcher::Generic(re),
        }
    }

    /// Calls `emit(start, end)` for the pieces of an Isolated `Split` of `s`, in order.
    #[inline]
    pub fn split(&self, s: &str, table: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        match self {
            SplitMatcher::Scanner(g) => g.split(s, table, emit),
            SplitMatcher::O200k(o) => o.split(s, table, emit),
            SplitMatcher::Generic(r) => r.split(s, table, emit),
        }
    }
}

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
        if b[p] == b'\'' {
            if let Some(e) = contraction(b, p + 1) {
                return e;
            }
        }
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if k0 & L != 0 {
            return c.run(b, p, t, |k| k & L != 0);
        }
        if k0 & (L | N) == 0 && b[p] != b'\r' && b[p] != b'\n' && p + l0 < b.len() {
            let (k1, _) = c.at(b, p + l0, t);
            if k1 & L != 0 {
                return c.run(b, p + l0, t, |k| k & L != 0);
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
pub(super) mod tests {
    use super::super::regex::tests::onig_spans;
    use super::super::regex::{self, Regex};
    use super::*;

    fn pieces(s: &str, f: impl Fn(&str, &mut dyn FnMut(usize, usize))) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        f(s, &mut |a, e| v.push((a, e)));
        v
    }

    /// 400 random strings from `alphabet` at each of several lengths (xorshift from `seed`).
    pub(in crate::pack::tokenize) fn random_texts(alphabet: &str, seed: u64) -> Vec<String> {
        let alphabet: Vec<char> = alphabet.chars().collect();
        let mut out = Vec::new();
        let mut x = seed;
        for len in [1usize, 2, 3, 5, 8, 13, 40, 200] {
            for _ in 0..400 {
                let mut s = String::new();
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    s.push(alphabet[(x % alphabet.len() as u64) as usize]);
                }
                out.push(s);
            }
        }
        out
    }

    /// `pattern` gets a scanner from [`SplitMatcher::new`], and its pieces of every text equal
    /// the generic matcher's, which equal Oniguruma's.
    pub(in crate::pack::tokenize) fn compare(pattern: &str, texts: &[String]) {
        let mut atoms = Vec::new();
        let generic = regex::parse(pattern, &mut atoms).unwrap();
        let table = ClassTable::new(&atoms).unwrap();
        let generic = Regex::compile(generic, &table);
        let fast = SplitMatcher::new(
            Regex::compile(regex::parse(pattern, &mut atoms).unwrap(), &table),
            &table,
        );
        assert!(
            !matches!(fast, SplitMatcher::Generic(_)),
            "no scanner for {pattern}"
        );
        let mut bad = Vec::new();
        for t in texts {
            let want = pieces(t, |s, f| generic.split(s, &table, &mut |a, e| f(a, e)));
            let got = pieces(t, |s, f| fast.split(s, &table, &mut |a, e| f(a, e)));
            assert_eq!(
                want,
                onig_spans(pattern, t),
                "generic matcher vs Oniguruma: {t:?}"
            );
            if got != want && bad.len() < 5 {
                let show = |v: &[(usize, usize)]| -> Vec<String> {
                    v.iter().map(|&(a, e)| t[a..e].to_string()).collect()
                };
                bad.push(format!(
                    "{t:?}:\n  want {:?}\n  got  {:?}",
                    show(&want),
                    show(&got)
                ));
            }
        }
        assert!(bad.is_empty(), "{pattern}:\n{}", bad.join("\n"));
    }

    /// Text from an alphabet of every class boundary the pattern has: apostrophes and the
    /// contraction letters in both cases (and `ſ`, U+212A), spaces, tabs, `\r`, `\n`, other
    /// Unicode spaces, ASCII and non-ASCII letters and numbers, combining marks, punctuation,
    /// symbols, emoji.
    fn texts() -> Vec<String> {
        let mut out: Vec<String> = [
            "Hello world, it's   here.\n\n  def f(x):\n\treturn x*2  \n",
            "I'LL say 'Re 'vE 'ſ 'd'm't\r\n\r\n   \n  x",
            "1234567 12 a1b2 ½½½½ ٣٣٣٣ x  \u{3000}\u{3000}y  ",
            "   ",
            " ",
            "\n",
            "' ",
            "''s",
            " 'll",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        out.extend(random_texts(
            "'’sStTrReEvVmMlLdDſ\u{212A}xyZ  \t\r\n\u{a0}\u{3000}\u{85}\u{2028}09٣½Ⅻé中\u{301}.,;:()[]{}_-+=*/\\\"#@!?<>|~`$%^&😀🙂",
            0x2545_f491_4f6c_dd1d,
        ));
        out
    }

    #[test]
    fn pieces_equal_the_generic_matchers_and_oniguruma() {
        let texts = texts();
        compare(LLAMA3, &texts);
        compare(QWEN2, &texts);
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
