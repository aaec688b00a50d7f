//! The matcher of one `Split` pattern: a hand-written scanner for the patterns that have one
//! (Llama-3 / Qwen2: [`super::gpt4_split`]; o200k: [`super::o200k_split`]; DeepSeek-V3's
//! sequence of three, as one: [`super::deepseek_split`]), the generic backtracking matcher
//! ([`super::regex`]) for any other — the same pieces either way.

use super::deepseek_split::DeepSeekSplit;
use super::gpt4_split::Gpt4Split;
use super::o200k_split::O200kSplit;
use super::regex::Regex;
use super::scan_classes::Scanner;
use super::unicode::ClassTable;

/// See the module doc.
pub enum SplitMatcher {
    Scanner(Gpt4Split),
    O200k(O200kSplit),
    /// The three `Split`s of DeepSeek-V3, in sequence.
    DeepSeek(DeepSeekSplit),
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

    /// The matchers of a `Sequence` of `Split`s (each piece of one is split by the next): one
    /// scanner for DeepSeek-V3's three, else [`Self::new`] of each.
    pub fn sequence(res: Vec<Regex>, table: &ClassTable) -> Vec<SplitMatcher> {
        let sources: Vec<&str> = res.iter().map(|r| r.source()).collect();
        if let Some(d) = DeepSeekSplit::for_patterns(&sources, table) {
            return vec![SplitMatcher::DeepSeek(d)];
        }
        res.into_iter()
            .map(|r| SplitMatcher::new(r, table))
            .collect()
    }

