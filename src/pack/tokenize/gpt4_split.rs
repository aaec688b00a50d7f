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

use super::regex::Regex;
use super::unicode::{decode, ClassTable};

/// The Llama-3 / cl100k pattern.
pub const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's: the same with single digits.
pub const QWEN2: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The matcher of one `Split` pattern: this module's scanner for the two patterns above, the
/// generic matcher for any other (same pieces either way).
pub enum SplitMatcher {
    Scanner(Gpt4Split),
    Generic(Regex),
}

impl SplitMatcher {
    /// The scanner when `re`'s pattern is one it knows, else `re` itself.
    pub fn new(re: Regex, table: &ClassTable) -> SplitMatcher {
        match Gpt4Split::for_pattern(re.source(), table) {
            Some(g) => SplitMatcher::Scanner(g),
            None => SplitMatcher::Generic(re),
        }
    }

    /// Calls `emit(start, end)` for the pieces of an Isolated `Split` of `s`, in order.
    #[inline]
    pub fn split(&self, s: &str, table: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        match self {
            SplitMatcher::Scanner(g) => g.split(s, table, emit),
            SplitMatcher::Generic(r) => r.split(s, table, emit),
        }
    }
}

/// A char's class bits for this pattern.
const L: u8 = 1;
const N: u8 = 2;
const S: u8 = 4;

