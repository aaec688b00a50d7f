//! The GPT-2 pre-tokenizer regex (`ByteLevel(use_regex=true)`), hand-coded:
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//! ASCII is classified by table; other characters through the very same Oniguruma classes
//! the crate uses ([`super::unicode::ClassTable`]). Faster than the general matcher in
//! [`super::regex`] for the most common tokenizer shape.

use anyhow::Result;

use super::scan_classes::ascii_letters_prefix;
use super::unicode::ClassTable;

/// ASCII classes of the GPT-2 regex (checked against Oniguruma in the tests).
fn ascii_class(b: u8) -> Class {
    match b {
        b'a'..=b'z' | b'A'..=b'Z' => Class::Letter,
        b'0'..=b'9' => Class::Number,
        b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' => Class::Space,
        _ => Class::Other,
    }
}

/// Character classes of the GPT-2 regex.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    Letter,
    Number,
    Space,
    Other,
}

/// The three classes the regex uses, by Oniguruma.
pub struct Gpt2Classes {
    table: ClassTable,
}

impl Gpt2Classes {
    pub fn new() -> Result<Gpt2Classes> {
        let atoms = [r"\p{L}", r"\p{N}", r"\s"].map(String::from);
        Ok(Gpt2Classes {
            table: ClassTable::new(&atoms)?,
        })
    }

    /// The class from the Unicode table alone (the ASCII fast path's reference).
    fn table_class(&self, c: char) -> Class {
        let b = self.table.bits(c);
        if b & 1 != 0 {
            Class::Letter
        } else if b & 2 != 0 {
            Class::Number
        } else if b & 4 != 0 {
            Class::Space
        } else {
            Class::Other
        }
    }

    /// Calls `emit` with each regex match of `s`, in order (the matches cover `s`): the tests'
    /// view of [`Self::match_at`], which the tokenizer's scan loop calls directly.
    #[cfg(test)]
    fn pieces(&self, s: &str, emit: &mut impl FnMut(&str)) {
        let mut pos = 0;
        while pos < s.len() {
            let end = self.match_at(s, pos);
            emit(&s[pos..end]);
            pos = end;
        }
    }

    /// The class of the char at byte `p` of `s` (a char boundary) and its length in bytes.
    #[inline(always)]
    fn class_at(&self, s: &str, p: usize) -> (Class, usize) {
        let c = s.as_bytes()[p];
        if c < 0x80 {
            return (ascii_class(c), 1);
        }
        let ch = s[p..].chars().next().expect("a char at a boundary");
        (self.table_class(ch), ch.len_utf8())
    }

    /// End of the run of `class` chars from byte `p` (ASCII letters 16 bytes at a time).
    #[inline(always)]
    fn run(&self, s: &str, mut p: usize, class: Class) -> usize {
        let b = s.as_bytes();
        loop {
            if class == Class::Letter {
                while let Some(w) = b.get(p..p + 16) {
                    let n = ascii_letters_prefix(w.try_into().expect("16 bytes"), true);
                    p += n;
                    if n < 16 {
                        break;
                    }
                }
            }
            if p == b.len() {
                return p;
            }
            let (cl, len) = self.class_at(s, p);
            if cl != class {
                return p;
            }
            p += len;
        }
    }

