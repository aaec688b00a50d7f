//! Declared sources (`manifests/*.toml`) and their lock files (`*.lock`): what may be fetched,
//! pinned to which commit, with which bytes.
//!
//! The key names are a contract (scripts read them): `[[source]]` with `name`, `repo`,
//! `revision` (or `path` for local files), `config`, `split`, `files`, `format`, `text`,
//! `license`, `weight`, `epochs`, and `role`
//! (`train`, the default, or `eval-reference` for benchmark sets used only by decontamination).
//! `[[model]]` entries (`name`, `repo`, a 40-hex `revision`, optional `files` globs, `license`)
//! pin model repos: the base model the provenance chain starts at (docs/model-chain.md).

use crate::digest::{self, HexDigest, SHA1_HEX, SHA256_HEX};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// Input format of a source's files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Parquet,
    /// One top-level JSON array of objects (MetaMathQA).
    Json,
    Jsonl,
    /// Plain text (`.txt`): a file is one document, or one per paragraph (`pack
    /// --paragraphs`); the row is `{"text": …}`.
    Text,
}

/// What a source may be used for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Training input: evaluation splits are refused.
    #[default]
    Train,
    /// A benchmark set for decontamination only: may be a test split, never packed or prompted.
    EvalReference,
}

fn default_config() -> String {
    "default".to_string()
}

/// One `[[source]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    pub name: String,
    /// `owner/name` of the dataset repo on the Hub (empty for a local source).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub repo: String,
    /// Branch, tag or 40-hex commit sha (empty for a local source).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub revision: String,
    /// A local source instead of a Hub repo: a file, directory or glob, relative to the
    /// manifest's directory ([`crate::sources::local`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(default = "default_config")]
    pub config: String,
    /// Required for a Hub source; `train` when a local source names none.
    #[serde(default)]
    pub split: String,
    /// Globs overriding the README's `configs:` mapping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    pub format: Format,
    /// Template over columns, e.g. `"{query}\n\n{response}"`; nested fields as `{train.question}`.
    #[serde(default = "default_text")]
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<f64>,
    /// `pack`: read the source's files this many times (1 to 1000; default 1), so a small
    /// source can supply its weighted share of `--tokens`.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub epochs: u32,
    #[serde(default)]
    pub role: Role,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

impl Source {
    /// Declared with `path = …` (the user's own files) instead of a Hub `repo`.
    pub fn is_local(&self) -> bool {
        self.path.is_some()
    }
}

fn default_text() -> String {
    "{text}".to_string()
}

/// Files a `[[model]]` entry fetches when it names no `files`: what loading the model and its
/// tokenizer needs (config, weights and their index, tokenizer files, chat template).
pub const DEFAULT_MODEL_FILES: &[&str] = &[
    "config.json",
    "generation_config.json",
    "*.safetensors",
    "*.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
];

/// One `[[model]]` entry: a model repo pinned to an exact commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSource {
    pub name: String,
    /// `owner/name` of the model repo on the Hub.
    pub repo: String,
    /// A 40-hex commit sha: a model is pinned exactly, never by branch.
    pub revision: String,
    /// Globs over repo paths (default [`DEFAULT_MODEL_FILES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub license: Option<String>,
}

impl ModelSource {
    /// The globs in force: `files`, else [`DEFAULT_MODEL_FILES`].
    pub fn globs(&self) -> Vec<String> {
        match &self.files {
            Some(f) => f.clone(),
            None => DEFAULT_MODEL_FILES.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// `revision` read as the commit it pins (lowercase, whatever case the manifest wrote);
    /// `None` for a revision that is not 40 hex digits (refused by [`Manifest::load`]).
    pub fn commit(&self) -> Option<HexDigest> {
        HexDigest::parse(&self.revision, SHA1_HEX)
    }
}

/// A manifest file: a list of sources and models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    #[serde(rename = "source", default)]
    pub sources: Vec<Source>,
    #[serde(rename = "model", default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<ModelSource>,
    /// Where the manifest was read from (not serialised).
    #[serde(skip)]
    pub path: PathBuf,
}

impl Manifest {
    /// Read and validate a manifest.
    pub fn load(path: &Path) -> Result<Manifest> {
        let text = crate::bounded::read_regular_text(path, LOCK_MAX)
            .with_context(|| format!("reading manifest {}", path.display()))?;
        let mut m: Manifest = toml::from_str(&text)
            .map_err(|e| crate::error::usage(format!("manifest {}: {e}", path.display())))?;
        m.path = path.to_path_buf();
        for s in m
            .sources
            .iter_mut()
            .filter(|s| s.is_local() && s.split.is_empty())
        {
            s.split = "train".into();
        }
        m.validate()?;
        Ok(m)
    }

