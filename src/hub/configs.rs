//! Config + split → files, as the `datasets` library maps them: the README's YAML `configs:`
//! front matter with fsspec-style globs, or inferred splits when the README declares none
//! (the split-name patterns of `datasets`' `data_files.py`). The manifest's `files` globs
//! override both.
//!
//! Glob semantics (fsspec/`datasets`): `*` does not cross `/`, `**` does; hidden (`.x`) and
//! dunder (`__x`) path components are skipped unless the pattern names them; `README.md` and
//! the other metadata files are never data files.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use globset::{GlobBuilder, GlobMatcher};

/// Files `datasets` never treats as data.
const IGNORED: &[&str] = &[
    "README.md",
    "config.json",
    "dataset_info.json",
    "dataset_infos.json",
    "dummy_data.zip",
    "dataset_dict.json",
];

/// Keywords `datasets` uses to infer splits from file and directory names.
const TRAIN_KEYWORDS: &[&str] = &["train", "training"];
const VALIDATION_KEYWORDS: &[&str] = &["validation", "valid", "dev", "val"];
const TEST_KEYWORDS: &[&str] = &["test", "testing", "eval", "evaluation"];

/// One config of a README: name → split → patterns.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSpec {
    pub name: String,
    pub default: bool,
    /// split name → glob patterns, in declaration order.
    pub splits: Vec<(String, Vec<String>)>,
}

/// Parse the YAML front matter (`---\n...\n---`) of a dataset README and return its
/// `configs:` list. `Ok(None)` when the README has no front matter or no `configs:`.
pub fn parse_readme_configs(readme: &str) -> Result<Option<Vec<ConfigSpec>>> {
    let Some(yaml) = front_matter(readme) else {
        return Ok(None);
    };
    let doc: serde_yaml::Value =
        serde_yaml::from_str(yaml).map_err(|e| anyhow!("README.md YAML front matter: {e}"))?;
    let Some(configs) = doc.get("configs") else {
        return Ok(None);
    };
    let list = configs
        .as_sequence()
        .ok_or_else(|| anyhow!("README.md: `configs` is not a list"))?;
    let mut out = Vec::new();
    for c in list {
        let name = c
            .get("config_name")
            .and_then(|v| v.as_str())
            .unwrap_or("default")
            .to_string();
        let default = c.get("default").and_then(|v| v.as_bool()).unwrap_or(false);
        let splits = match c.get("data_files") {
            None => vec![("train".to_string(), vec!["**".to_string()])],
            Some(df) => {
                parse_data_files(df).map_err(|e| anyhow!("README.md config {name:?}: {e}"))?
            }
        };
        out.push(ConfigSpec {
            name,
            default,
            splits,
        });
    }
    Ok(Some(out))
}

fn front_matter(readme: &str) -> Option<&str> {
    let rest = readme
        .strip_prefix("---\n")
        .or_else(|| readme.strip_prefix("---\r\n"))?;
    let end = rest.find("\n---")?;
    Some(&rest[..end + 1])
}

fn strings(v: &serde_yaml::Value) -> Result<Vec<String>> {
    if let Some(s) = v.as_str() {
        return Ok(vec![s.to_string()]);
    }
    let seq = v
        .as_sequence()
        .ok_or_else(|| anyhow!("expected a string or a list of strings"))?;
    seq.iter()
        .map(|x| {
            x.as_str()
                .map(str::to_string)
                .ok_or_else(|| anyhow!("expected a string, got {x:?}"))
        })
        .collect()
}

