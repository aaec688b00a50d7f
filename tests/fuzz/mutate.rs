//! Mutations: byte-level havoc (bit flips, interesting integers, cuts, splices, dictionary
//! tokens) and structure-aware ones (a JSON tree edit, a TOML edit through the same tree,
//! line edits) that keep an input parseable enough to reach the code behind the parser.

use serde_json::Value;

/// splitmix64: tiny, seedable, reproducible.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, n) (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

/// Integers that break size arithmetic.
pub const INTERESTING: &[u64] = &[
    0,
    1,
    2,
    7,
    8,
    16,
    127,
    128,
    255,
    256,
    0x7fff,
    0x8000,
    0xffff,
    0x1_0000,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x1_0000_0000,
    0x1_0000_0005,
    1 << 40,
    1 << 53,
    1 << 62,
    0x7fff_ffff_ffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX - 7,
    u64::MAX,
];

/// JSON tokens and numbers at the edges of what serde/our casts accept.
pub const JSON_DICT: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"null",
    b"true",
    b"false",
    b"-1",
    b"0",
    b"1e30",
    b"1e309",
    b"-1e309",
    b"1e-400",
    b"NaN",
    b"Infinity",
    b"4294967296",
    b"4294967301",
    b"18446744073709551615",
    b"18446744073709551616",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"1000000000",
    b"10000000",
    b"0.5",
    b"\\u0000",
    b"\\ud800",
    b"../",
    b"/etc/passwd",
    b"\xff\xfe",
    b"\xc3\x28",
    b"\n",
];

/// TOML tokens.
pub const TOML_DICT: &[&[u8]] = &[
    b"[[source]]\n",
    b"[source]\n",
    b"=",
    b"\"",
    b"'''",
    b"\"\"\"",
    b"[",
    b"]",
    b"{",
    b"}",
    b",",
    b"\n",
    b"#",
    b"-1",
    b"1e30",
    b"inf",
    b"nan",
    b"18446744073709551616",
    b"9223372036854775807",
    b"true",
    b"1979-05-27T07:32:00Z",
    b"../",
    b"/etc",
    b"\\u0000",
    b"files = [\"**\"]\n",
    b"split = \"test\"\n",
    b"role = \"eval-reference\"\n",
];

/// Header tokens (Retry-After, RateLimit, Link).
pub const HEADER_DICT: &[&[u8]] = &[
    b"retry-after: ",
    b"ratelimit: ",
    b"link: ",
    b"\n",
    b";",
    b",",
    b"t=",
    b"r=",
    b"<",
    b">",
    b"rel=\"next\"",
    b"rel=next",
    b"1e30",
    b"inf",
    b"-inf",
    b"NaN",
    b"-1",
    b"0",
    b"1e308",
    b"18446744073709551616",
    b"4294967296",
    b"0.0000001",
    b"http://",
    b"//",
    b"\"",
    b"x-linked-size: ",
    b"etag: ",
    b"x-repo-commit: ",
];

fn interesting_int(rng: &mut Rng) -> u64 {
    if rng.chance(3) {
        rng.next() >> rng.below(64)
    } else {
        *rng.pick(INTERESTING)
    }
}

/// A few stacked byte-level edits of `input`; `other` is a splice partner.
pub fn havoc(rng: &mut Rng, input: &[u8], other: &[u8], dict: &[&[u8]]) -> Vec<u8> {
    let mut b = input.to_vec();
    let max = if rng.chance(4) { 16 } else { 4 };
    let n = 1 + rng.below(max);
    for _ in 0..n {
        let len = b.len();
        match rng.below(11) {
            0 if len > 0 => {
                let i = rng.below(len);
                b[i] ^= 1 << rng.below(8);
            }
            1 if len > 0 => {
                let i = rng.below(len);
                b[i] = rng.next() as u8;
            }
            2 if len > 0 => {
                // An interesting integer, LE or BE, 1/2/4/8 bytes.
                let w = 1usize << rng.below(4);
                let v = interesting_int(rng);
                let bytes = if rng.chance(2) {
                    v.to_le_bytes()
                } else {
                    v.to_be_bytes()
                };
                let at = rng.below(len);
                for k in 0..w.min(len - at) {
                    b[at + k] = bytes[if rng.chance(2) { k } else { 8 - w + k }];
                }
            }
            3 if len > 0 => {
                let at = rng.below(len);
                let cut = 1 + rng.below((len - at).min(64));
                b.drain(at..at + cut);
            }
            4 => {
                let at = rng.below(len + 1);
                let k = 1 + rng.below(32);
                let junk: Vec<u8> = (0..k).map(|_| rng.next() as u8).collect();
                b.splice(at..at, junk);
            }
            5 if len > 0 => {
                // Duplicate a chunk elsewhere.
                let from = rng.below(len);
                let k = 1 + rng.below((len - from).min(256));
                let chunk = b[from..from + k].to_vec();
                let at = rng.below(len + 1);
                b.splice(at..at, chunk);
            }
            6 if len > 0 => b.truncate(rng.below(len)),
            7 if !other.is_empty() => {
                // Splice: our head, the other's tail.
                let a = rng.below(len + 1);
                let c = rng.below(other.len());
                b.truncate(a);
                b.extend_from_slice(&other[c..]);
            }
            8 | 9 if !dict.is_empty() => {
                let tok = rng.pick(dict);
                let at = rng.below(len + 1);
                if rng.chance(2) || len == 0 {
                    b.splice(at..at, tok.iter().copied());
                } else {
                    let end = (at + tok.len()).min(len);
                    b.splice(at..end, tok.iter().copied());
                }
            }
            _ => {
                // Replace a run of ASCII digits by an interesting number.
                if let Some(start) = (0..8)
                    .map(|_| rng.below(len.max(1)))
                    .find(|&i| i < len && b[i].is_ascii_digit())
                {
                    let mut s = start;
                    while s > 0 && b[s - 1].is_ascii_digit() {
                        s -= 1;
                    }
                    let mut e = start;
                    while e < len && b[e].is_ascii_digit() {
                        e += 1;
                    }
                    let v = interesting_int(rng).to_string();
                    b.splice(s..e, v.bytes());
                }
            }
        }
    }
    b
}