pub struct Gpt4Split {
    /// Atom bits of `\p{L}`, `\p{N}`, `\s` in the table.
    l: u32,
    n: u32,
    s: u32,
    /// Longest digit group (3, or 1 for Qwen2).
    digits: u32,
    ascii: [u8; 128],
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
        let bit = |a: &str| table.atoms().iter().position(|x| x == a).map(|i| 1u32 << i);
        let mut g = Gpt4Split {
            l: bit(r"\p{L}")?,
            n: bit(r"\p{N}")?,
            s: bit(r"\s")?,
            digits,
            ascii: [0; 128],
        };
        for b in 0..128u8 {
            g.ascii[b as usize] = g.class_of(b as char, table);
        }
        let is_space = |c: u8| g.ascii[c as usize] == S;
        (is_space(b'\r') && is_space(b'\n') && is_space(b' ')).then_some(g)
    }

    fn class_of(&self, c: char, table: &ClassTable) -> u8 {
        let bits = table.bits(c);
        (if bits & self.l != 0 { L } else { 0 })
            | (if bits & self.n != 0 { N } else { 0 })
            | (if bits & self.s != 0 { S } else { 0 })
    }

    /// Class bits and byte length of the char at `p`: an ASCII byte from the table inline (a
    /// call per char was a tenth of a Llama-3-shaped pack on code), anything else out of line.
    #[inline(always)]
    fn at(&self, b: &[u8], p: usize, table: &ClassTable) -> (u8, usize) {
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

    /// End of the run of chars from `p` whose class satisfies `keep` (ASCII bytes in a tight
    /// loop).
    #[inline(always)]
    fn run(&self, b: &[u8], mut p: usize, table: &ClassTable, keep: impl Fn(u8) -> bool) -> usize {
        while p < b.len() {
            let x = b[p];
            if x < 0x80 {
                if !keep(self.ascii[x as usize]) {
                    break;
                }
                p += 1;
                continue;
            }
            let (k, l) = self.at_wide(b, p, table);
            if !keep(k) {
                break;
            }
            p += l;
        }
        p
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
        let (k0, l0) = self.at(b, p, t);
        if b[p] == b'\'' {
            if let Some(e) = contraction(b, p + 1) {
                return e;
            }
        }
        let other = |k: u8| k & (L | N | S) == 0;
        // [^\r\n\p{L}\p{N}]?\p{L}+
        if k0 & L != 0 {
            return self.run(b, p, t, |k| k & L != 0);
        }
        if k0 & (L | N) == 0 && b[p] != b'\r' && b[p] != b'\n' && p + l0 < b.len() {
            let (k1, _) = self.at(b, p + l0, t);
            if k1 & L != 0 {
                return self.run(b, p + l0, t, |k| k & L != 0);
            }
        }
        // \p{N}{1,digits}
        if k0 & N != 0 {
            let mut q = p;
            let mut n = 0;
            while n < self.digits && q < b.len() {
                let (k, l) = self.at(b, q, t);
                if k & N == 0 {
                    break;
                }
                q += l;
                n += 1;
            }
            return q;
        }
        //  ?[^\s\p{L}\p{N}]+[\r\n]*
        let start = if b[p] == b' ' && p + 1 < b.len() && other(self.at(b, p + 1, t).0) {
            Some(p + 1)
        } else if other(k0) {
            Some(p)
        } else {
            None
        };
        if let Some(q) = start {
            let mut e = self.run(b, q, t, other);
            while e < b.len() && (b[e] == b'\r' || b[e] == b'\n') {
                e += 1;
            }
            return e;
        }
        // The rest start with whitespace: W = the \s run at p.
        debug_assert!(k0 & S != 0);
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

/// `(?i:'s|'t|'re|'ve|'m|'ll|'d)` after the apostrophe at `p - 1`: the match end. Case
/// insensitive as Oniguruma folds: the ASCII pair, and `ſ` (U+017F) for `s`.
fn contraction(b: &[u8], p: usize) -> Option<usize> {
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
    use super::super::regex::tests::onig_spans;
    use super::super::regex::{self, Regex};
    use super::*;

    fn pieces(s: &str, f: impl Fn(&str, &mut dyn FnMut(usize, usize))) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        f(s, &mut |a, e| v.push((a, e)));
        v
    }

    /// Text from an alphabet of every class boundary the pattern has: apostrophes and the
    /// contraction letters in both cases (and `ſ`, U+212A), spaces, tabs, `\r`, `\n`, other
    /// Unicode spaces, ASCII and non-ASCII letters and numbers, combining marks, punctuation,
    /// symbols, emoji.
    fn texts() -> Vec<String> {
        let alphabet: Vec<char> = "'’sStTrReEvVmMlLdDſ\u{212A}xyZ  \t\r\n\u{a0}\u{3000}\u{85}\u{2028}09٣½Ⅻé中\u{301}.,;:()[]{}_-+=*/\\\"#@!?<>|~`$%^&😀🙂"
            .chars()
            .collect();
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
        let mut x = 0x2545_f491_4f6c_dd1d_u64;
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

    #[test]
    fn pieces_equal_the_generic_matchers_and_oniguruma() {
        for (pattern, name) in [(LLAMA3, "llama3"), (QWEN2, "qwen2")] {
            let mut atoms = Vec::new();
            let parsed = regex::parse(pattern, &mut atoms).unwrap();
            let table = ClassTable::new(&atoms).unwrap();
            let generic = Regex::compile(parsed, &table);
            let fast = Gpt4Split::for_pattern(pattern, &table).expect("recognised");
            let mut bad = Vec::new();
            for t in texts() {
                let want = pieces(&t, |s, f| generic.split(s, &table, &mut |a, e| f(a, e)));
                let got = pieces(&t, |s, f| fast.split(s, &table, &mut |a, e| f(a, e)));
                assert_eq!(
                    want,
                    onig_spans(pattern, &t),
                    "generic matcher vs Oniguruma: {t:?}"
                );
                if got != want && bad.len() < 5 {
                    let show = |v: &[(usize, usize)]| -> Vec<String> {
                        v.iter().map(|&(a, e)| t[a..e].to_string()).collect()
                    };
                    bad.push(format!(
                        "{name} {t:?}:\n  want {:?}\n  got  {:?}",
                        show(&want),
                        show(&got)
                    ));
                }
            }
            assert!(bad.is_empty(), "{}", bad.join("\n"));
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
