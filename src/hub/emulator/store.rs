//! The emulator's view of fixture repos on disk: dataset repos at `<root>/<owner>/<name>/...`,
//! model repos at `<root>/models/<owner>/<name>/...` (so no dataset owner may be `models`), with a hidden
//! `.emulator.json` (`{"commit": "<40 hex>"}`) pinning the commit that `main` resolves to.
//! Files matching a `filter=lfs` line of the repo's `.gitattributes` are served as LFS
//! (sha256 oid, CDN redirect); the rest as regular git files (blob sha1).
//!
//! The tree is re-read on every request so tests can change a repo under a running
//! emulator; hashes are cached by (path, size, mtime).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::hub::names::RepoKind;

/// The emulator's metadata file inside a repo dir (never listed).
pub const META_FILE: &str = ".emulator.json";

/// The directory under the root holding model repos.
pub const MODELS_DIR: &str = "models";

/// One file of a repo as the Hub describes it.
#[derive(Debug, Clone)]
pub struct RepoFile {
    pub path: String,
    pub disk: PathBuf,
    pub size: u64,
    pub lfs: bool,
    pub sha256: String,
    /// Git blob sha1 of the content (regular files) or of the LFS pointer (LFS files).
    pub git_oid: String,
    pub pointer_size: u64,
}

/// A repo at its single commit.
#[derive(Debug, Clone)]
pub struct Repo {
    pub id: String,
    pub commit: String,
    pub files: Vec<RepoFile>,
}

#[derive(Clone)]
struct Hashes {
    sha256: String,
    sha1: String,
}

pub struct Store {
    root: PathBuf,
    hashes: Mutex<HashMap<(PathBuf, u64, SystemTime), Hashes>>,
    by_sha256: Mutex<HashMap<String, PathBuf>>,
}

/// Why a repo lookup failed (mapped to the Hub's 404 error codes).
#[derive(Debug)]
pub enum Missing {
    Repo,
    Revision,
}

impl Store {
    pub fn new(root: &Path) -> Store {
        Store {
            root: root.to_path_buf(),
            hashes: Mutex::new(HashMap::new()),
            by_sha256: Mutex::new(HashMap::new()),
        }
    }

    /// The dataset repo `id` at revision `rev` (its commit sha or `main`).
    pub fn repo(&self, id: &str, rev: &str) -> std::result::Result<Repo, Missing> {
        self.repo_of(RepoKind::Dataset, id, rev)
    }

    /// The repo `id` of `kind` at revision `rev`.
    pub fn repo_of(
        &self,
        kind: RepoKind,
        id: &str,
        rev: &str,
    ) -> std::result::Result<Repo, Missing> {
        let parts: Vec<&str> = id.split('/').collect();
        if parts.len() != 2
            || parts.iter().any(|p| p.is_empty() || p.starts_with('.'))
            || (kind == RepoKind::Dataset && parts[0] == MODELS_DIR)
        {
            return Err(Missing::Repo);
        }
        let base = match kind {
            RepoKind::Dataset => self.root.clone(),
            RepoKind::Model => self.root.join(MODELS_DIR),
        };
        let dir = base.join(parts[0]).join(parts[1]);
        if !dir.is_dir() {
            return Err(Missing::Repo);
        }
        let (repo, branches) = self.load(id, &dir).map_err(|_| Missing::Repo)?;
        if rev == repo.commit
            || rev == "main"
            || rev == "refs/heads/main"
            || branches.iter().any(|b| b == rev)
        {
            Ok(repo)
        } else {
            Err(Missing::Revision)
        }
    }

    /// Disk path of an LFS blob by sha256 (the CDN's view).
    pub fn lfs_blob(&self, sha256: &str) -> Option<PathBuf> {
        self.by_sha256.lock().unwrap().get(sha256).cloned()
    }

    /// The repo and its extra branch names (`.emulator.json` `branches`).
    fn load(&self, id: &str, dir: &Path) -> Result<(Repo, Vec<String>)> {
        let mut paths = Vec::new();
        walk(dir, dir, &mut paths)?;
        paths.sort();
        let lfs_globs = lfs_patterns(dir);
        let mut files = Vec::new();
        let mut listing_digest = Sha256::new();
        for rel in paths {
            let disk = dir.join(&rel);
            let meta = std::fs::metadata(&disk)?;
            let h = self.hashes_of(&disk, meta.len(), meta.modified()?)?;
            let name = rel.rsplit('/').next().unwrap_or(&rel);
            let lfs = lfs_globs
                .iter()
                .any(|g| g.is_match(name) || g.is_match(&rel));
            let (git_oid, pointer_size) = if lfs {
                let p = lfs_pointer(&h.sha256, meta.len());
                (crate::util::git_blob_sha1(p.as_bytes()), p.len() as u64)
            } else {
                (h.sha1.clone(), 0)
            };
            if lfs {
                self.by_sha256
                    .lock()
                    .unwrap()
                    .insert(h.sha256.clone(), disk.clone());
            }
            listing_digest.update(format!("{rel}\0{}\n", h.sha256));
            files.push(RepoFile {
                path: rel,
                disk,
                size: meta.len(),
                lfs,
                sha256: h.sha256,
                git_oid,
                pointer_size,
            });
        }
        let mut branches = Vec::new();
        let commit = match std::fs::read_to_string(dir.join(META_FILE)) {
            Ok(t) => {
                let v: serde_json::Value = serde_json::from_str(&t)
                    .with_context(|| format!("{}", dir.join(META_FILE).display()))?;
                if let Some(b) = v["branches"].as_array() {
                    branches = b
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_string))
                        .collect();
                }
                v["commit"].as_str().unwrap_or_default().to_string()
            }
            Err(_) => hex::encode(&listing_digest.finalize()[..20]),
        };
        Ok((
            Repo {
                id: id.to_string(),
                commit,
                files,
            },
            branches,
        ))
    }

    fn hashes_of(&self, disk: &Path, size: u64, mtime: SystemTime) -> Result<Hashes> {
        let key = (disk.to_path_buf(), size, mtime);
        if let Some(h) = self.hashes.lock().unwrap().get(&key) {
            return Ok(h.clone());
        }
        let bytes = std::fs::read(disk)?;
        let h = Hashes {
            sha256: crate::util::sha256_hex(&bytes),
            sha1: crate::util::git_blob_sha1(&bytes),
        };
        self.hashes.lock().unwrap().insert(key, h.clone());
        Ok(h)
    }
}

/// The git-lfs pointer file for a blob.
pub fn lfs_pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("{}", dir.display()))? {
        let e = e?;
        let p = e.path();
        let rel = p
            .strip_prefix(base)?
            .to_string_lossy()
            .replace(std::path::MAIN_SEPARATOR, "/");
        if rel == META_FILE || rel == ".git" {
            continue;
        }
        if e.file_type()?.is_dir() {
            walk(base, &p, out)?;
        } else {
            out.push(rel);
        }
    }
    Ok(())
}

fn lfs_patterns(dir: &Path) -> Vec<globset::GlobMatcher> {
    let Ok(text) = std::fs::read_to_string(dir.join(".gitattributes")) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| l.contains("filter=lfs"))
        .filter_map(|l| l.split_whitespace().next())
        .filter_map(|p| globset::Glob::new(p).ok())
        .map(|g| g.compile_matcher())
        .collect()
}
