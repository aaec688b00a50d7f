//! The docs keep up with the code: every flag clap knows for a subcommand is in the `## Flags`
//! table of its page `docs/commands/<name>.md` (and every flag that table lists still exists),
//! every relative link and `#anchor` in README.md, docs/ and bench/results/ resolves, and the
//! README stays a short front page.
//!
//! The flags come from clap itself (`Cli::command()`), so a flag added to any `*Args` struct
//! without a docs row fails `flags_are_documented`, which lists every missing flag at once.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use clap::CommandFactory;
use dlm_data::cli::Cli;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The page documenting subcommand `name`.
fn page_for(name: &str) -> PathBuf {
    root().join("docs/commands").join(format!("{name}.md"))
}

/// What a subcommand takes: `--long` flags and positional value names (`OUT`).
fn cli_args(cmd: &clap::Command) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for a in cmd.get_arguments() {
        let id = a.get_id().as_str();
        if id == "help" || id == "version" {
            continue;
        }
        if let Some(l) = a.get_long() {
            out.insert(format!("--{l}"));
        } else if a.is_positional() {
            let name = a
                .get_value_names()
                .and_then(|v| v.first().map(|s| s.to_string()))
                .unwrap_or_else(|| id.to_ascii_uppercase());
            out.insert(name);
        }
    }
    out
}

/// The text of the page's `## Flags` section (up to the next `## ` heading).
fn flags_section(page: &str) -> Option<&str> {
    let start = page.find("\n## Flags\n")? + 1;
    let body = &page[start + "## Flags\n".len()..];
    let end = body.find("\n## ").map(|e| e + 1).unwrap_or(body.len());
    Some(&body[..end])
}

/// The first cell of each table row in `section`, each backticked token in it taken up to the
/// first space: `` | `--shard I/N` | `` → `--shard`, `` | `OUT` (positional) | `` → `OUT`.
fn documented_args(section: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in section.lines() {
        let Some(rest) = line.strip_prefix('|') else {
            continue;
        };
        let cell = rest.split('|').next().unwrap_or("");
        for (k, piece) in cell.split('`').enumerate() {
            if k % 2 == 1 {
                if let Some(tok) = piece.split_whitespace().next() {
                    if tok.starts_with("--") || tok.chars().all(|c| c.is_ascii_uppercase()) {
                        out.insert(tok.to_string());
                    }
                }
            }
        }
    }
    out
}

/// Problems of one page against the CLI's args: missing rows, rows for args that do not exist.
fn page_problems(name: &str, page: &str, args: &BTreeSet<String>) -> Vec<String> {
    let Some(section) = flags_section(page) else {
        return vec![format!(
            "dlm-data {name}: docs/commands/{name}.md has no `## Flags` section"
        )];
    };
    let documented = documented_args(section);
    let missing: Vec<&str> = args.difference(&documented).map(String::as_str).collect();
    let stale: Vec<&str> = documented.difference(args).map(String::as_str).collect();
    let mut out = Vec::new();
    if !missing.is_empty() {
        out.push(format!(
            "dlm-data {name}: not in the Flags table of docs/commands/{name}.md: {}",
            missing.join(", ")
        ));
    }
    if !stale.is_empty() {
        out.push(format!(
            "dlm-data {name}: docs/commands/{name}.md documents args the command does not have: {}",
            stale.join(", ")
        ));
    }
    out
}

/// Whether a "documents args the command does not have" problem names only global flags.
fn only_globals(problem: &str, globals: &BTreeSet<String>) -> bool {
    let list = problem.rsplit(": ").next().unwrap_or("");
    list.split(", ").all(|a| globals.contains(a))
}