    /// End (byte offset) of the GPT-2 regex match starting at `pos`, a char boundary before the
    /// end of `s` (leftmost-first alternation). Bytes, not chars: ASCII is classified by table
    /// and letter runs tested 16 bytes at a time; other chars through the Unicode table.
    #[inline(always)]
    pub fn match_at(&self, s: &str, pos: usize) -> usize {
        let b = s.as_bytes();
        let c0 = b[pos];
        // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive in GPT-2's pattern)
        if c0 == b'\'' {
            match b.get(pos + 1) {
                Some(b's' | b't' | b'm' | b'd') => return pos + 2,
                Some(b'r' | b'v') if b.get(pos + 2) == Some(&b'e') => return pos + 3,
                Some(b'l') if b.get(pos + 2) == Some(&b'l') => return pos + 3,
                _ => {}
            }
        }
        // ` ?X+` for X in letters, numbers, others.
        if c0 == b' ' {
            if pos + 1 == b.len() {
                return pos + 1;
            }
            let (cl1, len1) = self.class_at(s, pos + 1);
            if cl1 != Class::Space {
                return self.run(s, pos + 1 + len1, cl1);
            }
        } else {
            let (cl0, len0) = self.class_at(s, pos);
            if cl0 != Class::Space {
                return self.run(s, pos + len0, cl0);
            }
        }
        // Whitespace: \s+(?!\S), else \s+.
        let mut p = pos;
        let mut last = 0;
        while p < b.len() {
            let (cl, len) = self.class_at(s, p);
            if cl != Class::Space {
                break;
            }
            last = len;
            p += len;
        }
        if p == b.len() {
            return p;
        }
        // Followed by \S: give back the last whitespace char if something remains.
        if p - last > pos {
            p - last
        } else {
            p
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::utils::SysRegex;

    /// GPT-2's pre-tokenizer pattern through Oniguruma, as the `tokenizers` crate runs it.
    fn gpt2_regex() -> SysRegex {
        SysRegex::new(r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+")
            .unwrap()
    }

    #[test]
    fn pieces_follow_the_gpt2_regex() {
        let re = gpt2_regex();
        let cls = Gpt2Classes::new().unwrap();
        for b in 0u8..128 {
            let c = b as char;
            assert_eq!(ascii_class(b), cls.table_class(c), "{c:?}");
        }
        let texts = [
            "Hello world, it's 42 o'clock!  Double  spaces\n\n\tand tabs   ",
            "  leading and trailing  \n",
            "naïve café — “quotes” 'single' x''y ''s l'll 're 'Re",
            "数字 ١٢٣ Ⅻ ½ über\u{00a0}nbsp\u{2003}em\u{3000}ideo",
            "a\r\nb\x0b\x0cc \u{85}d  \u{85} e",
            "emoji 😀😀 x",
            "",
            " ",
            "'",
            "x'",
        ];
        for t in texts {
            let want: Vec<String> = re.find_iter(t).map(|(a, b)| t[a..b].to_string()).collect();
            let mut got = Vec::new();
            cls.pieces(t, &mut |w| got.push(w.to_string()));
            assert_eq!(got, want, "{t:?}");
        }
    }

    /// Random texts over the alphabet where the pattern's branches meet (contractions, a space
    /// before each class, runs longer than 16 bytes, non-ASCII letters / digits / spaces
    /// inside ASCII runs, lone and trailing whitespace): the byte scanner equals Oniguruma.
    #[test]
    fn random_texts_follow_the_gpt2_regex() {
        let re = gpt2_regex();
        let cls = Gpt2Classes::new().unwrap();
        let alphabet = [
            "a",
            "Z",
            "q",
            "é",
            "ß",
            "数",
            "١",
            "7",
            "Ⅻ",
            "½",
            " ",
            " ",
            "  ",
            "\n",
            "\t",
            "\r\n",
            "\u{a0}",
            "\u{2003}",
            "\u{85}",
            "'",
            "'s",
            "'ll",
            "'re",
            "'R",
            "'v",
            ",",
            "(",
            "😀",
            "_",
            "-",
            "abcdefghijklmnopqrstuvwxyz",
            "ABCDEFGHIJKLMNOPQRSTU",
            "0123456789",
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..3000 {
            let mut t = String::new();
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            for _ in 0..(x % 24) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                t.push_str(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let want: Vec<String> = re.find_iter(&t).map(|(a, b)| t[a..b].to_string()).collect();
            let mut got = Vec::new();
            cls.pieces(&t, &mut |w| got.push(w.to_string()));
            assert_eq!(got, want, "{t:?}");
        }
    }
}
