//! The source tree has no import circles between its top-level modules (the stages and their
//! shared helpers): every `crate::X` path in `src/` outside module `X` is an edge, and the
//! edges must form no cycle. A type two stages both need lives in the module that owns the
//! concept (`shards::ShardFormat`, `worker::check_worker_set`, `sampling::GenParams`), so a
//! change in one stage cannot loop back into itself through another.
//!
//! Comments and doc comments are not imports (an intra-doc link may point anywhere). Test code
//! inside `src/` counts: a circle through a `#[cfg(test)]` module is a circle all the same.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges `from -> to` between top-level modules, each with the first `file:line` that makes it.
type Graph = BTreeMap<String, BTreeMap<String, String>>;

fn src() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The top-level modules `lib.rs` declares (`pub mod x;`, `mod x;`, with or without a cfg).
fn top_modules(lib_rs: &str) -> BTreeSet<String> {
    lib_rs
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let rest = l
                .strip_prefix("pub mod ")
                .or_else(|| l.strip_prefix("pub(crate) mod "))
                .or_else(|| l.strip_prefix("mod "))?;
            Some(rest.trim_end_matches(';').trim().to_string())
        })
        .collect()
}

/// The code of a line: nothing from `//` on (so `//!` and `///` docs go too). A `//` inside
/// a string literal would cut the line short; no `crate::` path follows one in this tree.
fn code(line: &str) -> &str {
    match line.find("//") {
        Some(i) => &line[..i],
        None => line,
    }
}