/// `data_files`: a string, a list of strings (split `train`), a list of `{split, path}`, or a
/// `{split: path}` mapping.
fn parse_data_files(df: &serde_yaml::Value) -> Result<Vec<(String, Vec<String>)>> {
    if df.is_string() {
        return Ok(vec![("train".into(), strings(df)?)]);
    }
    if let Some(map) = df.as_mapping() {
        let mut out = Vec::new();
        for (k, v) in map {
            let k = k
                .as_str()
                .ok_or_else(|| anyhow!("split name is not a string"))?;
            out.push((k.to_string(), strings(v)?));
        }
        return Ok(out);
    }
    let seq = df
        .as_sequence()
        .ok_or_else(|| anyhow!("data_files must be a string, list or mapping"))?;
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for item in seq {
        if let Some(s) = item.as_str() {
            push_split(&mut out, "train", vec![s.to_string()]);
        } else {
            let split = item
                .get("split")
                .and_then(|v| v.as_str())
                .unwrap_or("train");
            let path = item
                .get("path")
                .ok_or_else(|| anyhow!("data_files entry without `path`"))?;
            push_split(&mut out, split, strings(path)?);
        }
    }
    Ok(out)
}

fn push_split(out: &mut Vec<(String, Vec<String>)>, split: &str, pats: Vec<String>) {
    if let Some(e) = out.iter_mut().find(|(s, _)| s == split) {
        e.1.extend(pats);
    } else {
        out.push((split.to_string(), pats));
    }
}

/// A compiled fsspec-style pattern.
pub struct Pattern {
    raw: String,
    glob: GlobMatcher,
}

impl Pattern {
    pub fn new(raw: &str) -> Result<Pattern> {
        let raw = raw.trim_start_matches("./").to_string();
        let glob = GlobBuilder::new(&raw)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| anyhow!("bad glob {raw:?}: {e}"))?
            .compile_matcher();
        Ok(Pattern { raw, glob })
    }

    /// Does `path` match, with hidden/dunder components skipped unless named by the pattern?
    pub fn matches(&self, path: &str) -> bool {
        if !self.glob.is_match(path) {
            return false;
        }
        for comp in path.split('/') {
            let prefix = if comp.starts_with("__") {
                "__"
            } else if comp.starts_with('.') {
                "."
            } else {
                continue;
            };
            if !self.raw.split('/').any(|p| p.starts_with(prefix)) {
                return false;
            }
        }
        true
    }
}

fn is_ignored(path: &str) -> bool {
    IGNORED.contains(&path)
}