    /// Calls `emit(start, end)` for the pieces of an Isolated `Split` of `s`, in order.
    #[inline]
    pub fn split(&self, s: &str, table: &ClassTable, emit: &mut impl FnMut(usize, usize)) {
        match self {
            SplitMatcher::Scanner(g) => g.split(s, table, emit),
            SplitMatcher::O200k(o) => o.split(s, table, emit),
            SplitMatcher::DeepSeek(d) => d.split(s, table, emit),
            SplitMatcher::Generic(r) => r.split(s, table, emit),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::deepseek_split::DEEPSEEK3;
    use super::super::gpt4_split::{LLAMA3, QWEN2};
    use super::super::o200k_split::O200K;
    use super::super::regex;
    use super::super::regex::tests::onig_spans;
    use super::*;

    fn pieces(s: &str, f: impl Fn(&str, &mut dyn FnMut(usize, usize))) -> Vec<(usize, usize)> {
        let mut v = Vec::new();
        f(s, &mut |a, e| v.push((a, e)));
        v
    }

    /// 400 random strings from `alphabet` at each of several lengths (the crate's seeded
    /// [`crate::util::SplitMix`] from `seed`).
    fn random_texts(alphabet: &str, seed: u64) -> Vec<String> {
        let alphabet: Vec<char> = alphabet.chars().collect();
        let mut rng = crate::util::SplitMix(seed);
        let mut out = Vec::new();
        for len in [1usize, 2, 3, 5, 8, 13, 40, 200] {
            for _ in 0..400 {
                let s = (0..len)
                    .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
                    .collect();
                out.push(s);
            }
        }
        out
    }

    /// `pattern` gets a scanner from [`SplitMatcher::new`], and its pieces of every text equal
    /// the generic matcher's, which equal Oniguruma's.
    fn compare(pattern: &str, texts: &[String]) {
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
        check(
            pattern,
            texts,
            |t| pieces(t, |s, f| generic.split(s, &table, &mut |a, e| f(a, e))),
            |t| onig_spans(pattern, t),
            |t| pieces(t, |s, f| fast.split(s, &table, &mut |a, e| f(a, e))),
        );
    }

    type Spans = Vec<(usize, usize)>;

    /// For every text: the generic matchers' pieces (`want`) equal Oniguruma's, and the
    /// scanner's (`got`) equal them (the first five differences are shown).
    fn check(
        name: &str,
        texts: &[String],
        want: impl Fn(&str) -> Spans,
        onig: impl Fn(&str) -> Spans,
        got: impl Fn(&str) -> Spans,
    ) {
        let mut bad = Vec::new();
        for t in texts {
            let (want, got) = (want(t), got(t));
            assert_eq!(want, onig(t), "generic matcher vs Oniguruma: {t:?}");
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
        assert!(bad.is_empty(), "{name}:\n{}", bad.join("\n"));
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
    fn llama3_qwen2_pieces_equal_the_generic_matchers_and_oniguruma() {
        let texts = texts();
        compare(LLAMA3, &texts);
        compare(QWEN2, &texts);
    }

    /// o200k texts: code, prose, CJK, Arabic (with harakat), emoji, digits, apostrophes, `\r\n` runs,
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
        // The ASCII fast path's edges: upper runs ending at a lowercase, a non-ASCII lower, a
        // non-ASCII upper, a mark, an ASCII non-letter and the end; `P` + upper / lower runs.
        "ABc ABé ABÉx ABʰ AB\u{301}c AB. (ABC) _Ab \tAB\u{301} \x01ab ~XYZ\r\n \n\n  \t\r\nAB",
    ];

    /// Every class boundary o200k's pattern has (upper, lower, title, modifier, other letters,
    /// marks, numbers, spaces, the contraction letters, `/`).
    const ALPHABET: &str = "'’sStTrReEvVmMlLdDſ\u{212A}xyZÉéǅʰ中ع\u{64E}\u{301}\u{903}  \t\r\n\u{a0}\u{3000}\u{85}\u{2028}09٣½Ⅻ.,;:()_-+=*/\\\"#@!?<>|~`$%^&😀\u{200d}";

    #[test]
    fn o200k_pieces_equal_the_generic_matchers_and_oniguruma() {
        let mut texts: Vec<String> = CORPUS.iter().map(|s| s.to_string()).collect();
        texts.push(CORPUS.concat());
        texts.extend(random_texts(ALPHABET, 0x9e37_79b9_7f4a_7c15));
        compare(O200K, &texts);
    }

    /// The pieces of `n` splits applied in sequence (`split(i, piece)`: the spans of split `i`
    /// of a piece; each piece of one split by the next), as spans of `s` (at `from`).
    fn chained(
        s: &str,
        from: usize,
        i: usize,
        n: usize,
        split: &dyn Fn(usize, &str) -> Vec<(usize, usize)>,
    ) -> Vec<(usize, usize)> {
        if i == n {
            return vec![(from, from + s.len())];
        }
        split(i, s)
            .into_iter()
            .flat_map(|(a, e)| chained(&s[a..e], from + a, i + 1, n, split))
            .collect()
    }

    /// DeepSeek-V3 texts: code, prose, CJK and kana runs (with their marks, `・`, `゠`, `゛`,
    /// `ー` and unassigned U+3040) beside numbers, Latin and spaces, Arabic with harakat, emoji,
    /// long digit runs, punctuation runs with `\r\n`, combining marks, control and format chars.
    const DS_CORPUS: &[&str] = &[
        "fn main() {\r\n    let x = a/b // c;\r\n\r\n    return HTTPServer::new(\"it's\", 0x1F);\n}\n",
        "#include <stdio.h>\nint main(void){printf(\"%d\\n\",12345678);}\t// _private .method\n",
        "The CAT's toy; DON'T you SEE?  I'LL go.\tWe're here -- (really) [sic] {x}... ok!!\r\n",
        "中文文本123包含标点。日本語のテキスト、カタカナ・テスト゠ゝゞーア\u{3099}か\u{309a}゛゜x",
        "abc中文def 12中34 ab  中  1  x  \u{3000}中\u{3040}ひ1ひ 、。「」《》 한국어 문장입니다.",
        "العربية: كَتَبَ الوَلَدُ الدَّرْسَ ١٢٣٤٥ مرة",
        "emoji 😀😀👍🏽 family 👨\u{200d}👩\u{200d}👧 flags 🇫🇷 ok \u{200b}\u{200b}x \u{200b} \u{feff}a",
        "café naïve e\u{301}te\u{301} A\u{301}BC \u{301}\u{301}x \u{301}AB \u{301} 1\u{301} -\u{301}",
        "1234567890123 ١٢٣٤٥ ½¾ ⅫⅫⅫⅫ 3.14159 10,000,000 a1b22c333d4444",
        "!!!\r\n\r\n;;; \n...\n\n+++ --> ==>\r\n  $$ ^^ `` ~~ |x| @y #z %w &v *u",
        "  \r\n\r\n   \n\n\t \u{a0}\u{3000}x \u{2028}y \u{85}z   \x01\x02a\x7f \u{e000}b",
        "x  1  y\t\t2\n 3 中  中\u{3000}\u{3000}中 ー  ・  \u{301}  ",
    ];

    /// Every class boundary of DeepSeek-V3's three patterns: numbers (ASCII, Arabic-Indic,
    /// ½, Ⅻ), CJK and kana (letters, marks, `・`, `゠`, `゛`, unassigned U+3040), letters in
    /// and out of ASCII, marks, ASCII punctuation and symbols, other punctuation and symbols,
    /// spaces and newlines, control, format and private-use chars, emoji.
    const DS_ALPHABET: &str = "aZzé中ひカ・゠゛\u{3099}ー\u{3040}一龥ʰع\u{64e}\u{301}19٣½Ⅻ'.,;:-_()$+<^`~!#/\\、。«»€  \t\r\n\u{a0}\u{3000}\u{85}\u{2028}\u{200b}\u{200d}\u{feff}\u{e000}\x01😀";

    #[test]
    fn deepseek3_pieces_equal_the_generic_matchers_chained_and_oniguruma() {
        let mut atoms = Vec::new();
        let parsed: Vec<_> = DEEPSEEK3
            .iter()
            .map(|p| regex::parse(p, &mut atoms).unwrap())
            .collect();
        let table = ClassTable::new(&atoms).unwrap();
        let generic: Vec<Regex> = parsed
            .into_iter()
            .map(|p| Regex::compile(p, &table))
            .collect();
        let compile = || {
            let mut a = atoms.clone();
            DEEPSEEK3
                .iter()
                .map(|p| Regex::compile(regex::parse(p, &mut a).unwrap(), &table))
                .collect()
        };
        let fast = SplitMatcher::sequence(compile(), &table);
        assert!(
            matches!(fast.as_slice(), [SplitMatcher::DeepSeek(_)]),
            "no scanner for DeepSeek-V3's splits"
        );
        // As DeepSeek-V3's tokenizer.json spells them, and with its `\"` unescaped: the scanner;
        // two patterns swapped: three generic matchers.
        let json = r##"["\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+", "[!\\\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"]"##;
        let spelled: Vec<String> = serde_json::from_str(json).unwrap();
        let unescaped: Vec<String> = spelled.iter().map(|p| p.replace("\\\"", "\"")).collect();
        let mut swapped = spelled.clone();
        swapped.swap(0, 1);
        for (pats, fused) in [(spelled, true), (unescaped, true), (swapped, false)] {
            let mut a = atoms.clone();
            let res = pats
                .iter()
                .map(|p| Regex::compile(regex::parse(p, &mut a).unwrap(), &table))
                .collect();
            let n = SplitMatcher::sequence(res, &table).len();
            assert_eq!(n, if fused { 1 } else { 3 }, "{pats:?}");
        }

        let gen =
            |i: usize, s: &str| pieces(s, |s, f| generic[i].split(s, &table, &mut |a, e| f(a, e)));
        let onig = |i: usize, s: &str| onig_spans(DEEPSEEK3[i], s);
        let mut texts: Vec<String> = DS_CORPUS.iter().map(|s| s.to_string()).collect();
        texts.push(DS_CORPUS.concat());
        texts.extend(random_texts(DS_ALPHABET, 0x2545_f491_4f6c_dd1d));
        texts.extend(random_texts(
            "ab  \n\r\t1中.,(_é\u{301}\u{200b}",
            0x9e37_79b9_7f4a_7c15,
        ));
        check(
            "DeepSeek-V3",
            &texts,
            |t| chained(t, 0, 0, 3, &gen),
            |t| chained(t, 0, 0, 3, &onig),
            |t| pieces(t, |s, f| fast[0].split(s, &table, &mut |a, e| f(a, e))),
        );
    }
}
