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