    /// [`Manifest::load`] for a stage that reads data (`pack`, `mcq`): at least one
    /// `[[source]]` (a manifest of `[[model]]`s only is refused, exit 2).
    pub fn load_data(path: &Path) -> Result<Manifest> {
        let m = Self::load(path)?;
        if m.sources.is_empty() {
            return Err(crate::error::usage(format!(
                "manifest {}: no [[source]] entries (its [[model]]s are fetched and audited, not read as data)",
                path.display()
            )));
        }
        Ok(m)
    }

    fn validate(&self) -> Result<()> {
        let mut seen = std::collections::HashSet::new();
        if self.sources.is_empty() && self.models.is_empty() {
            return Err(crate::error::usage(format!(
                "manifest {}: no [[source]] or [[model]] entries",
                self.path.display()
            )));
        }
        for m in &self.models {
            let bad = |why: String| {
                crate::error::usage(format!(
                    "manifest {}: model {:?}: {why}",
                    self.path.display(),
                    m.name
                ))
            };
            if !seen.insert(m.name.clone()) {
                return Err(bad("name declared twice".into()));
            }
            if !repo_id_ok(&m.repo) {
                return Err(bad(format!("repo {:?} is not owner/name", m.repo)));
            }
            if HexDigest::parse(&m.revision, SHA1_HEX).is_none() {
                return Err(bad(format!(
                    "revision {:?} is not a 40-hex commit (a model is pinned exactly)",
                    m.revision
                )));
            }
            for g in m.files.iter().flatten() {
                if let Err(e) = globset::Glob::new(g) {
                    return Err(bad(format!("files: bad glob {g:?}: {e}")));
                }
            }
            if m.files.as_ref().is_some_and(|f| f.is_empty()) {
                return Err(bad("files is empty".into()));
            }
        }
        for s in &self.sources {
            if !seen.insert(s.name.clone()) {
                return Err(crate::error::usage(format!(
                    "manifest {}: source name {:?} declared twice",
                    self.path.display(),
                    s.name
                )));
            }
            if s.is_local() {
                let bad = |why: &str| {
                    Err(crate::error::usage(format!(
                        "manifest {}: source {:?}: {why}",
                        self.path.display(),
                        s.name
                    )))
                };
                if s.path.as_deref().is_some_and(|p| p.trim().is_empty()) {
                    return bad("path is empty");
                }
                if !s.repo.is_empty() || !s.revision.is_empty() {
                    return bad(
                        "give either path (local files) or repo + revision (the Hub), not both",
                    );
                }
                if s.files.is_some() {
                    return bad("files selects Hub files; for a local source put the glob in path");
                }
                if let Some(k) = crate::policy::eval_keyword(&s.split) {
                    if s.role == Role::Train {
                        return bad(&format!(
                            "split {:?} is an evaluation split ({k:?})",
                            s.split
                        ));
                    }
                }
            } else if s.split.is_empty() {
                return Err(crate::error::usage(format!(
                    "manifest {}: source {:?}: missing field `split`",
                    self.path.display(),
                    s.name
                )));
            }
            if !s.is_local() && !repo_id_ok(&s.repo) {
                return Err(crate::error::usage(format!(
                    "manifest {}: source {:?}: repo {:?} is not owner/name",
                    self.path.display(),
                    s.name,
                    s.repo
                )));
            }
            if !s.is_local() && (s.revision.is_empty() || s.revision.starts_with("refs/pr/")) {
                return Err(crate::error::usage(format!(
                    "manifest {}: source {:?}: revision {:?} not allowed (pin a branch, tag or commit; never a PR ref)",
                    self.path.display(),
                    s.name,
                    s.revision
                )));
            }
            if !(1..=1000).contains(&s.epochs) {
                return Err(crate::error::usage(format!(
                    "manifest {}: source {:?}: epochs must be 1 to 1000 (got {})",
                    self.path.display(),
                    s.name,
                    s.epochs
                )));
            }
            if let Some(w) = s.weight {
                if !(w.is_finite() && w >= 0.0) {
                    return Err(crate::error::usage(format!(
                        "manifest {}: source {:?}: weight must be a non-negative number",
                        self.path.display(),
                        s.name
                    )));
                }
            }
        }
        self.validate_weights()?;
        self.validate_selections()
    }

