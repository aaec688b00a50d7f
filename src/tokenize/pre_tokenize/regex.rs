//! The regexes of `Split` pre-tokenizers (Llama-3/cl100k, Qwen2, o200k, DeepSeek-V3, …),
//! matched with Oniguruma's semantics but without its per-call cost: a small backtracking
//! matcher over the subset those patterns use.
//!
//! Supported: alternation (leftmost-first, like Oniguruma), `(?:…)`, `(…)`, `(?i:…)` over
//! literals, `(?!…)` / `(?=…)`, classes `[…]` / `[^…]` with ranges, literal characters and
//! escapes, `\p{…}` / `\P{…}`, `\s \S \d \D \w \W`, and greedy `? * + {n} {n,} {n,m}` on
//! single-character items (`?` also on groups). Anything else — anchors, `.`, lazy or
//! possessive quantifiers, back-references, nested classes, patterns that can match the empty
//! string — is refused, so the caller keeps the `tokenizers` crate for that tokenizer: an
//! unrecognised regex can cost speed, never change ids.
//!
//! Character classes are evaluated through [`ClassTable`], i.e. by Oniguruma's own Unicode
//! tables; the matcher only decides the control flow. Case-insensitive literals match the ASCII
//! case pair plus the two code points whose simple case folding is an ASCII letter
//! (U+017F ſ → s, U+212A K → k), as Oniguruma does.

use anyhow::{bail, Result};

use super::unicode::{decode, ClassTable};

/// One character set: literal chars, ranges and class atoms, optionally negated.
#[derive(Clone, Debug, Default)]
struct CharSet {
    negated: bool,
    chars: Vec<char>,
    ranges: Vec<(u32, u32)>,
    /// Atom indices whose membership puts a char in the set.
    pos_atoms: Vec<usize>,
    /// Atom indices whose NON-membership puts a char in the set (`\S`, `\P{L}` inside `[…]`).
    neg_atoms: Vec<usize>,
    // Compiled:
    ascii: u128,
    pos_mask: u32,
    neg_mask: u32,
}

impl CharSet {
    fn raw_contains(&self, c: char, bits: u32) -> bool {
        let u = c as u32;
        let m = self.chars.contains(&c)
            || self.ranges.iter().any(|&(a, b)| a <= u && u <= b)
            || bits & self.pos_mask != 0
            || !bits & self.neg_mask != 0;
        m != self.negated
    }

    fn compile(&mut self, table: &ClassTable) {
        self.pos_mask = self.pos_atoms.iter().fold(0, |m, a| m | 1 << a);
        self.neg_mask = self.neg_atoms.iter().fold(0, |m, a| m | 1 << a);
        self.ascii = 0;
        for b in 0..128u8 {
            let c = b as char;
            if self.raw_contains(c, table.bits(c)) {
                self.ascii |= 1 << b;
            }
        }
    }

    #[inline]
    fn contains(&self, c: char, table: &ClassTable) -> bool {
        let u = c as u32;
        if u < 128 {
            self.ascii >> u & 1 == 1
        } else {
            self.raw_contains(c, table.bits(c))
        }
    }
}

#[derive(Clone, Debug)]
enum Node {
    /// A single-character set repeated min..=max times (greedy).
    Set { set: usize, min: u32, max: u32 },
    /// A group of alternatives, optional when `optional`.
    Group {
        alts: Vec<Vec<Node>>,
        optional: bool,
    },
    /// Lookahead: succeeds (consuming nothing) when an alternative matches, or when none does
    /// if `negative`.
    Look {
        alts: Vec<Vec<Node>>,
        negative: bool,
    },
}

/// A compiled pattern over a shared [`ClassTable`].
pub struct Regex {
    alts: Vec<Vec<Node>>,
    sets: Vec<CharSet>,
    /// ASCII chars that can start a match.
    first_ascii: u128,
    /// Sets that can match a match's first char (for non-ASCII).
    first_sets: Vec<usize>,
    /// Per top-level alternative: the ASCII chars that can start it (no alternative is
    /// nullable: such patterns are refused), so `match_at` skips those that cannot match.
    alt_first_ascii: Vec<u128>,
    /// The pattern's text (scanners recognise their pattern by it).
    source: String,
}