/// Random bytes of a random length (up to 4 KiB).
pub fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let max = if rng.chance(8) { 4096 } else { 64 };
    let n = rng.below(max);
    (0..n).map(|_| rng.next() as u8).collect()
}

fn interesting_value(rng: &mut Rng) -> Value {
    use serde_json::json;
    match rng.below(14) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(2)),
        2 => json!(interesting_int(rng)),
        3 => json!((interesting_int(rng) as i64).wrapping_neg()),
        4 => json!(*rng.pick(&[
            0.0,
            -0.0,
            0.5,
            -1.0,
            1e-30,
            1e30,
            -1e30,
            1e308,
            f64::MIN_POSITIVE,
            -1e-9
        ])),
        5 => json!(""),
        6 => json!("A".repeat(1 << rng.below(16))),
        7 => json!(*rng.pick(&[
            "../../x",
            "/etc/passwd",
            "a/../b",
            "\u{0}",
            "é",
            "\u{FEFF}",
            "test",
            "validation",
            "-",
            "{{",
            "{%",
            "nan"
        ])),
        8 => json!([]),
        9 => json!({}),
        10 => {
            // Deep nesting.
            let d = 1 + rng.below(300);
            let mut v = json!(1);
            for _ in 0..d {
                v = json!([v]);
            }
            v
        }
        11 => json!(vec![interesting_int(rng); rng.below(64)]),
        12 => json!(rng.next().to_string()),
        _ => json!(interesting_int(rng) as f64),
    }
}

fn node_count(v: &Value) -> usize {
    1 + match v {
        Value::Array(a) => a.iter().map(node_count).sum(),
        Value::Object(m) => m.values().map(node_count).sum(),
        _ => 0,
    }
}

/// The `n`-th node in walk order.
fn nth(v: &Value, n: &mut usize) -> Option<Value> {
    if *n == 0 {
        return Some(v.clone());
    }
    *n -= 1;
    match v {
        Value::Array(a) => a.iter().find_map(|x| nth(x, n)),
        Value::Object(m) => m.values().find_map(|x| nth(x, n)),
        _ => None,
    }
}

/// Apply `f` to the `n`-th node in walk order.
fn with_nth(v: &mut Value, n: &mut usize, f: &mut dyn FnMut(&mut Value)) -> bool {
    if *n == 0 {
        f(v);
        return true;
    }
    *n -= 1;
    match v {
        Value::Array(a) => a.iter_mut().any(|x| with_nth(x, n, f)),
        Value::Object(m) => m.values_mut().any(|x| with_nth(x, n, f)),
        _ => false,
    }
}

fn edit(rng: &mut Rng, node: &mut Value, donor: Value) {
    match rng.below(8) {
        0 | 1 => *node = interesting_value(rng),
        2 => match node {
            Value::Object(m) if !m.is_empty() => {
                let key = m.keys().nth(rng.below(m.len())).cloned().unwrap();
                m.remove(&key);
            }
            Value::Array(a) if !a.is_empty() => {
                a.remove(rng.below(a.len()));
            }
            _ => *node = interesting_value(rng),
        },
        3 => match node {
            Value::Array(a) if !a.is_empty() => {
                let x = a[rng.below(a.len())].clone();
                let max = if rng.chance(4) { 2000 } else { 4 };
                // At most ~1 MiB of copies: 2000 copies of a 200 KB element once made a
                // 400 MB tree whose serialization aborted the child (an allocation of
                // 1.8 GB outside any case, blamed on the case before it).
                let size = serde_json::to_vec(&x).map_or(1, |v| v.len().max(1));
                let max = max.min((1 << 20) / size).max(1);
                let times = 1 + rng.below(max);
                for _ in 0..times {
                    a.push(x.clone());
                }
            }
            Value::Object(m) => {
                m.insert(format!("k{}", rng.below(100)), interesting_value(rng));
            }
            _ => *node = interesting_value(rng),
        },
        // Another node's value here (type confusion between fields).
        4 => *node = donor,
        5 => match node {
            Value::Number(n) => {
                let x = n.as_f64().unwrap_or(0.0);
                *node = serde_json::json!(match rng.below(4) {
                    0 => x + 1.0,
                    1 => x - 1.0,
                    2 => x * 1e6,
                    _ => -x,
                });
            }
            Value::String(s) => {
                let bytes = havoc(rng, s.as_bytes(), b"", JSON_DICT);
                *node = Value::String(String::from_utf8_lossy(&bytes).into_owned());
            }
            _ => *node = interesting_value(rng),
        },
        6 => *node = serde_json::json!([node.clone()]),
        _ => match node {
            Value::Object(m) if !m.is_empty() => {
                // Rename a key.
                let key = m.keys().nth(rng.below(m.len())).cloned().unwrap();
                let x = m.remove(&key).unwrap();
                let nk = havoc(rng, key.as_bytes(), b"", JSON_DICT);
                m.insert(String::from_utf8_lossy(&nk).into_owned(), x);
            }
            _ => *node = interesting_value(rng),
        },
    }
}