    /// Weights (when given) must mix to something: their sum finite and above zero (two of
    /// 1e308 overflow to infinity, all 0 select nothing).
    fn validate_weights(&self) -> Result<()> {
        let weights: Vec<f64> = self.sources.iter().filter_map(|s| s.weight).collect();
        if weights.is_empty() {
            return Ok(());
        }
        let sum: f64 = weights.iter().sum();
        if !(sum.is_finite() && sum > 0.0) {
            return Err(crate::error::usage(format!(
                "manifest {}: the sources' `weight` values sum to {sum}: weights must be finite, \
                 >= 0 and not all zero (they are relative shares; 1, 2, 0.5 ...)",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// The same data under two names would be read twice: sources selecting the same repo,
    /// config, split and files (with the same role) are refused; the same repo/config/split
    /// with different `files` globs is warned about.
    fn validate_selections(&self) -> Result<()> {
        for (i, a) in self.sources.iter().enumerate() {
            for b in &self.sources[..i] {
                if a.repo != b.repo || a.config != b.config || a.split != b.split {
                    continue;
                }
                if a.is_local() || b.is_local() {
                    if a.path == b.path && a.role == b.role {
                        return Err(crate::error::usage(format!(
                            "manifest {}: sources {:?} and {:?} both read path {:?}: the same data would be used twice",
                            self.path.display(),
                            b.name,
                            a.name,
                            a.path.as_deref().unwrap_or_default()
                        )));
                    }
                    continue;
                }
                let both = |verb: &str| {
                    format!(
                        "manifest {}: sources {:?} and {:?} both {verb} {} config {:?} split {:?}",
                        self.path.display(),
                        b.name,
                        a.name,
                        a.repo,
                        a.config,
                        a.split
                    )
                };
                if a.files == b.files && a.role == b.role {
                    return Err(crate::error::usage(format!(
                        "{}: the same data would be used twice; keep one (use `weight` to \
                         up-weight it)",
                        both("select")
                    )));
                }
                tracing::warn!(
                    "{} (with different `files`); check that they do not overlap",
                    both("read")
                );
            }
        }
        Ok(())
    }

    pub fn model(&self, name: &str) -> Option<&ModelSource> {
        self.models.iter().find(|m| m.name == name)
    }

    /// Sources used as training input (role = train).
    pub fn train_sources(&self) -> impl Iterator<Item = &Source> {
        self.sources.iter().filter(|s| s.role == Role::Train)
    }

    /// `stage1.toml` → `stage1.lock`, beside the manifest.
    pub fn lock_path(&self) -> PathBuf {
        self.path.with_extension("lock")
    }
}

/// `owner/name`, neither part empty, `.` or `..`.
fn repo_id_ok(repo: &str) -> bool {
    let parts: Vec<&str> = repo.split('/').collect();
    parts.len() == 2
        && !parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
}

/// One file pinned in a lock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockedFile {
    /// Repo-relative path.
    pub path: String,
    pub size: u64,
    /// sha256 of the file's bytes (LFS oid for LFS files; computed for small git files).
    pub sha256: String,
    /// git blob sha1 (the Hub's `oid`) for non-LFS files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_oid: Option<String>,
}

/// One source pinned in a lock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedSource {
    pub name: String,
    pub repo: String,
    /// The revision asked for in the manifest.
    pub revision: String,
    /// The commit it resolved to.
    pub commit: String,
    pub config: String,
    pub split: String,
    #[serde(default)]
    pub role: Role,
    #[serde(rename = "file", default)]
    pub files: Vec<LockedFile>,
}

/// The most bytes a lock file (or a manifest) is read to: about 90,000 files' entries. A
/// lock is small; a larger one is not one dlm-data wrote, and parsing it whole could take
/// minutes (a fuzzed 19 MB lock of nested arrays took 10 s to parse).
pub const LOCK_MAX: crate::bounded::Bound = crate::bounded::Bound::new(
    16 << 20,
    "a lock file or manifest is at most that; no flag raises it",
);

/// A lock's text: a regular file (a FIFO would block) within [`LOCK_MAX`].
fn read_lock_text(path: &Path) -> Result<String> {
    crate::bounded::read_regular_text(path, LOCK_MAX)
        .with_context(|| format!("reading lock {}", path.display()))
}

fn check_lock_version(path: &Path, version: u32) -> Result<()> {
    if version != 1 {
        bail!("lock {}: unsupported version {version}", path.display());
    }
    Ok(())
}

/// A lock entry's digests as read: a commit, sha256 or git oid in any case held lowercase from
/// here on (the one rule of [`crate::digest`]); anything else stays as written for the
/// lock's checks to refuse by name.
fn read_digests(commit: &mut String, files: &mut [LockedFile]) {
    digest::normalise(commit, SHA1_HEX);
    for f in files {
        digest::normalise(&mut f.sha256, SHA256_HEX);
        if let Some(o) = &mut f.git_oid {
            digest::normalise(o, SHA1_HEX);
        }
    }
}

/// A lock file: every source's commit and every file's size and sha256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Lock {
    pub version: u32,
    #[serde(rename = "source", default)]
    pub sources: Vec<LockedSource>,
}

impl Lock {
    pub fn load(path: &Path) -> Result<Lock> {
        let text = read_lock_text(path)?;
        let mut lock: Lock =
            toml::from_str(&text).with_context(|| format!("parsing lock {}", path.display()))?;
        check_lock_version(path, lock.version)?;
        for s in &mut lock.sources {
            read_digests(&mut s.commit, &mut s.files);
        }
        Ok(lock)
    }

    /// Write atomically (temp + rename), unless the file already holds these bytes.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self)?;
        crate::util::write_if_changed(path, text.as_bytes()).map(|_| ())
    }

    pub fn source(&self, name: &str) -> Option<&LockedSource> {
        self.sources.iter().find(|s| s.name == name)
    }
}

/// One `[[model]]` pinned in a lock: its commit and every fetched file's size and sha256.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LockedModel {
    pub name: String,
    pub repo: String,
    pub revision: String,
    pub commit: String,
    #[serde(rename = "file", default)]
    pub files: Vec<LockedFile>,
}

/// The `[[model]]` tables of a lock file. Read apart from [`Lock`] (whose readers need the
/// sources only); [`save_lock`] writes both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ModelLock {
    #[serde(rename = "model", default)]
    pub models: Vec<LockedModel>,
}