/// Continuation of a match: what must follow the current sequence.
enum Cont<'a> {
    Done,
    Then(&'a [Node], &'a Cont<'a>),
}

/// Parse result before compilation: the atoms each pattern needs go into one table.
pub struct Parsed {
    alts: Vec<Vec<Node>>,
    sets: Vec<CharSet>,
    source: String,
}

struct Parser<'a> {
    s: &'a [char],
    i: usize,
    sets: Vec<CharSet>,
    atoms: &'a mut Vec<String>,
}

fn atom_index(atoms: &mut Vec<String>, a: String) -> usize {
    if let Some(i) = atoms.iter().position(|x| *x == a) {
        return i;
    }
    atoms.push(a);
    atoms.len() - 1
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.s.get(self.i).copied()
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.i += 1;
            true
        } else {
            false
        }
    }
    fn next(&mut self) -> Result<char> {
        let c = self
            .peek()
            .ok_or_else(|| anyhow::anyhow!("unexpected end"))?;
        self.i += 1;
        Ok(c)
    }

    fn add_set(&mut self, s: CharSet) -> usize {
        self.sets.push(s);
        self.sets.len() - 1
    }

    fn alts(&mut self, icase: bool) -> Result<Vec<Vec<Node>>> {
        let mut alts = vec![self.seq(icase)?];
        while self.eat('|') {
            alts.push(self.seq(icase)?);
        }
        Ok(alts)
    }

    fn seq(&mut self, icase: bool) -> Result<Vec<Node>> {
        let mut seq = Vec::new();
        while let Some(c) = self.peek() {
            if c == '|' || c == ')' {
                break;
            }
            let node = self.item(icase)?;
            seq.push(node);
        }
        Ok(seq)
    }

    fn item(&mut self, icase: bool) -> Result<Node> {
        let c = self.next()?;
        let set = match c {
            '(' => {
                let (kind, icase2) = if self.eat('?') {
                    match self.next()? {
                        ':' => ("group", icase),
                        '!' => ("neg", icase),
                        '=' => ("pos", icase),
                        'i' if self.eat(':') => ("group", true),
                        x => bail!("unsupported group (?{x}"),
                    }
                } else {
                    ("group", icase)
                };
                let alts = self.alts(icase2)?;
                if !self.eat(')') {
                    bail!("unclosed group");
                }
                return match kind {
                    "group" => {
                        let optional = self.group_quant()?;
                        Ok(Node::Group { alts, optional })
                    }
                    k => {
                        if matches!(self.peek(), Some('?' | '*' | '+' | '{')) {
                            bail!("quantified lookahead");
                        }
                        Ok(Node::Look {
                            alts,
                            negative: k == "neg",
                        })
                    }
                };
            }
            '[' => {
                if icase {
                    bail!("class inside (?i:)");
                }
                self.class()?
            }
            '\\' => {
                let e = self.next()?;
                let mut s = CharSet::default();
                match self.escape_class(e, &mut s)? {
                    true => {
                        if icase {
                            bail!("class escape inside (?i:)");
                        }
                        s
                    }
                    false => literal_set(self.escape_char(e)?, icase)?,
                }
            }
            '.' | '^' | '$' | '*' | '+' | '?' | '{' | '}' | ']' => {
                bail!("unsupported {c:?}")
            }
            c => literal_set(c, icase)?,
        };
        let set = self.add_set(set);
        let (min, max) = self.quant()?;
        Ok(Node::Set { set, min, max })
    }

    /// `\p{X}`, `\s`, … into `s`; Ok(false) when `e` is not a class escape.
    fn escape_class(&mut self, e: char, s: &mut CharSet) -> Result<bool> {
        let (atom, neg) = match e {
            'p' | 'P' => {
                if !self.eat('{') {
                    bail!("\\{e} without braces");
                }
                let mut name = String::new();
                loop {
                    match self.next()? {
                        '}' => break,
                        c if c.is_ascii_alphanumeric() || c == '_' => name.push(c),
                        c => bail!("bad property name char {c:?}"),
                    }
                }
                if name.is_empty() {
                    bail!("empty property");
                }
                (format!("\\p{{{name}}}"), e == 'P')
            }
            's' | 'S' => ("\\s".to_string(), e == 'S'),
            'd' | 'D' => ("\\d".to_string(), e == 'D'),
            'w' | 'W' => ("\\w".to_string(), e == 'W'),
            _ => return Ok(false),
        };
        let k = atom_index(self.atoms, atom);
        if neg {
            s.neg_atoms.push(k);
        } else {
            s.pos_atoms.push(k);
        }
        Ok(true)
    }

    fn escape_char(&mut self, e: char) -> Result<char> {
        Ok(match e {
            'r' => '\r',
            'n' => '\n',
            't' => '\t',
            'f' => '\x0c',
            'v' => '\x0b',
            'a' => '\x07',
            'e' => '\x1b',
            'x' => {
                let mut h = String::new();
                if self.eat('{') {
                    loop {
                        match self.next()? {
                            '}' => break,
                            c => h.push(c),
                        }
                    }
                } else {
                    h.push(self.next()?);
                    h.push(self.next()?);
                }
                let u = u32::from_str_radix(&h, 16)?;
                char::from_u32(u).ok_or_else(|| anyhow::anyhow!("bad \\x"))?
            }
            c if c.is_ascii_punctuation() || c == ' ' => c,
            c => bail!("unsupported escape \\{c}"),
        })
    }

    fn class(&mut self) -> Result<CharSet> {
        let mut s = CharSet {
            negated: self.eat('^'),
            ..CharSet::default()
        };
        let mut first = true;
        loop {
            let c = self.next()?;
            if c == ']' && !first {
                break;
            }
            first = false;
            let lo = match c {
                '[' => bail!("nested class"),
                '&' if self.peek() == Some('&') => bail!("class intersection"),
                '\\' => {
                    let e = self.next()?;
                    if self.escape_class(e, &mut s)? {
                        continue;
                    }
                    self.escape_char(e)?
                }
                c => c,
            };
            // A range `lo-hi` (a '-' before ']' is literal).
            if self.peek() == Some('-') && self.s.get(self.i + 1).is_some_and(|&n| n != ']') {
                self.i += 1;
                let hi = match self.next()? {
                    '\\' => {
                        let e = self.next()?;
                        self.escape_char(e)?
                    }
                    '[' => bail!("nested class"),
                    h => h,
                };
                if (hi as u32) < lo as u32 {
                    bail!("bad range");
                }
                s.ranges.push((lo as u32, hi as u32));
            } else {
                s.chars.push(lo);
            }
        }
        Ok(s)
    }

    fn quant(&mut self) -> Result<(u32, u32)> {
        let q = match self.peek() {
            Some('?') => (0, 1),
            Some('*') => (0, u32::MAX),
            Some('+') => (1, u32::MAX),
            Some('{') => {
                let save = self.i;
                self.i += 1;
                let mut a = String::new();
                let mut b: Option<String> = None;
                loop {
                    match self.next()? {
                        '}' => break,
                        ',' if b.is_none() => b = Some(String::new()),
                        d if d.is_ascii_digit() => match &mut b {
                            Some(b) => b.push(d),
                            None => a.push(d),
                        },
                        _ => {
                            self.i = save;
                            bail!("bad repetition");
                        }
                    }
                }
                if a.is_empty() {
                    bail!("{{,n}} repetition");
                }
                let min: u32 = a.parse()?;
                let max = match b {
                    None => min,
                    Some(b) if b.is_empty() => u32::MAX,
                    Some(b) => b.parse()?,
                };
                if max < min {
                    bail!("bad repetition bounds");
                }
                self.i -= 1; // re-point at '}' for the common advance below
                (min, max)
            }
            _ => return Ok((1, 1)),
        };
        self.i += 1;
        if matches!(self.peek(), Some('?' | '+')) {
            bail!("lazy or possessive quantifier");
        }
        if matches!(self.peek(), Some('*' | '{')) {
            bail!("stacked quantifiers");
        }
        Ok(q)
    }

    fn group_quant(&mut self) -> Result<bool> {
        match self.peek() {
            Some('?') => {
                self.i += 1;
                if matches!(self.peek(), Some('?' | '+' | '*' | '{')) {
                    bail!("unsupported group quantifier");
                }
                Ok(true)
            }
            Some('*' | '+' | '{') => bail!("repeated group"),
            _ => Ok(false),
        }
    }
}