#[test]
fn flags_are_documented() {
    let cli = Cli::command();
    let globals: BTreeSet<String> = cli
        .get_arguments()
        .filter(|a| a.is_global_set())
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    assert!(globals.contains("--json"), "{globals:?}");
    let mut problems = Vec::new();
    let mut seen = 0;
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        if name == "help" {
            continue;
        }
        seen += 1;
        let path = page_for(name);
        let Ok(page) = std::fs::read_to_string(&path) else {
            problems.push(format!(
                "dlm-data {name}: no docs page {}",
                path.strip_prefix(root()).unwrap_or(&path).display()
            ));
            continue;
        };
        // The global flags (`--json`, `--quiet`, …) may have a row on a page (what `--json`
        // prints for this command) without being the command's own.
        let mut documented = page_problems(name, &page, &cli_args(sub));
        documented.retain(|p| !p.contains("documents args") || !only_globals(p, &globals));
        problems.extend(documented);
    }
    assert!(seen >= 9, "expected every subcommand, saw {seen}");
    assert!(
        problems.is_empty(),
        "docs out of date with the CLI:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn checker_finds_missing_and_stale_flags() {
    let page = "# x\n\n## Flags\n\n| flag | meaning |\n|---|---|\n| `--shard-bytes SIZE` | a |\n\
                | `OUT` (positional) | b |\n| `--gone` | c |\n\n## Exit codes\n\n| `--later` | d |\n";
    let args: BTreeSet<String> = ["--shard", "--shard-bytes", "OUT"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let p = page_problems("pack", page, &args);
    assert_eq!(p.len(), 2, "{p:?}");
    // `--shard-bytes` does not document `--shard`; rows after the section do not count.
    assert!(p[0].ends_with(": --shard"), "{p:?}");
    assert!(p[1].ends_with(": --gone"), "{p:?}");
    assert_eq!(
        page_problems("pack", "# x\n", &args),
        vec!["dlm-data pack: docs/commands/pack.md has no `## Flags` section".to_string()]
    );
}

/// Markdown files whose links are checked.
fn doc_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                if p.file_name().is_some_and(|n| n != "raw") {
                    walk(&p, out);
                }
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut v = vec![root().join("README.md")];
    walk(&root().join("docs"), &mut v);
    walk(&root().join("bench/results"), &mut v);
    v.sort();
    v
}

/// `[text](target)` link targets outside code spans and fenced blocks.
fn link_targets(md: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || line.starts_with("    ") {
            continue;
        }
        let plain: String = line
            .split('`')
            .enumerate()
            .filter(|(k, _)| k % 2 == 0)
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(" ");
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(j) = after.find(')') else { break };
            out.push(after[..j].to_string());
            rest = &after[j..];
        }
    }
    out
}

/// GitHub's heading anchors: lowercase, punctuation other than `-`/`_` dropped, spaces → `-`.
fn anchors(md: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut fenced = false;
    for line in md.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#').trim();
        let slug: String = title
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        out.insert(slug);
    }
    out
}

#[test]
fn relative_links_resolve() {
    let mut broken = Vec::new();
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        let rel = file.strip_prefix(root()).unwrap().display().to_string();
        for target in link_targets(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = match target.split_once('#') {
                Some((p, a)) => (p, Some(a)),
                None => (target.as_str(), None),
            };
            let dest = if path.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(path)
            };
            if !dest.exists() {
                broken.push(format!("{rel}: ({target}): no such file"));
                continue;
            }
            if let Some(a) = anchor {
                let md = std::fs::read_to_string(&dest).unwrap_or_default();
                if !anchors(&md).contains(a) {
                    broken.push(format!("{rel}: ({target}): no heading #{a}"));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "broken links:\n  {}",
        broken.join("\n  ")
    );
}

#[test]
fn link_checker_sees_links_and_anchors() {
    let md = "see [a](x.md#top) and `[no](code.md)`\n```\n[no](fenced.md)\n```\n## The `--x` flag (A/B)\n";
    assert_eq!(link_targets(md), vec!["x.md#top".to_string()]);
    assert!(anchors(md).contains("the---x-flag-ab"));
}

#[test]
fn readme_is_a_short_front_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 170,
        "README.md has {lines} lines; keep it a front page (≤ ~150) and move detail to docs/"
    );
    let first_block: Vec<&str> = readme.lines().take(8).collect();
    for cmd in ["make demo", "make test"] {
        assert!(
            first_block.iter().any(|l| l.contains(cmd)),
            "README.md must show `{cmd}` in its first lines"
        );
    }
}