/// A few edits of a JSON tree: replace a node by an edge value, delete a key or element,
/// duplicate elements, copy one node over another, tweak a number or a string, rename a key.
pub fn json_tree(rng: &mut Rng, v: &mut Value) {
    for _ in 0..1 + rng.below(3) {
        let total = node_count(v);
        let donor = nth(v, &mut rng.below(total)).unwrap_or(Value::Null);
        let mut k = rng.below(total);
        with_nth(v, &mut k, &mut |node| edit(rng, node, donor.clone()));
    }
}

/// A target's text format: its structured mutation and the tokens the byte mutator inserts.
#[derive(Clone, Copy)]
pub enum Text {
    /// A TOML document: parsed and edited half the time, else edited line by line.
    Toml,
    /// A JSON document, always edited as a tree.
    JsonDoc,
    /// A JSON array document (edited as a tree half the time) or JSON lines: else line edits.
    JsonOrLines,
    /// Line edits only, inserting these tokens (JSON lines, HTTP headers, YAML).
    Lines(&'static [&'static [u8]]),
}

impl Text {
    pub fn dictionary(self) -> &'static [&'static [u8]] {
        match self {
            Text::Toml => TOML_DICT,
            Text::JsonDoc | Text::JsonOrLines => JSON_DICT,
            Text::Lines(d) => d,
        }
    }

    pub fn mutate(self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        match self {
            Text::Toml if rng.chance(2) => toml(rng, input),
            Text::JsonDoc => json(rng, input),
            Text::JsonOrLines if input.first() == Some(&b'[') && rng.chance(2) => json(rng, input),
            _ => Some(lines(rng, input, self.dictionary())),
        }
    }
}

/// Parse `input` as JSON, edit the tree, serialise (compact or pretty).
pub fn json(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let mut v: Value = serde_json::from_slice(input).ok()?;
    json_tree(rng, &mut v);
    Some(if rng.chance(2) {
        serde_json::to_vec(&v).ok()?
    } else {
        serde_json::to_vec_pretty(&v).ok()?
    })
}

/// Parse `input` as TOML, edit it as a JSON tree, serialise back as TOML.
pub fn toml(rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
    let t: toml::Value = toml::from_str(std::str::from_utf8(input).ok()?).ok()?;
    let mut v = serde_json::to_value(&t).ok()?;
    json_tree(rng, &mut v);
    let t: toml::Value = toml::Value::try_from(v).ok()?;
    toml::to_string(&t).ok().map(String::into_bytes)
}

/// Line edits: delete, duplicate, swap, or havoc one line.
pub fn lines(rng: &mut Rng, input: &[u8], dict: &[&[u8]]) -> Vec<u8> {
    let mut ls: Vec<Vec<u8>> = input.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
    let n = ls.len();
    match rng.below(5) {
        0 if n > 1 => {
            ls.remove(rng.below(n));
        }
        1 => {
            let l = ls[rng.below(n)].clone();
            let at = rng.below(n + 1);
            ls.insert(at, l);
        }
        2 if n > 1 => {
            let (a, b) = (rng.below(n), rng.below(n));
            ls.swap(a, b);
        }
        3 => {
            // A structured edit of one JSON line.
            let i = rng.below(n);
            if let Some(m) = json(rng, &ls[i]) {
                ls[i] = m.into_iter().filter(|&c| c != b'\n').collect();
            }
        }
        _ => {
            let i = rng.below(n);
            ls[i] = havoc(rng, &ls[i], b"", dict);
        }
    }
    ls.join(&b'\n')
}

/// YAML tokens (dataset card front matter).
pub const YAML_DICT: &[&[u8]] = &[
    b"---\n",
    b"configs:\n",
    b"- config_name: ",
    b"  data_files:\n",
    b"  - split: ",
    b"    path: ",
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"!!binary ",
    b"!!map ",
    b"? ",
    b": ",
    b"- ",
    b"[",
    b"]",
    b"{",
    b"}",
    b"|\n",
    b">\n",
    b"\"",
    b"'",
    b"\t",
    b"\n",
    b"  ",
    b"~",
    b"**",
    b"*",
    b"../",
    b"test",
    b"1e309",
];