fn literal_set(c: char, icase: bool) -> Result<CharSet> {
    let chars = if !icase || (c.is_ascii() && !c.is_ascii_alphabetic()) {
        vec![c]
    } else if c.is_ascii() {
        let mut v = vec![c.to_ascii_lowercase(), c.to_ascii_uppercase()];
        match v[0] {
            's' => v.push('\u{17F}'),
            'k' => v.push('\u{212A}'),
            _ => {}
        }
        v
    } else {
        bail!("case-insensitive non-ASCII literal {c:?} (Unicode case folding is not modelled)");
    };
    Ok(CharSet {
        chars,
        ..CharSet::default()
    })
}

fn min_len(seq: &[Node]) -> u32 {
    seq.iter()
        .map(|n| match n {
            Node::Set { min, .. } => *min,
            Node::Group { optional: true, .. } | Node::Look { .. } => 0,
            Node::Group { alts, .. } => alts.iter().map(|a| min_len(a)).min().unwrap_or(0),
        })
        .fold(0u32, |a, b| a.saturating_add(b))
}

/// Parse `pattern`, registering the class atoms it needs in `atoms`.
pub fn parse(pattern: &str, atoms: &mut Vec<String>) -> Result<Parsed> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut p = Parser {
        s: &chars,
        i: 0,
        sets: Vec::new(),
        atoms,
    };
    let alts = p.alts(false)?;
    if p.i != chars.len() {
        bail!("unbalanced ')' at {}", p.i);
    }
    if alts.iter().any(|a| min_len(a) == 0) {
        bail!("pattern can match the empty string");
    }
    Ok(Parsed {
        alts,
        sets: p.sets,
        source: pattern.to_string(),
    })
}