/// The top-level module names a piece of code refers to through `crate::`: `crate::x::…`,
/// `crate::x;`, and each first name inside `crate::{x::…, y}` (nested braces included).
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut joined = String::new();
    let mut line_of = Vec::new(); // byte offset in `joined` → 1-based line number
    for (n, l) in text.lines().enumerate() {
        let c = code(l);
        joined.push_str(c);
        joined.push('\n');
        line_of.extend(std::iter::repeat(n + 1).take(c.len() + 1));
    }
    let bytes = joined.as_bytes();
    let ident = |i: usize| {
        let e = joined[i..]
            .find(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_'))
            .map_or(joined.len(), |k| i + k);
        (joined[i..e].to_string(), e)
    };
    let mut at = 0;
    while let Some(k) = joined[at..].find("crate::") {
        let start = at + k;
        at = start + "crate::".len();
        // `dlm_data::crate::` does not exist; but `mycrate::x` must not match.
        if start > 0 && (bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            continue;
        }
        if bytes.get(at) == Some(&b'{') {
            // A group: the first identifier of every top-level item of the braces.
            let mut depth = 0usize;
            let mut expect = true;
            let mut i = at;
            while i < bytes.len() {
                match bytes[i] {
                    b'{' => {
                        depth += 1;
                        expect = depth == 1;
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    b',' if depth == 1 => expect = true,
                    c if expect && depth == 1 && (c.is_ascii_alphabetic() || c == b'_') => {
                        let (name, e) = ident(i);
                        out.push((line_of[i], name));
                        expect = false;
                        i = e;
                        continue;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            let (name, _) = ident(at);
            if !name.is_empty() {
                out.push((line_of[start], name));
            }
        }
    }
    out
}

/// Which top-level module a file under `src/` belongs to (`pack/plan.rs` → `pack`).
fn owner(rel: &Path) -> String {
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `.rs` file under `root`, as (path relative to `root`, text).
fn src_files(root: &Path) -> Vec<(PathBuf, String)> {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    paths.sort();
    paths
        .iter()
        .map(|p| {
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            (rel, std::fs::read_to_string(p).unwrap())
        })
        .collect()
}

/// The module graph of a set of `(path relative to src/, text)` files.
fn graph(files: &[(PathBuf, String)], modules: &BTreeSet<String>) -> Graph {
    let mut g = Graph::new();
    for (rel, text) in files {
        let from = owner(rel);
        if !modules.contains(&from) {
            continue; // lib.rs, main.rs: the roots
        }
        for (line, to) in crate_refs(text) {
            if to != from && modules.contains(&to) {
                g.entry(from.clone())
                    .or_default()
                    .entry(to)
                    .or_insert_with(|| format!("src/{}:{line}", rel.display()));
            }
        }
    }
    g
}

/// Every cycle's strongly connected component (Tarjan), as sorted module lists.
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct T<'a> {
        g: &'a Graph,
        next: usize,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        t.index.insert(v, t.next);
        t.low.insert(v, t.next);
        t.next += 1;
        t.stack.push(v);
        t.on.insert(v);
        for w in t.g.get(v).into_iter().flat_map(|m| m.keys()) {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let lw = t.low[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if t.on.contains(w) {
                let iw = t.index[w];
                let lv = t.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = t.stack.pop().unwrap();
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        g,
        next: 0,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in g.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

/// A readable account of each circle: its modules and the edges inside it, with where.
fn report(g: &Graph, found: &[Vec<String>]) -> String {
    let mut s = String::new();
    for comp in found {
        s.push_str(&format!("import circle between {}:\n", comp.join(", ")));
        for a in comp {
            for (b, at) in g.get(a).into_iter().flatten() {
                if comp.contains(b) {
                    s.push_str(&format!("  {a} -> {b}  ({at})\n"));
                }
            }
        }
    }
    s
}

#[test]
fn no_import_circles_between_top_level_modules() {
    let root = src();
    let modules = top_modules(&std::fs::read_to_string(root.join("lib.rs")).unwrap());
    for m in [
        "pack", "shards", "merge", "distill", "teacher", "sampling", "worker",
    ] {
        assert!(modules.contains(m), "lib.rs no longer declares `{m}`");
    }
    let files = src_files(&root);
    let g = graph(&files, &modules);
    // The checker sees the edges it must (so an empty result means something).
    assert!(g["pack"].contains_key("shards"), "{g:?}");
    assert!(g["distill"].contains_key("teacher"), "{g:?}");
    let found = circles(&g);
    assert!(found.is_empty(), "{}", report(&g, &found));
}

/// The layers docs/architecture.md draws under "## Who depends on whom": one line per layer,
/// its modules before the first run of two spaces, the root first.
fn documented_layers(md: &str) -> Vec<Vec<String>> {
    let section = md
        .split("## Who depends on whom")
        .nth(1)
        .expect("docs/architecture.md: no \"## Who depends on whom\" section");
    let block = section
        .split("```")
        .nth(1)
        .expect("docs/architecture.md: the layer drawing is not a code block");
    block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let names = l.split("  ").next().unwrap();
            names.split(',').map(|n| n.trim().to_string()).collect()
        })
        .collect()
}

#[test]
fn the_documented_layers_hold() {
    let root = src();
    let modules = top_modules(&std::fs::read_to_string(root.join("lib.rs")).unwrap());
    let md = std::fs::read_to_string(root.join("../docs/architecture.md")).unwrap();
    let layers = documented_layers(&md);
    let mut layer_of = BTreeMap::new();
    for (i, l) in layers.iter().enumerate() {
        for m in l {
            assert!(
                modules.contains(m),
                "docs/architecture.md draws `{m}`, which lib.rs does not declare"
            );
            layer_of.insert(m.clone(), i);
        }
    }
    let missing: Vec<_> = modules
        .iter()
        .filter(|m| !layer_of.contains_key(*m))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md's layers lack {missing:?}"
    );
    let files = src_files(&root);
    let mut upward = Vec::new();
    for (a, tos) in graph(&files, &modules) {
        for (b, at) in tos {
            if layer_of[&b] <= layer_of[&a] {
                upward.push(format!("{a} -> {b} ({at})"));
            }
        }
    }
    assert!(
        upward.is_empty(),
        "edges docs/architecture.md's layers do not allow (a module may use only lower lines):\n{}",
        upward.join("\n")
    );
}

#[test]
fn the_checker_finds_a_circle_and_ignores_comments() {
    let modules: BTreeSet<String> = ["a", "b", "c", "d"].iter().map(|s| s.to_string()).collect();
    let f = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = vec![
        f(
            "a/mod.rs",
            "//! see [`crate::d::X`]\nuse crate::b::Thing;\n",
        ),
        f(
            "b/inner.rs",
            "use crate::{\n    util::x,\n    c::{self, Y},\n};\nfn f() { mycrate::a::z(); }\n",
        ),
        f(
            "c.rs",
            "fn g() -> crate::a::T { crate::c::own() } // crate::d\n",
        ),
        f("d.rs", "use crate::a; /// crate::b\n"),
    ];
    let g = graph(&files, &modules);
    assert_eq!(g["a"].keys().collect::<Vec<_>>(), ["b"]);
    assert_eq!(g["b"].keys().collect::<Vec<_>>(), ["c"]);
    assert_eq!(g["b"]["c"], "src/b/inner.rs:3");
    assert_eq!(g["c"].keys().collect::<Vec<_>>(), ["a"]);
    assert_eq!(g["d"].keys().collect::<Vec<_>>(), ["a"]);
    let found = circles(&g);
    assert_eq!(found, vec![vec!["a", "b", "c"]]);
    let r = report(&g, &found);
    assert!(r.contains("c -> a  (src/c.rs:1)"), "{r}");

    // Break the circle the way the tree does: the shared type moves to a module below both.
    let mut fixed = files.clone();
    fixed[0] = f("a/mod.rs", "use crate::c::Thing;\n");
    fixed[2] = f("c.rs", "fn g() -> crate::d::T { 0 }\n");
    fixed[3] = f("d.rs", "pub struct T;\n");
    assert!(circles(&graph(&fixed, &modules)).is_empty());
    // …and a longer circle is found whole.
    fixed[3] = f("d.rs", "use crate::b::Thing;\n");
    assert_eq!(circles(&graph(&fixed, &modules)), vec![vec!["b", "c", "d"]]);
}

// ---------------------------------------------------------------------------------------------
// Inside the modules: small functions, no circle between the files of one folder, and a map
// (docs/architecture.md) that names every module and nothing that is gone.

/// The longest a function in `src/` may be, in lines from its `fn` line to its closing brace:
/// longer ones are split into named steps (as `src/pack/pipeline/` is: a sequence function
/// calling one well-named step each).
const MAX_FN_LINES: usize = 120;

/// Functions still over [`MAX_FN_LINES`] while their split is under way, as `(file under src/,
/// fn name)`. MUST BE EMPTY: the list may only shrink (each one listed must still be over the
/// limit, so a finished split has to leave it), and nothing may be added.
const OVER_120_PENDING: &[(&str, &str)] = &[];

/// Import circles between the files of one folder still being untangled, each as its sorted
/// module paths (`pack/tokenize/bpe`). MUST BE EMPTY, like [`OVER_120_PENDING`].
const CIRCLES_PENDING: &[&[&str]] = &[];

/// `text` with every comment, string literal and char literal blanked out (each byte becomes a
/// space, newlines stay), so braces and `crate::` paths are code wherever they are found and
/// byte offsets and line numbers are unchanged. Lifetimes (`'a`) are code.
fn blank_non_code(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to.min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        let after_ident = i > 0 && ident(b[i - 1]);
        if rest.starts_with(b"//") {
            let e = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |k| i + k);
            blank(&mut out, i, e);
            i = e;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if let Some(e) = raw_string_end(b, i).filter(|_| !after_ident) {
            blank(&mut out, i, e);
            i = e;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            i = char_literal_end(text, i)
                .inspect(|&e| blank(&mut out, i, e))
                .unwrap_or(i + 1);
        } else {
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br#"…"#`) starting at `i` ends, if one does.
fn raw_string_end(b: &[u8], i: usize) -> Option<usize> {
    let mut j = i + usize::from(b[i] == b'b');
    if b.get(j) != Some(&b'r') {
        return None;
    }
    j += 1;
    let hashes = b[j..].iter().take_while(|&&c| c == b'#').count();
    j += hashes;
    if b.get(j) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat(b'#').take(hashes));
    let k = b[j + 1..]
        .windows(close.len())
        .position(|w| w == close.as_slice())?;
    Some(j + 1 + k + close.len())
}

/// Where a char literal (`'x'`, `'\n'`, `'\u{1F600}'`) starting at `i` ends; `None` for a
/// lifetime or a label (`'a`).
fn char_literal_end(text: &str, i: usize) -> Option<usize> {
    let rest = &text[i + 1..];
    if let Some(esc) = rest.strip_prefix('\\') {
        let k = esc.get(1..)?.find('\'')?;
        return Some(i + 1 + 1 + 1 + k + 1);
    }
    let c = rest.chars().next()?;
    rest[c.len_utf8()..]
        .starts_with('\'')
        .then(|| i + 1 + c.len_utf8() + 1)
}

/// Every function with a body in a piece of (blanked) code: (name, first line, line count
/// from its `fn` line to its closing brace, both counted).
fn functions(code: &str) -> Vec<(String, usize, usize)> {
    let b = code.as_bytes();
    let line_at = |i: usize| code[..i].matches('\n').count() + 1;
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(k) = code[at..].find("fn ") {
        let start = at + k;
        at = start + 3;
        if start > 0 && is_ident(b[start - 1]) {
            continue;
        }
        let name_at = at + code[at..].len() - code[at..].trim_start().len();
        let name: String = code[name_at..]
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        if name.is_empty() {
            continue; // `fn(u8) -> u8`, a pointer type
        }
        // The body's `{` is the first one outside (…) and […]; a `;` first means no body.
        let (mut depth, mut open) = (0i64, None);
        for (j, &c) in b.iter().enumerate().skip(name_at) {
            match c {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b';' if depth == 0 => break,
                b'{' if depth == 0 => {
                    open = Some(j);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let mut braces = 0usize;
        for (j, &c) in b.iter().enumerate().skip(open) {
            match c {
                b'{' => braces += 1,
                b'}' => {
                    braces -= 1;
                    if braces == 0 {
                        let (first, last) = (line_at(start), line_at(j));
                        out.push((name.clone(), first, last - first + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Every function in `src/` over [`MAX_FN_LINES`]: (file under src/, name, line, length).
fn long_functions() -> Vec<(String, String, usize, usize)> {
    let mut out = Vec::new();
    for (rel, text) in src_files(&src()) {
        for (name, line, len) in functions(&blank_non_code(&text)) {
            if len > MAX_FN_LINES {
                out.push((rel.display().to_string(), name, line, len));
            }
        }
    }
    out
}

#[test]
fn no_function_in_src_is_over_120_lines() {
    let long = long_functions();
    let is_pending = |f: &str, n: &str| OVER_120_PENDING.iter().any(|&(pf, pn)| pf == f && pn == n);
    let offenders: Vec<String> = long
        .iter()
        .filter(|(f, n, _, _)| !is_pending(f, n))
        .map(|(f, n, line, len)| format!("src/{f}:{line} fn {n}: {len} lines"))
        .collect();
    assert!(
        offenders.is_empty(),
        "functions over {MAX_FN_LINES} lines (split each into named steps):\n{}",
        offenders.join("\n")
    );
    let done: Vec<_> = OVER_120_PENDING
        .iter()
        .filter(|&&(pf, pn)| !long.iter().any(|(f, n, _, _)| f == pf && n == pn))
        .collect();
    assert!(
        done.is_empty(),
        "OVER_120_PENDING lists functions no longer over {MAX_FN_LINES} lines (remove them): {done:?}"
    );
}

#[test]
fn the_function_measure_sees_bodies_not_strings() {
    let text = "fn short() {\n    let s = \"}\";\n    let c = '}';\n}\n\
                trait T { fn decl(&self) -> u8; }\n\
                fn long<'a>(x: &'a [u8; 2]) -> impl Fn(u8) {\n    // }\n    r#\"}\"#;\n\n    {}\n}\n";
    let f = functions(&blank_non_code(text));
    assert_eq!(
        f,
        [("short".to_string(), 1, 4), ("long".to_string(), 6, 6)],
        "{f:?}"
    );
}

/// The module path of a file under src/ (`pack/plan.rs` → [pack, plan], `pack/mod.rs` →
/// [pack], `lib.rs` → []).
fn module_of(rel: &Path) -> Vec<String> {
    let mut m: Vec<String> = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(m.last().map(String::as_str), Some("mod" | "lib")) {
        m.pop();
    }
    m
}

/// Every path a piece of blanked code names through `crate::`, `super::` or `self::`, made
/// absolute from module `here`, each with its line; `use a::{b, c::{d}}` groups expand.
/// Inline modules (`mod tests { … }`) move `super` and `self` as the compiler does.
fn module_paths(code: &str, here: &[String]) -> Vec<(usize, Vec<String>)> {
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let line_at = |i: usize| code[..i].matches('\n').count() + 1;
    let mut out = Vec::new();
    let mut inline: Vec<(String, usize)> = Vec::new(); // inline modules open, with their depth
    let mut depth = 0usize;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'{' {
            depth += 1;
        } else if c == b'}' {
            depth = depth.saturating_sub(1);
            if inline.last().is_some_and(|&(_, d)| d == depth) {
                inline.pop();
            }
        }
        let word_start = i == 0 || !(is_ident(b[i - 1]) || b[i - 1] == b'$' || b[i - 1] == b':');
        if !word_start || !c.is_ascii_alphabetic() {
            i += 1;
            continue;
        }
        let word: String = code[i..]
            .bytes()
            .take_while(|&c| is_ident(c))
            .map(char::from)
            .collect();
        if word == "mod" {
            let rest = code[i + 3..].trim_start();
            let name: String = rest
                .bytes()
                .take_while(|&c| is_ident(c))
                .map(char::from)
                .collect();
            if rest[name.len()..].trim_start().starts_with('{') {
                inline.push((name, depth));
            }
        }
        if matches!(word.as_str(), "crate" | "super" | "self")
            && code[i + word.len()..].starts_with("::")
        {
            let mut base: Vec<String> = here.to_vec();
            base.extend(inline.iter().map(|(n, _)| n.clone()));
            let mut trees = Vec::new();
            let end = path_tree(code, i, &mut Vec::new(), &mut trees);
            for p in trees {
                if let Some(abs) = absolute(&base, &p) {
                    out.push((line_at(i), abs));
                }
            }
            i = end;
            continue;
        }
        i += word.len();
    }
    out
}

/// Parses the path (or `use` tree) starting at byte `i`: pushes each full path onto `out`
/// (a group `a::{b, c}` gives `a::b` and `a::c`) and returns where it ends.
fn path_tree(
    code: &str,
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<Vec<String>>,
) -> usize {
    let b = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let n = prefix.len();
    loop {
        while i < b.len() && b[i].is_ascii_whitespace() {
            i += 1;
        }
        if b.get(i) == Some(&b'{') {
            i += 1;
            loop {
                i = path_tree(code, i, prefix, out);
                while i < b.len() && (b[i].is_ascii_whitespace() || b[i] == b',') {
                    i += 1;
                }
                if i >= b.len() || b[i] == b'}' {
                    prefix.truncate(n);
                    return i + 1;
                }
            }
        }
        let seg: String = code[i..]
            .bytes()
            .take_while(|&c| is_ident(c) || c == b'*')
            .map(char::from)
            .collect();
        if seg.is_empty() {
            break;
        }
        i += seg.len();
        prefix.push(seg);
        let rest = &code[i..];
        let ws = rest.len() - rest.trim_start().len();
        if rest[ws..].starts_with("::") {
            i += ws + 2;
        } else {
            break;
        }
    }
    out.push(prefix.clone());
    prefix.truncate(n);
    i
}

/// A path made absolute: `crate::a` → [a]; `super::b` from [x, y] → [x, b]; `self::c` from
/// [x] → [x, c]. `None` for a `super` above the crate root.
fn absolute(here: &[String], p: &[String]) -> Option<Vec<String>> {
    let mut base = here.to_vec();
    let mut rest = p;
    match p.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &p[1..];
        }
        Some("self") => rest = &p[1..],
        _ => {}
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().filter(|s| s.as_str() != "self").cloned());
    Some(base)
}

/// The modules of the tree: every file and folder under src/ as a module path.
fn module_set(files: &[(PathBuf, String)]) -> BTreeSet<Vec<String>> {
    let mut set = BTreeSet::new();
    for (rel, _) in files {
        let m = module_of(rel);
        for k in 1..=m.len() {
            set.insert(m[..k].to_vec());
        }
    }
    set
}

/// Edges between sibling modules (two files or folders of one folder, the crate root
/// included), keyed `a/b/c` (the folder and the module), each with the first `file:line`.
fn sibling_graph(files: &[(PathBuf, String)]) -> Graph {
    let modules = module_set(files);
    let mut g = Graph::new();
    for (rel, text) in files {
        if rel == Path::new("main.rs") {
            continue; // the binary: its own crate
        }
        let here = module_of(rel);
        for (line, to) in module_paths(&blank_non_code(text), &here) {
            // The folder both live in, and the two children of it the edge runs between.
            let k = here.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if k >= here.len() || k >= to.len() || !modules.contains(&to[..=k].to_vec()) {
                continue; // into itself, up to an ancestor, or to an item of an ancestor
            }
            g.entry(here[..=k].join("/"))
                .or_default()
                .entry(to[..=k].join("/"))
                .or_insert_with(|| format!("src/{}:{line}", rel.display()));
        }
    }
    g
}

#[test]
fn no_import_circles_inside_a_folder() {
    let files = src_files(&src());
    let g = sibling_graph(&files);
    // The checker sees the edges it must (so an empty result means something).
    assert!(
        g["pack/pipeline/feed"].contains_key("pack/pipeline/write"),
        "{g:?}"
    );
    assert!(g["pack"].contains_key("shards"), "{g:?}");
    let found = circles(&g);
    let pending = |c: &Vec<String>| CIRCLES_PENDING.iter().any(|p| p == c);
    let new: Vec<_> = found.iter().filter(|c| !pending(c)).cloned().collect();
    assert!(new.is_empty(), "{}", report(&g, &new));
    let gone: Vec<_> = CIRCLES_PENDING
        .iter()
        .filter(|p| !found.iter().any(|c| c == *p))
        .collect();
    assert!(
        gone.is_empty(),
        "CIRCLES_PENDING lists circles that are gone (remove them): {gone:?}"
    );
}

#[test]
fn the_folder_checker_resolves_super_self_groups_and_inline_modules() {
    let f = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = vec![
        f("x/mod.rs", "mod a; mod b; mod c; pub use self::a::T;\n"),
        f(
            "x/a.rs",
            "use super::{b::U, c};\nmod tests { use super::T; fn t() { super::super::c::f() } }\n",
        ),
        f("x/b.rs", "fn g() -> crate::x::a::T { todo!() }\n"),
        f(
            "x/c.rs",
            "// super::a\nconst S: &str = \"super::a::T\";\nfn h() -> crate::y::V { todo!() }\n",
        ),
        f("y.rs", "pub struct V; fn k() { crate::x::a::f() }\n"),
    ];
    let g = sibling_graph(&files);
    assert_eq!(g["x/a"].keys().collect::<Vec<_>>(), ["x/b", "x/c"]);
    assert_eq!(g["x/a"]["x/c"], "src/x/a.rs:1");
    assert_eq!(g["x/b"].keys().collect::<Vec<_>>(), ["x/a"]);
    assert!(
        !g.contains_key("x/c") || !g["x/c"].keys().any(|k| k.starts_with("x/")),
        "{g:?}"
    );
    assert_eq!(g["x"].keys().collect::<Vec<_>>(), ["y"]);
    assert_eq!(g["y"].keys().collect::<Vec<_>>(), ["x"]);
    let found = circles(&g);
    assert_eq!(found, vec![vec!["x", "y"], vec!["x/a", "x/b"]]);
}

/// The `src/` part of the folder tree docs/architecture.md draws under "## The folder tree":
/// (top-level entries, at the entry column; every `name.rs` or `name/` the part names).
fn documented_tree(md: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let block = md
        .split("## The folder tree")
        .nth(1)
        .and_then(|s| s.split("```").nth(1))
        .expect("docs/architecture.md: no code block under \"## The folder tree\"");
    let lines: Vec<&str> = block
        .lines()
        .skip_while(|l| !l.starts_with("src/"))
        .take_while(|l| l.starts_with("src/") || l.starts_with(' ') || l.is_empty())
        .collect();
    let column = lines[0]
        .find("main.rs")
        .expect("the src/ line names main.rs");
    let names = |s: &str| -> Vec<String> {
        s.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '/'))
            .filter(|w| {
                let stem = w.trim_end_matches('/').trim_end_matches(".rs");
                (w.ends_with(".rs") || w.ends_with('/'))
                    && !stem.is_empty()
                    && stem
                        .bytes()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
            })
            .map(|w| w.trim_end_matches('/').to_string())
            .collect()
    };
    let mut top = BTreeSet::new();
    let mut named = BTreeSet::new();
    for l in &lines {
        let entry = l.get(column..).unwrap_or("");
        if !entry.starts_with(' ') {
            top.extend(names(entry.split("  ").next().unwrap()));
        }
        named.extend(names(l.get(4..).unwrap_or("")));
    }
    (top, named)
}

#[test]
fn docs_architecture_names_every_module_and_only_real_ones() {
    let root = src();
    let md = std::fs::read_to_string(root.join("../docs/architecture.md")).unwrap();
    let (top, named) = documented_tree(&md);
    let files = src_files(&root);
    let exists_anywhere = |n: &str| {
        files.iter().any(|(rel, _)| {
            rel.components().any(|c| c.as_os_str() == n)
                || rel.parent().is_some_and(|p| p.ends_with(n))
        })
    };
    let mut problems = Vec::new();
    // Every top-level module is an entry of the tree; every folder deeper down is named in it.
    for m in top_modules(&std::fs::read_to_string(root.join("lib.rs")).unwrap()) {
        let entry = if root.join(&m).is_dir() {
            m.clone()
        } else {
            format!("{m}.rs")
        };
        if !top.contains(&entry) {
            problems.push(format!("src/{entry} is not an entry of the folder tree"));
        }
    }
    for (rel, _) in &files {
        for dir in rel
            .ancestors()
            .skip(1)
            .filter(|d| d.components().count() >= 2)
        {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            if !named.contains(&name) {
                problems.push(format!(
                    "src/{}/ is not named in the folder tree",
                    dir.display()
                ));
            }
        }
    }
    // Every name the tree gives is a file or folder: at the top level where it is an entry.
    for t in &top {
        if !root.join(t).exists() {
            problems.push(format!("the folder tree's entry {t} is not in src/"));
        }
    }
    for n in &named {
        if !exists_anywhere(n) {
            problems.push(format!(
                "the folder tree names {n}, which is nowhere in src/"
            ));
        }
    }
    // Every `src/…` path the page names exists; so does every file of the pack step table.
    for w in md.split(|c: char| c.is_whitespace() || "`()[],;:".contains(c)) {
        if let Some(p) = w.strip_prefix("src/") {
            let p = p.trim_end_matches('.');
            if !p.is_empty() && !root.join(p).exists() {
                problems.push(format!(
                    "docs/architecture.md names src/{p}, which does not exist"
                ));
            }
        }
    }
    let steps = md
        .split("## One pack run, step by step")
        .nth(1)
        .expect("docs/architecture.md: no \"## One pack run, step by step\" section");
    let steps = steps.split("\n## ").next().unwrap();
    for l in steps.lines().filter(|l| l.starts_with("| ")) {
        for f in l
            .split('|')
            .nth(2)
            .unwrap_or("")
            .split('`')
            .skip(1)
            .step_by(2)
        {
            if !root.join("pack/pipeline").join(f).exists() {
                problems.push(format!(
                    "the pack step table names {f}, not in src/pack/pipeline/"
                ));
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(
        problems.is_empty(),
        "docs/architecture.md:\n{}",
        problems.join("\n")
    );
}

// Concurrency and tuning decided once (issue 56): the rayon pool's size and the `DLM_*`
// variables are read only in files named `tuning.rs` or `settings.rs` (src/tuning.rs builds
// the pool for `--threads` and derives every count; a command's settings hold the value);
// every other file takes the counts as arguments.

/// Whether `rel` (under src/) may read the pool's size or a `DLM_*` variable.
fn reads_settings(rel: &Path) -> bool {
    rel.file_name()
        .is_some_and(|n| n == "tuning.rs" || n == "settings.rs")
}

/// Each `file:line` of `files` outside the settings/tuning files that reads the pool's size
/// (`current_num_threads`) or a `DLM_*` variable (`var("DLM_…"` / `var_os("DLM_…"`), code only.
fn unsettled_reads(files: &[(PathBuf, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (rel, text) in files.iter().filter(|(rel, _)| !reads_settings(rel)) {
        for (k, line) in text.lines().enumerate() {
            let c = code(line).replace(' ', "");
            if c.contains("current_num_threads(")
                || c.contains("var(\"DLM_")
                || c.contains("var_os(\"DLM_")
            {
                found.push(format!("src/{}:{}: {}", rel.display(), k + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_pool_and_dlm_variables_are_read_only_in_settings_and_tuning_files() {
    let found = unsettled_reads(&src_files(&src()));
    assert!(
        found.is_empty(),
        "read the pool's size or a DLM_* variable in a tuning.rs/settings.rs file and pass \
         the count down:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_settings_checker_sees_code_not_comments() {
    let f = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = [
        f("a/read.rs", "let n = rayon::current_num_threads();\n"),
        f("b.rs", "// rayon::current_num_threads() in a comment\n"),
        f(
            "c.rs",
            "let v = std::env::var( \"DLM_X\");\nlet w = std::env::var(\"HOME\");\n",
        ),
        f("d/tuning.rs", "let v = std::env::var_os(\"DLM_Y\");\n"),
        f("e/settings.rs", "let n = rayon::current_num_threads();\n"),
        f("g.rs", "let v = std::env::var_os(\"DLM_Z\");\n"),
    ];
    let found = unsettled_reads(&files);
    assert_eq!(found.len(), 3, "{found:?}");
    assert!(found[0].starts_with("src/a/read.rs:1"));
    assert!(found[1].starts_with("src/c.rs:1"));
    assert!(found[2].starts_with("src/g.rs:1"));
}

// A settings type per command (issue 56): a command's clap struct is read where it is
// declared (the command's entry, which resolves it) and in `settings.rs` files; every step
// file takes the resolved settings, never a clap struct (as uv's commands take `*Settings`).

/// The clap structs of `files`: each `struct`/`enum` whose derive list names `Args`,
/// `Parser` or `Subcommand`, with the file declaring it.
fn clap_structs(files: &[(PathBuf, String)]) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let code = blank_non_code(text);
        let mut derive_clap = false;
        for line in code.lines() {
            let l = line.trim();
            if l.starts_with("#[derive(") {
                let names: Vec<&str> = l["#[derive(".len()..]
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .collect();
                derive_clap |= names
                    .iter()
                    .any(|n| matches!(*n, "Args" | "Parser" | "Subcommand"));
                continue;
            }
            if l.starts_with("#[") || l.is_empty() {
                continue;
            }
            if derive_clap {
                let words: Vec<&str> = l.split_whitespace().collect();
                if let Some(k) = words.iter().position(|w| *w == "struct" || *w == "enum") {
                    if let Some(name) = words.get(k + 1) {
                        let name: String = name
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        out.push((name, rel.clone()));
                    }
                }
            }
            derive_clap = false;
        }
    }
    out
}

/// Whether `rel` may take a clap struct: a file declaring one (a command's entry, which
/// resolves its flags, or composes flattened ones), a `settings.rs`, the CLI.
fn may_take_clap(rel: &Path, structs: &[(String, PathBuf)]) -> bool {
    structs.iter().any(|(_, d)| d == rel)
        || rel.file_name().is_some_and(|n| n == "settings.rs")
        || rel == Path::new("cli.rs")
}

/// The type named right after each single `:` of `line` (a parameter's or field's type):
/// `&`, a lifetime and `mut` skipped, the last segment of its path.
fn ascribed_types(line: &str) -> Vec<String> {
    let b = line.as_bytes();
    let mut out = Vec::new();
    for i in 0..b.len() {
        if b[i] != b':' || (i > 0 && b[i - 1] == b':') || b.get(i + 1) == Some(&b':') {
            continue;
        }
        let mut t = line[i + 1..].trim_start();
        if let Some(r) = t.strip_prefix('&') {
            t = r.trim_start();
        }
        if let Some(r) = t.strip_prefix('\'') {
            t = r
                .trim_start_matches(|c: char| c.is_ascii_alphanumeric() || c == '_')
                .trim_start();
        }
        if let Some(r) = t.strip_prefix("mut ") {
            t = r.trim_start();
        }
        let path: String = t
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if let Some(last) = path.rsplit("::").next() {
            out.push(last.to_string());
        }
    }
    out
}

/// Each `file:line` outside [`may_take_clap`] where a parameter or field is of a clap
/// struct's type (`x: Name`, `x: &Name`, `x: &'a Name`, `x: &mut super::Name`), code only.
fn clap_takers(files: &[(PathBuf, String)]) -> Vec<String> {
    let structs = clap_structs(files);
    let mut found = Vec::new();
    for (rel, text) in files {
        if may_take_clap(rel, &structs) {
            continue;
        }
        let code = blank_non_code(text);
        for (k, line) in code.lines().enumerate() {
            for t in ascribed_types(line) {
                if let Some((_, decl)) = structs.iter().find(|(n, _)| *n == t) {
                    found.push(format!(
                        "src/{}:{}: {} (declared in src/{})",
                        rel.display(),
                        k + 1,
                        text.lines().nth(k).unwrap_or("").trim(),
                        decl.display()
                    ));
                }
            }
        }
    }
    found
}

#[test]
fn no_step_file_takes_a_clap_struct() {
    let found = clap_takers(&src_files(&src()));
    assert!(
        found.is_empty(),
        "resolve the flags into the command's settings type (<cmd>/settings.rs) and pass that \
         to the step:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_clap_checker_finds_takers_and_ignores_paths_and_comments() {
    let f = |p: &str, t: &str| (PathBuf::from(p), t.to_string());
    let files = [
        f(
            "cmd/mod.rs",
            "#[derive(Args, Debug)]\npub struct CmdArgs {\n    pub x: u32,\n}\n\
             pub fn run(args: CmdArgs) {}\n",
        ),
        f("cmd/settings.rs", "pub fn resolve(a: &CmdArgs) {}\n"),
        f("cmd/step.rs", "pub fn step(args: &'a CmdArgs, n: u32) {}\n"),
        f(
            "cmd/other.rs",
            "// fn old(args: &CmdArgs)\nuse super::CmdArgs;\n",
        ),
        f(
            "cmd/job.rs",
            "struct Job<'a> {\n    pub args: &'a mut super::CmdArgs,\n}\n",
        ),
        f("cli.rs", "fn dispatch(a: CmdArgs) {}\n"),
    ];
    assert_eq!(clap_structs(&files).len(), 1);
    let found = clap_takers(&files);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("src/cmd/step.rs:1"), "{found:?}");
    assert!(found[1].starts_with("src/cmd/job.rs:2"), "{found:?}");
}

/// `make test` runs each fuzz target once: `fuzz-ci` runs the fuzz binary's every test, and
/// the plain `cargo test` skips FUZZ_TARGETS by exact name — so FUZZ_TARGETS lists exactly the
/// fuzz binary's tests, and no other test binary has a top-level test of one of those names.
#[test]
fn each_fuzz_target_runs_once_in_make_test() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mk = std::fs::read_to_string(root.join("mk/fuzz.mk")).unwrap();
    let listed: BTreeSet<String> = mk
        .split("FUZZ_TARGETS ?=")
        .nth(1)
        .expect("mk/fuzz.mk sets FUZZ_TARGETS")
        .split("\n\n")
        .next()
        .unwrap()
        .lines()
        .take_while(|l| !l.contains("?=") || l.contains("FUZZ_TARGETS"))
        .flat_map(|l| l.trim_end_matches('\\').split_whitespace())
        .filter(|w| !w.contains("FUZZ_CI") && !w.contains("?="))
        .map(str::to_string)
        .collect();
    let tests_of = |text: &str| -> BTreeSet<String> {
        let lines: Vec<&str> = text.lines().collect();
        lines
            .windows(2)
            .filter(|w| w[0].trim() == "#[test]")
            .filter_map(|w| {
                let l = w[1].strip_prefix("fn ")?;
                Some(l.split('(').next()?.to_string())
            })
            .collect()
    };
    let fuzz = tests_of(&std::fs::read_to_string(root.join("tests/fuzz/main.rs")).unwrap());
    assert_eq!(
        listed, fuzz,
        "mk/fuzz.mk FUZZ_TARGETS against tests/fuzz/main.rs"
    );
    let mut files = Vec::new();
    rust_files(&root.join("tests"), &mut files);
    for p in files
        .iter()
        .filter(|p| !p.starts_with(root.join("tests/fuzz")))
    {
        let clash: Vec<String> = tests_of(&std::fs::read_to_string(p).unwrap())
            .intersection(&fuzz)
            .cloned()
            .collect();
        assert!(
            clash.is_empty(),
            "{}: tests named like fuzz targets would be skipped by `make test`: {clash:?}",
            p.display()
        );
    }
    let makefile = std::fs::read_to_string(root.join("Makefile")).unwrap();
    assert!(
        makefile.contains("--exact $(foreach t,$(FUZZ_TARGETS),--skip $(t))"),
        "Makefile: the plain test run no longer skips the fuzz targets"
    );
}