impl ModelLock {
    pub fn load(path: &Path) -> Result<ModelLock> {
        #[derive(Deserialize)]
        struct Versioned {
            version: u32,
            #[serde(flatten)]
            models: ModelLock,
        }
        // One read and one parse (the version check and the models together).
        let text = read_lock_text(path)?;
        let mut v: Versioned =
            toml::from_str(&text).with_context(|| format!("parsing lock {}", path.display()))?;
        check_lock_version(path, v.version)?;
        for m in &mut v.models.models {
            read_digests(&mut m.commit, &mut m.files);
        }
        Ok(v.models)
    }

    pub fn model(&self, name: &str) -> Option<&LockedModel> {
        self.models.iter().find(|m| m.name == name)
    }
}

/// Write a lock with its sources and models, atomically.
pub fn save_lock(path: &Path, lock: &Lock, models: &[LockedModel]) -> Result<()> {
    #[derive(Serialize)]
    struct Both<'a> {
        version: u32,
        #[serde(rename = "source")]
        sources: &'a [LockedSource],
        #[serde(rename = "model", skip_serializing_if = "<[_]>::is_empty")]
        models: &'a [LockedModel],
    }
    let text = toml::to_string_pretty(&Both {
        version: lock.version,
        sources: &lock.sources,
        models,
    })?;
    // An unchanged lock keeps its bytes and mtime (a nightly rerun rewrites nothing).
    crate::util::write_if_changed(path, text.as_bytes()).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_manifests_parse() {
        for f in ["manifests/stage1.toml", "manifests/mcq.toml"] {
            let m = Manifest::load(Path::new(f)).unwrap();
            assert!(!m.sources.is_empty(), "{f}");
            for s in &m.sources {
                assert_eq!(s.role, Role::Train, "{f} {}", s.name);
                assert!(!crate::policy::is_eval_name(&s.split), "{f} {}", s.name);
            }
        }
    }

    #[test]
    fn model_entries_are_validated_and_locked_apart() {
        let m = Manifest::load(Path::new("manifests/base.toml")).unwrap();
        assert!(m.sources.is_empty());
        let e = Manifest::load_data(Path::new("manifests/base.toml")).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert_eq!(m.models[0].repo, "openbmb/MiniCPM5-2B");
        assert_eq!(
            m.models[0].revision,
            "12a3808a956f869c767195e9266b59c4d21d92e2"
        );
        assert!(m.models[0].globs().iter().any(|g| g == "*.safetensors"));
        let (dir, p) = crate::testkit::temp_path("m.toml");
        for (body, needle) in [
            ("name='b'\nrepo='o/n'\nrevision='main'\n", "40-hex"),
            ("name='b'\nrepo='o'\nrevision='{c}'\n", "owner/name"),
            (
                "name='b'\nrepo='o/n'\nrevision='{c}'\nfiles=[]\n",
                "files is empty",
            ),
            ("name='b'\nrepo='o/n'\nrevision='{c}'\nbogus=1\n", "bogus"),
        ] {
            let body = body.replace("{c}", &"a".repeat(40));
            std::fs::write(&p, format!("[[model]]\n{body}")).unwrap();
            let e = Manifest::load(&p).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2, "{body}");
            assert!(format!("{e:#}").contains(needle), "{body}: {e:#}");
        }
        // A lock with both tables: Lock sees the sources, ModelLock the models.
        let lp = dir.path().join("m.lock");
        let lm = LockedModel {
            name: "base".into(),
            repo: "o/n".into(),
            revision: "a".repeat(40),
            commit: "a".repeat(40),
            files: vec![LockedFile {
                path: "config.json".into(),
                size: 3,
                sha256: "b".repeat(64),
                git_oid: Some("c".repeat(40)),
            }],
        };
        save_lock(
            &lp,
            &Lock {
                version: 1,
                sources: vec![],
            },
            std::slice::from_ref(&lm),
        )
        .unwrap();
        assert!(Lock::load(&lp).unwrap().sources.is_empty());
        assert_eq!(ModelLock::load(&lp).unwrap().models, vec![lm]);
    }

    #[test]
    fn weights_must_mix_and_one_selection_has_one_name() {
        let (_dir, p) = crate::testkit::temp_path("m.toml");
        let src = |name: &str, repo: &str, w: &str| {
            format!("[[source]]\nname='{name}'\nrepo='{repo}'\nrevision='main'\nsplit='train'\nformat='parquet'\n{w}\n")
        };
        for (body, needle) in [
            (
                src("a", "o/a", "weight=1e308") + &src("b", "o/b", "weight=1e308"),
                "sum to inf",
            ),
            (
                src("a", "o/a", "weight=0") + &src("b", "o/b", "weight=0"),
                "sum to 0",
            ),
            (src("a", "o/a", "weight=-1"), "non-negative"),
            (
                src("a", "o/a", "") + &src("b", "o/a", ""),
                "both select o/a",
            ),
        ] {
            std::fs::write(&p, &body).unwrap();
            let e = Manifest::load(&p).unwrap_err();
            assert_eq!(crate::error::exit_code(&e), 2);
            assert!(format!("{e:#}").contains(needle), "{needle}: {e:#}");
        }
        std::fs::write(
            &p,
            src("a", "o/a", "weight=0") + &src("b", "o/b", "weight=2"),
        )
        .unwrap();
        Manifest::load(&p).unwrap();
    }

    #[test]
    fn unknown_key_is_usage_error() {
        let (_dir, p) = crate::testkit::temp_file("m.toml", "[[source]]\nname='a'\nrepo='o/n'\nrevision='main'\nsplit='train'\nformat='parquet'\nbogus=1\n");
        let e = Manifest::load(&p).unwrap_err();
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(e.to_string().contains("m.toml"), "{e}");
    }
}