/// Repo files matching any of `patterns`, sorted.
pub fn select(listing: &[String], patterns: &[String]) -> Result<Vec<String>> {
    let pats: Vec<Pattern> = patterns
        .iter()
        .map(|p| Pattern::new(p))
        .collect::<Result<_>>()?;
    let mut out: Vec<String> = listing
        .iter()
        .filter(|p| !is_ignored(p) && pats.iter().any(|g| g.matches(p)))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Where a source's files came from (for messages and the lock).
#[derive(Debug, Clone, PartialEq)]
pub enum Selection {
    /// The manifest's `files` globs.
    ManifestGlobs(Vec<String>),
    /// The README's `configs:` entry.
    ReadmeConfig(Vec<String>),
    /// Inferred from file names (no YAML configs).
    Inferred,
}

/// The files of `config`/`split`: manifest globs if given, else README configs, else
/// inferred splits. Errors name the available configs/splits when the asked one is absent.
pub fn files_for(
    listing: &[String],
    readme: Option<&str>,
    config: &str,
    split: &str,
    manifest_globs: Option<&[String]>,
) -> Result<(Vec<String>, Selection)> {
    if let Some(globs) = manifest_globs {
        return Ok((
            select(listing, globs)?,
            Selection::ManifestGlobs(globs.to_vec()),
        ));
    }
    let configs = match readme {
        Some(r) => parse_readme_configs(r)?,
        None => None,
    };
    if let Some(configs) = configs {
        let chosen = configs.iter().find(|c| c.name == config).or_else(|| {
            // `default` means the config marked default, or the only one.
            (config == "default")
                .then(|| {
                    configs
                        .iter()
                        .find(|c| c.default)
                        .or(if configs.len() == 1 {
                            configs.first()
                        } else {
                            None
                        })
                })
                .flatten()
        });
        let Some(c) = chosen else {
            let names: Vec<&str> = configs.iter().map(|c| c.name.as_str()).collect();
            return Err(crate::error::usage(format!(
                "config {config:?} is not declared in README.md (configs: {})",
                names.join(", ")
            )));
        };
        let Some((_, pats)) = c.splits.iter().find(|(s, _)| s == split) else {
            let names: Vec<&str> = c.splits.iter().map(|(s, _)| s.as_str()).collect();
            return Err(crate::error::usage(format!(
                "config {:?} has no split {split:?} (splits: {})",
                c.name,
                names.join(", ")
            )));
        };
        return Ok((
            select(listing, pats)?,
            Selection::ReadmeConfig(pats.clone()),
        ));
    }
    if config != "default" {
        return Err(crate::error::usage(format!(
            "config {config:?}: README.md declares no configs (only `default` exists)"
        )));
    }
    let splits = infer_splits(listing);
    match splits.get(split) {
        Some(files) => Ok((files.clone(), Selection::Inferred)),
        None => Err(crate::error::usage(format!(
            "split {split:?} not found (inferred splits: {})",
            splits.keys().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// Data files of a repo without YAML configs, grouped into splits the way `datasets` infers
/// them: `data/{split}-NNNNN-of-NNNNN*` first, then split keywords in file or directory
/// names, else everything is `train`.
pub fn infer_splits(listing: &[String]) -> BTreeMap<String, Vec<String>> {
    let data: Vec<&String> = listing
        .iter()
        .filter(|p| !is_ignored(p))
        .filter(|p| {
            !p.split('/')
                .any(|c| c.starts_with('.') || c.starts_with("__"))
        })
        .collect();
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in &data {
        if let Some(split) = sharded_split(p) {
            out.entry(split).or_default().push((*p).clone());
        }
    }
    if out.is_empty() {
        for p in &data {
            let words = path_words(p);
            for (split, kws) in [
                ("train", TRAIN_KEYWORDS),
                ("validation", VALIDATION_KEYWORDS),
                ("test", TEST_KEYWORDS),
            ] {
                if words.iter().any(|w| kws.contains(&w.as_str())) {
                    out.entry(split.to_string()).or_default().push((*p).clone());
                    break;
                }
            }
        }
    }
    if out.is_empty() && !data.is_empty() {
        out.insert("train".into(), data.iter().map(|p| (*p).clone()).collect());
    }
    for v in out.values_mut() {
        v.sort();
    }
    out
}

/// `data/{split}-00000-of-00001.parquet` → `split`.
fn sharded_split(path: &str) -> Option<String> {
    let name = path.strip_prefix("data/")?;
    if name.contains('/') {
        return None;
    }
    let (split, rest) = name.split_once('-')?;
    let b = rest.as_bytes();
    let ok = b.len() >= 14
        && b[..5].iter().all(u8::is_ascii_digit)
        && &b[5..9] == b"-of-"
        && b[9..14].iter().all(u8::is_ascii_digit);
    (ok && !split.is_empty()).then(|| split.to_string())
}

fn path_words(path: &str) -> Vec<String> {
    path.split(|c: char| "-._ /".contains(c) || c.is_ascii_digit())
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    const MMLU: &str = "---\nlicense: mit\nconfigs:\n- config_name: auxiliary_train\n  data_files:\n  - split: train\n    path: auxiliary_train/train-*\n- config_name: all\n  data_files:\n  - split: test\n    path: all/test-*\n  - split: dev\n    path: all/dev-*\n  - split: auxiliary_train\n    path: all/auxiliary_train-*\n---\n# MMLU\n";

    #[test]
    fn readme_configs() {
        let listing = l(&[
            ".gitattributes",
            "README.md",
            "all/test-00000-of-00001.parquet",
            "all/dev-00000-of-00001.parquet",
            "all/auxiliary_train-00000-of-00001.parquet",
            "auxiliary_train/train-00000-of-00001.parquet",
        ]);
        let (f, _) = files_for(&listing, Some(MMLU), "auxiliary_train", "train", None).unwrap();
        assert_eq!(f, l(&["auxiliary_train/train-00000-of-00001.parquet"]));
        let (f, _) = files_for(&listing, Some(MMLU), "all", "test", None).unwrap();
        assert_eq!(f, l(&["all/test-00000-of-00001.parquet"]));
        let e = files_for(&listing, Some(MMLU), "all", "validation", None).unwrap_err();
        assert!(e.to_string().contains("test, dev, auxiliary_train"), "{e}");
        let e = files_for(&listing, Some(MMLU), "nope", "train", None).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
    }

    #[test]
    fn star_does_not_cross_slash_and_hidden_skipped() {
        let listing = l(&[
            "data/a/x.parquet",
            "data/b.parquet",
            "data/.hidden/y.parquet",
            "data/__pycache__/z.parquet",
            "sample/10BT/000_00000.parquet",
        ]);
        let cases: [(&str, &[&str]); 5] = [
            ("data/*", &["data/b.parquet"]),
            ("data/*/*", &["data/a/x.parquet"]),
            ("data/**", &["data/a/x.parquet", "data/b.parquet"]),
            ("data/.hidden/*", &["data/.hidden/y.parquet"]),
            ("sample/10BT/*", &["sample/10BT/000_00000.parquet"]),
        ];
        for (glob, want) in cases {
            assert_eq!(select(&listing, &l(&[glob])).unwrap(), l(want), "{glob}");
        }
    }

    #[test]
    fn inferred_splits() {
        // MetaMathQA: no YAML, no keywords → everything is train (hence the manifest glob).
        let mm = l(&[
            ".gitattributes",
            "README.md",
            "MetaMathQA-395K.json",
            "MetaMathQA-40K.json",
        ]);
        let s = infer_splits(&mm);
        assert_eq!(s.len(), 1);
        assert_eq!(
            s["train"],
            l(&["MetaMathQA-395K.json", "MetaMathQA-40K.json"])
        );
        let (f, sel) = files_for(
            &mm,
            Some("---\nlicense: mit\n---\n"),
            "default",
            "train",
            None,
        )
        .unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(sel, Selection::Inferred);
        let (f, _) = files_for(
            &mm,
            None,
            "default",
            "train",
            Some(&l(&["MetaMathQA-395K.json"])),
        )
        .unwrap();
        assert_eq!(f, l(&["MetaMathQA-395K.json"]));
        // Sharded data/ layout and keywords.
        let sq = l(&[
            "data/train-00000-of-00001.parquet",
            "data/test-00000-of-00001.parquet",
        ]);
        let s = infer_splits(&sq);
        assert_eq!(s.keys().collect::<Vec<_>>(), vec!["test", "train"]);
        let kw = l(&["train.jsonl", "dev.jsonl", "eval/x.jsonl"]);
        let s = infer_splits(&kw);
        assert_eq!(s["validation"], l(&["dev.jsonl"]));
        assert_eq!(s["test"], l(&["eval/x.jsonl"]));
    }

    #[test]
    fn data_files_forms() {
        let r = "---\nconfigs:\n- config_name: a\n  data_files: x/*.parquet\n- config_name: b\n  default: true\n  data_files:\n    train: [b/*]\n---\n";
        let c = parse_readme_configs(r).unwrap().unwrap();
        assert_eq!(
            c[0].splits,
            vec![("train".to_string(), l(&["x/*.parquet"]))]
        );
        assert!(c[1].default);
        let listing = l(&["b/1.parquet", "x/2.parquet"]);
        let (f, _) = files_for(&listing, Some(r), "default", "train", None).unwrap();
        assert_eq!(f, l(&["b/1.parquet"]));
    }
}
