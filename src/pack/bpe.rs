//! An exact fast path for GPT-2-style byte-level BPE tokenizers: the same ids as the
//! `tokenizers` library, several times faster, because it skips what `pack` never needs
//! (offsets, normalisation passes, added-token splitting on texts without added tokens,
//! per-call allocation) and caches every word's ids per thread.
//!
//! Supported exactly (anything else → `from_tokenizer_json` refuses, the caller uses the
//! crate): no normalizer; pre-tokenizer `ByteLevel` with `use_regex: true` (GPT-2 regex
//! `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`), any
//! `add_prefix_space`; model `BPE` without dropout, continuing-subword prefix, end-of-word
//! suffix or byte fallback, with every one of the 256 byte symbols in the vocabulary.
//! A text containing any added token's content returns `None` (the crate splits those).
//!
//! The regex is hand-coded: ASCII is classified by table; other characters through the very
//! same Oniguruma classes the crate uses (`\p{L}`, `\p{N}`, `\s`), cached per thread.

use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use anyhow::{bail, Context, Result};
use tokenizers::utils::SysRegex;

/// rustc's Fx hash: a multiply-rotate hash, much cheaper than SipHash for short keys.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().expect("8 bytes")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut b = [0u8; 8];
            b[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(b) ^ (rest.len() as u64) << 59);
        }
    }
    fn write_u64(&mut self, x: u64) {
        self.add(x);
    }
    fn write_usize(&mut self, x: usize) {
        self.add(x as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

impl FxHasher {
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// Words longer than this (bytes) send the document through the crate (its heap-based merge
/// is O(n log n); the quadratic loop here is for normal words).
const MAX_WORD_LEN: usize = 256;

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

pub struct FastBpe {
    /// byte → id of its byte-level symbol.
    byte_ids: [u32; 256],
    /// (left << 32 | right) → (rank << 32 | merged id).
    merges: FxMap<u64, u64>,
    /// With `ignore_merges`, whole words found in the vocabulary (byte-level string → id).
    whole_words: Option<HashMap<Vec<u8>, u32>>,
    add_prefix_space: bool,
    /// Contents of all added tokens (texts containing one go to the crate).
    added: Vec<String>,
    letter: SysRegex,
    number: SysRegex,
    space: SysRegex,
    /// Cache generation: bumps per instance so thread-local caches never mix tokenizers.
    id: u64,
}

/// GPT-2's byte → unicode map (bytes_to_unicode).
pub fn byte_to_char() -> [char; 256] {
    let mut out = ['\0'; 256];
    let mut n = 0u32;
    for b in 0..256u32 {
        let keep = (b'!' as u32..=b'~' as u32).contains(&b)
            || (0xA1..=0xAC).contains(&b)
            || (0xAE..=0xFF).contains(&b);
        out[b as usize] = if keep {
            char::from_u32(b).expect("latin-1")
        } else {
            let c = char::from_u32(256 + n).expect("valid");
            n += 1;
            c
        };
    }
    out
}

static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

struct ThreadCache {
    owner: u64,
    words: FxMap<Vec<u8>, Vec<u32>>,
    classes: FxMap<char, Class>,
}

thread_local! {
    static CACHE: RefCell<ThreadCache> = RefCell::new(ThreadCache {
        owner: 0,
        words: FxMap::default(),
        classes: FxMap::default(),
    });
}

/// Bound on cached words per thread (cleared when reached).
const MAX_CACHED_WORDS: usize = 1 << 18;
/// Words longer than this (bytes) are not cached.
const MAX_CACHED_WORD_LEN: usize = 64;

fn get<'a>(v: &'a serde_json::Value, k: &str) -> Option<&'a serde_json::Value> {
    v.get(k).filter(|x| !x.is_null())
}

impl FastBpe {
    /// Build from the text of a tokenizer.json, or refuse when it is not exactly supported.
    pub fn from_tokenizer_json(text: &str) -> Result<FastBpe> {
        let v: serde_json::Value = serde_json::from_str(text).context("tokenizer.json")?;
        if get(&v, "normalizer").is_some() {
            bail!("has a normalizer");
        }
        let pt = get(&v, "pre_tokenizer").context("no pre_tokenizer")?;
        if pt.get("type").and_then(|t| t.as_str()) != Some("ByteLevel") {
            bail!("pre_tokenizer is not ByteLevel");
        }
        if pt.get("use_regex").and_then(|x| x.as_bool()) == Some(false) {
            bail!("ByteLevel without its regex");
        }
        let add_prefix_space = pt
            .get("add_prefix_space")
            .and_then(|x| x.as_bool())
            .unwrap_or(true);
        let m = v.get("model").context("no model")?;
        if m.get("type").and_then(|t| t.as_str()) != Some("BPE") {
            bail!("model is not BPE");
        }
        if get(m, "dropout")
            .and_then(|d| d.as_f64())
            .is_some_and(|d| d > 0.0)
        {
            bail!("BPE dropout");
        }
        for k in ["continuing_subword_prefix", "end_of_word_suffix"] {
            if get(m, k)
                .and_then(|s| s.as_str())
                .is_some_and(|s| !s.is_empty())
            {
                bail!("{k}");
            }
        }
        if get(m, "byte_fallback").and_then(|b| b.as_bool()) == Some(true) {
            bail!("byte_fallback");
        }
        let vocab: HashMap<String, u32> =
            serde_json::from_value(m.get("vocab").context("vocab")?.clone())?;
        let b2c = byte_to_char();
        let mut byte_ids = [0u32; 256];
        for b in 0..256 {
            byte_ids[b] = *vocab
                .get(&b2c[b].to_string())
                .with_context(|| format!("byte {b} has no symbol"))?;
        }
        let mut merges: FxMap<u64, u64> = FxMap::default();
        let list = m
            .get("merges")
            .and_then(|x| x.as_array())
            .context("merges")?;
        for (rank, e) in list.iter().enumerate() {
            let (a, b) = match e {
                serde_json::Value::String(s) => {
                    let (a, b) = s.split_once(' ').context("bad merge")?;
                    (a.to_string(), b.to_string())
                }
                serde_json::Value::Array(p) if p.len() == 2 => (
                    p[0].as_str().context("bad merge")?.to_string(),
                    p[1].as_str().context("bad merge")?.to_string(),
                ),
                _ => bail!("bad merge entry"),
            };
            let ia = *vocab.get(&a).context("merge token not in vocab")?;
            let ib = *vocab.get(&b).context("merge token not in vocab")?;
            let merged = format!("{a}{b}");
            let im = *vocab.get(&merged).context("merged token not in vocab")?;
            merges
                .entry((ia as u64) << 32 | ib as u64)
                .or_insert((rank as u64) << 32 | im as u64);
        }
        let whole_words = if get(m, "ignore_merges").and_then(|b| b.as_bool()) == Some(true) {
            // Key: the word's raw bytes (decoded from the byte-level string).
            let mut c2b: HashMap<char, u8> = HashMap::new();
            for (b, c) in b2c.iter().enumerate() {
                c2b.insert(*c, b as u8);
            }
            let mut w = HashMap::new();
            for (tok, id) in &vocab {
                let bytes: Option<Vec<u8>> = tok.chars().map(|c| c2b.get(&c).copied()).collect();
                if let Some(bytes) = bytes {
                    w.insert(bytes, *id);
                }
            }
            Some(w)
        } else {
            None
        };
        let mut added = Vec::new();
        if let Some(a) = v.get("added_tokens").and_then(|x| x.as_array()) {
            for t in a {
                if let Some(c) = t.get("content").and_then(|c| c.as_str()) {
                    if !c.is_empty() {
                        added.push(c.to_string());
                    }
                }
            }
        }
        let re = |p: &str| SysRegex::new(p).map_err(|e| anyhow::anyhow!("regex {p}: {e}"));
        Ok(FastBpe {
            byte_ids,
            merges,
            whole_words,
            add_prefix_space,
            added,
            letter: re(r"\A\p{L}\z")?,
            number: re(r"\A\p{N}\z")?,
            space: re(r"\A\s\z")?,
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        })
    }

    fn classify_slow(&self, c: char) -> Class {
        let mut buf = [0u8; 4];
        let s: &str = c.encode_utf8(&mut buf);
        if self.letter.find_iter(s).next().is_some() {
            Class::Letter
        } else if self.number.find_iter(s).next().is_some() {
            Class::Number
        } else if self.space.find_iter(s).next().is_some() {
            Class::Space
        } else {
            Class::Other
        }
    }

    /// Ids of `text`, or `None` when it contains an added token (use the crate).
    pub fn encode(&self, text: &str) -> Option<Vec<u32>> {
        if self.added.iter().any(|a| text.contains(a.as_str())) {
            return None;
        }
        let owned;
        let text = if self.add_prefix_space && !text.starts_with(' ') && !text.is_empty() {
            owned = format!(" {text}");
            owned.as_str()
        } else {
            text
        };
        CACHE.with(|cache| {
            let mut cache = cache.borrow_mut();
            if cache.owner != self.id {
                cache.owner = self.id;
                cache.words.clear();
                cache.classes.clear();
            }
            let mut out = Vec::with_capacity(text.len() / 3 + 1);
            let mut classes = std::mem::take(&mut cache.classes);
            let mut class_of = |c: char| -> Class {
                if c.is_ascii() {
                    ascii_class(c as u8)
                } else {
                    *classes.entry(c).or_insert_with(|| self.classify_slow(c))
                }
            };
            let mut pos = 0;
            while pos < text.len() {
                let end = next_piece(text, pos, &mut class_of);
                let word = &text.as_bytes()[pos..end];
                if word.len() > MAX_WORD_LEN {
                    cache.classes = classes;
                    return None;
                }
                self.encode_word(word, &mut cache.words, &mut out);
                pos = end;
            }
            cache.classes = classes;
            Some(out)
        })
    }

    fn encode_word(&self, word: &[u8], cache: &mut FxMap<Vec<u8>, Vec<u32>>, out: &mut Vec<u32>) {
        if let Some(ids) = cache.get(word) {
            out.extend_from_slice(ids);
            return;
        }
        let ids = self.bpe(word);
        out.extend_from_slice(&ids);
        if word.len() <= MAX_CACHED_WORD_LEN {
            if cache.len() >= MAX_CACHED_WORDS {
                cache.clear();
            }
            cache.insert(word.to_vec(), ids);
        }
    }

    /// Merge by rank: repeatedly the lowest-ranked adjacent pair, leftmost first.
    fn bpe(&self, word: &[u8]) -> Vec<u32> {
        if let Some(w) = &self.whole_words {
            if let Some(id) = w.get(word) {
                return vec![*id];
            }
        }
        let mut sym: Vec<u32> = word.iter().map(|b| self.byte_ids[*b as usize]).collect();
        loop {
            let mut best: Option<(u64, usize)> = None;
            for i in 0..sym.len().saturating_sub(1) {
                let key = (sym[i] as u64) << 32 | sym[i + 1] as u64;
                if let Some(&v) = self.merges.get(&key) {
                    if best.is_none_or(|b| v < b.0) {
                        best = Some((v, i));
                    }
                }
            }
            let Some((v, i)) = best else { break };
            let id = v as u32;
            sym[i] = id;
            sym.remove(i + 1);
        }
        sym
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

    #[test]
    fn pieces_follow_the_gpt2_regex() {
        let re = SysRegex::new(
            r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
        )
        .unwrap();
        let bpe_json = {
            let d = tempfile::tempdir().unwrap();
            let p = crate::fixtures::tokenizer::write_tokenizer(d.path()).unwrap();
            std::fs::read_to_string(p).unwrap()
        };
        let fast = FastBpe::from_tokenizer_json(&bpe_json).unwrap();
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
            let want: Vec<&str> = re.find_iter(t).map(|(a, b)| &t[a..b]).collect();
            for b in 0u8..128 {
                let c = b as char;
                assert_eq!(ascii_class(b), fast.classify_slow(c), "{c:?}");
            }
            let mut got = Vec::new();
            let mut pos = 0;
            let mut cls = |c: char| fast.classify_slow(c);
            while pos < t.len() {
                let e = next_piece(t, pos, &mut cls);
                got.push(&t[pos..e]);
                pos = e;
            }
            assert_eq!(got, want, "{t:?}");
        }
    }

    #[test]
    fn ids_match_the_crate() {
        let d = tempfile::tempdir().unwrap();
        let p = crate::fixtures::tokenizer::write_tokenizer(d.path()).unwrap();
        let tok = tokenizers::Tokenizer::from_file(&p).unwrap();
        let fast = FastBpe::from_tokenizer_json(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let mut rng = crate::fixtures::text::SplitMix(9);
        for k in 0..300 {
            let mut t = crate::fixtures::text::paragraph(&mut rng, 3);
            if k % 3 == 0 {
                t.push_str(" naïve 😀  x'll\n\n  ");
            }
            let want = tok
                .encode_fast(t.as_str(), false)
                .unwrap()
                .get_ids()
                .to_vec();
            assert_eq!(fast.encode(&t).unwrap(), want, "{t:?}");
        }
        assert!(fast.encode("a <|endoftext|> b").is_none());
    }
}