fn first_sets(seq: &[Node], out: &mut Vec<usize>) {
    for n in seq {
        match n {
            Node::Set { set, min, .. } => {
                out.push(*set);
                if *min > 0 {
                    return;
                }
            }
            Node::Group { alts, optional } => {
                for a in alts {
                    first_sets(a, out);
                }
                if !optional && alts.iter().all(|a| min_len(a) > 0) {
                    return;
                }
            }
            Node::Look { .. } => {}
        }
    }
}

impl Regex {
    /// Compile a parsed pattern against the table that holds its atoms.
    pub fn compile(p: Parsed, table: &ClassTable) -> Regex {
        let mut sets = p.sets;
        for s in &mut sets {
            s.compile(table);
        }
        let mut first = Vec::new();
        for a in &p.alts {
            first_sets(a, &mut first);
        }
        first.sort_unstable();
        first.dedup();
        let first_ascii = first.iter().fold(0u128, |m, &s| m | sets[s].ascii);
        let alt_first_ascii = p
            .alts
            .iter()
            .map(|a| {
                let mut f = Vec::new();
                first_sets(a, &mut f);
                f.iter().fold(0u128, |m, &s| m | sets[s].ascii)
            })
            .collect();
        Regex {
            alts: p.alts,
            sets,
            first_ascii,
            first_sets: first,
            alt_first_ascii,
            source: p.source,
        }
    }

    /// The pattern's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Calls `emit(start, end)` for the pieces of a `Split(…, behavior = Isolated)`: every match
    /// and every non-empty gap between matches, in order, covering `s`.
    pub fn split(&self, s: &str, table: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        let b = s.as_bytes();
        let mut gap = 0;
        let mut p = 0;
        while p < b.len() {
            let (c, l) = decode(b, p);
            let can = if (c as u32) < 128 {
                self.first_ascii >> (c as u32) & 1 == 1
            } else {
                self.first_sets
                    .iter()
                    .any(|&k| self.sets[k].contains(c, table))
            };
            if can {
                if let Some(e) = self.match_at(b, p, table) {
                    if gap < p {
                        emit(gap, p);
                    }
                    emit(p, e);
                    p = e;
                    gap = e;
                    continue;
                }
            }
            p += l;
        }
        if gap < b.len() {
            emit(gap, b.len());
        }
    }

    /// End of the leftmost-first match starting exactly at `p`.
    pub fn match_at(&self, b: &[u8], p: usize, table: &ClassTable) -> Option<usize> {
        if b[p] < 0x80 {
            let bit = 1u128 << b[p];
            return self
                .alts
                .iter()
                .zip(&self.alt_first_ascii)
                .filter(|(_, m)| *m & bit != 0)
                .find_map(|(a, _)| self.m(b, a, p, &Cont::Done, table));
        }
        self.alts
            .iter()
            .find_map(|a| self.m(b, a, p, &Cont::Done, table))
    }

