//! The GPT-2 pre-tokenizer regex (`ByteLevel(use_regex=true)`), hand-coded:
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`.
//! ASCII is classified by table; other characters through the very same Oniguruma classes
//! the crate uses ([`super::unicode::ClassTable`]). Faster than the general matcher in
//! [`super::regex`] for the most common tokenizer shape.

use anyhow::Result;

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

    fn class(&self, c: char) -> Class {
        if c.is_ascii() {
            return ascii_class(c as u8);
        }
        self.table_class(c)
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

    /// Calls `emit` with each regex match of `s`, in order (the matches cover `s`).
    pub fn pieces(&self, s: &str, emit: &mut impl FnMut(&str)) {
        let mut pos = 0;
        let mut cls = |c: char| self.class(c);
        while pos < s.len() {
            let end = next_piece(s, pos, &mut cls);
            emit(&s[pos..end]);
            pos = end;
        }
    }
}

/// End (byte offset) of the GPT-2 regex match starting at `pos` (leftmost-first alternation).
fn next_piece(text: &str, pos: usize, class_of: &mut impl FnMut(char) -> Class) -> usize {
    let s = &text[pos..];
    let b = s.as_bytes();
    // 's|'t|'re|'ve|'m|'ll|'d
    if b[0] == b'\'' && b.len() >= 2 {
        match b[1] {
            b's' | b't' | b'm' | b'd' => return pos + 2,
            b'r' | b'v' if b.len() >= 3 && b[2] == b'e' => return pos + 3,
            b'l' if b.len() >= 3 && b[2] == b'l' => return pos + 3,
            _ => {}
        }
    }
    let mut it = s.char_indices();
    let (_, c0) = it.next().expect("non-empty");
    let cl0 = class_of(c0);
    // ` ?X+` for X in letters, numbers, others.
    let (start_class, body_from) = if c0 == ' ' {
        match s[1..].chars().next() {
            Some(c1) => {
                let cl1 = class_of(c1);
                if cl1 == Class::Space {
                    (Class::Space, 0)
                } else {
                    (cl1, 1)
                }
            }
            None => (Class::Space, 0),
        }
    } else {
        (cl0, 0)
    };
    if start_class != Class::Space {
        let mut end = body_from;
        for (i, c) in s[body_from..].char_indices() {
            if class_of(c) != start_class {
                return pos + body_from + i;
            }
            end = body_from + i + c.len_utf8();
        }
        return pos + end;
    }
    // Whitespace: \s+(?!\S) then \s+.
    let mut end = 0;
    let mut last_len = 0;
    for (i, c) in s.char_indices() {
        if class_of(c) != Class::Space {
            break;
        }
        end = i + c.len_utf8();
        last_len = c.len_utf8();
    }
    if end == s.len() {
        return pos + end;
    }
    // Followed by \S: give back the last whitespace char if something remains.
    if end - last_len > 0 {
        pos + end - last_len
    } else {
        pos + end
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokenizers::utils::SysRegex;

    #[test]
    fn pieces_follow_the_gpt2_regex() {
        let re = SysRegex::new(
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        )
        .unwrap();
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
}