    fn m(&self, b: &[u8], seq: &[Node], pos: usize, k: &Cont, t: &ClassTable) -> Option<usize> {
        let Some((node, rest)) = seq.split_first() else {
            return match k {
                Cont::Done => Some(pos),
                Cont::Then(next, kk) => self.m(b, next, pos, kk, t),
            };
        };
        match node {
            Node::Set { set, min, max } => {
                let cs = &self.sets[*set];
                let mut p = pos;
                let mut n = 0u32;
                while n < *max && p < b.len() {
                    let (c, l) = decode(b, p);
                    if !cs.contains(c, t) {
                        break;
                    }
                    p += l;
                    n += 1;
                }
                if n < *min {
                    return None;
                }
                loop {
                    if let Some(e) = self.m(b, rest, p, k, t) {
                        return Some(e);
                    }
                    if n == *min {
                        return None;
                    }
                    p -= 1;
                    while b[p] & 0xC0 == 0x80 {
                        p -= 1;
                    }
                    n -= 1;
                }
            }
            Node::Group { alts, optional } => {
                let k2 = Cont::Then(rest, k);
                for a in alts {
                    if let Some(e) = self.m(b, a, pos, &k2, t) {
                        return Some(e);
                    }
                }
                if *optional {
                    self.m(b, rest, pos, k, t)
                } else {
                    None
                }
            }
            Node::Look { alts, negative } => {
                let hit = alts
                    .iter()
                    .any(|a| self.m(b, a, pos, &Cont::Done, t).is_some());
                if hit != *negative {
                    self.m(b, rest, pos, k, t)
                } else {
                    None
                }
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use tokenizers::utils::SysRegex;

    /// The byte spans of an Isolated `Split` by Oniguruma itself: every match and every
    /// non-empty gap between matches, in order.
    pub(in crate::tokenize) fn onig_spans(re: &str, s: &str) -> Vec<(usize, usize)> {
        let r = SysRegex::new(re).unwrap();
        let mut out = Vec::new();
        let mut prev = 0;
        for (a, b) in r.find_iter(s) {
            if prev < a {
                out.push((prev, a));
            }
            out.push((a, b));
            prev = b;
        }
        if prev < s.len() {
            out.push((prev, s.len()));
        }
        out
    }

    /// The Llama-3 / cl100k split pattern (as in `gpt4_split`, which has its own scanner).
    const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

    fn pieces_onig(re: &str, s: &str) -> Vec<String> {
        onig_spans(re, s)
            .into_iter()
            .map(|(a, b)| s[a..b].to_string())
            .collect()
    }

    fn pieces_ours(re: &str, s: &str) -> Vec<String> {
        let mut atoms = Vec::new();
        let p = parse(re, &mut atoms).unwrap();
        let t = ClassTable::new(&atoms).unwrap();
        let r = Regex::compile(p, &t);
        let mut out = Vec::new();
        r.split(s, &t, &mut |a, b| out.push(s[a..b].to_string()));
        out
    }

    #[test]
    fn llama3_pieces_match_oniguruma() {
        for s in [
            "Hello world, it's 42 o'CLOCK!  Double  spaces\n\n\tand tabs   ",
            "x'S 'ſ 'K 'll'LL'Re  12345678 ١٢٣٤ ½\r\n\r\n  \n x",
            "数字 中文字符 über naïve e\u{301} 😀👍🏽 👨‍👩‍👧",
            "   ",
            "a",
            "\n",
            "fn main() {\n    let x = 1;\n}\n",
        ] {
            assert_eq!(pieces_ours(LLAMA3, s), pieces_onig(LLAMA3, s), "{s:?}");
        }
    }

    #[test]
    fn refuses_what_it_cannot_model() {
        let mut a = Vec::new();
        for bad in [
            "a*", "^a", "a+?", "a.b", r"(a)\1", "(?i)a", "(ab)+", "[[a]]", "x|", "(?i:é)",
        ] {
            assert!(parse(bad, &mut a).is_err(), "{bad}");
        }
    }
}
