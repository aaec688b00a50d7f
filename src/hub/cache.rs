//! The local cache in huggingface_hub's layout, so Python tools share it:
//! `{cache}/datasets--{owner}--{name}/{blobs/<sha256 or oid>, snapshots/<commit>/<path>, refs/<rev>}`
//! (model repos: `{cache}/models--{owner}--{name}/...`).
//! Eval-reference sources live in a separate root (`{cache}/eval-reference/...`) so they can
//! never be picked up as training input.
//!
//! Every path `fetch` writes, links or removes comes from a checked builder here: blob and
//! lock names must be sha256 (64 hex) or git sha1 (40 hex) digests, snapshot commits 40 hex,
//! and each result is checked by [`crate::util::path_within`] to stay inside its root. The
//! unchecked [`Cache::snapshot_path`] is for readers of an already verified lock.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::manifest::Role;

use super::names::{check_repo_path, shown, RepoKind};
use crate::digest::{HexDigest, SHA1_HEX};

/// A blob or lock name: a sha256 (64 hex) or git sha1 (40 hex) digest, named lowercase
/// whatever case it was given in ([`crate::digest`]).
pub fn check_blob_name(name: &str) -> Result<HexDigest> {
    HexDigest::parse_sha256_or_sha1(name).ok_or_else(|| {
        anyhow::anyhow!(
            "refusing the blob name {}: not a sha256 or git sha1 hex digest",
            shown(name)
        )
    })
}

/// A commit as a snapshot directory name: 40 hex digits, named lowercase.
pub fn check_commit(commit: &str) -> Result<HexDigest> {
    HexDigest::parse(commit, SHA1_HEX).ok_or_else(|| {
        anyhow::anyhow!(
            "refusing the commit {}: not a 40-hex git commit",
            shown(commit)
        )
    })
}

/// A commit's snapshot directory name: its lowercase digest (anything else as given, for
/// the unchecked readers of [`Cache::snapshot_path`]).
fn commit_dir(commit: &str) -> String {
    HexDigest::parse(commit, SHA1_HEX).map_or_else(|| commit.to_string(), HexDigest::into_string)
}

/// Where a repo lives in the cache: its kind's folder prefix, and (datasets) its role's root.
/// A bare [`Role`] is a dataset of that role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Area {
    pub kind: RepoKind,
    pub role: Role,
}

impl Area {
    /// Model repos: `models--owner--name` in the cache root.
    pub const MODEL: Area = Area {
        kind: RepoKind::Model,
        role: Role::Train,
    };
}

impl From<Role> for Area {
    fn from(role: Role) -> Area {
        Area {
            kind: RepoKind::Dataset,
            role,
        }
    }
}

/// `--cache DIR` of every command that reads the Hub cache (fetch, pack, mcq, decontam,
/// audit): one flag, one help text, one default rule ([`Cache::resolve`]).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct CacheArg {
    /// Cache root (default: HF_HUB_CACHE, else $HF_HOME/hub, else
    /// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub).
    #[arg(id = "cache", long = "cache", value_name = "CACHE")]
    pub dir: Option<PathBuf>,
}

impl CacheArg {
    /// The cache root this flag (or the environment) names.
    pub fn resolve(&self) -> Cache {
        Cache::resolve(self.dir.as_deref())
    }
}

/// `--log FILE`: the download log `fetch` appends to, as fetch, audit and the merge of fetch
/// parts read it (pack `--stream` keeps its own flag: it needs `--stream`).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct LogArg {
    /// JSON-lines download log (default: <cache>/download.log).
    #[arg(id = "log", long = "log", value_name = "LOG")]
    pub file: Option<PathBuf>,
}

/// A cache root.
#[derive(Debug, Clone)]
pub struct Cache {
    pub root: PathBuf,
}

impl Cache {
    /// `--cache DIR`, else `HF_HUB_CACHE`, else `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`,
    /// else `~/.cache/huggingface/hub`.
    pub fn resolve(flag: Option<&Path>) -> Cache {
        Self::resolve_with(flag, |k| std::env::var_os(k).map(PathBuf::from))
    }

    pub fn resolve_with(flag: Option<&Path>, env: impl Fn(&str) -> Option<PathBuf>) -> Cache {
        let root = if let Some(f) = flag {
            f.to_path_buf()
        } else if let Some(p) = env("HF_HUB_CACHE") {
            p
        } else if let Some(h) = env("HF_HOME") {
            h.join("hub")
        } else if let Some(x) = env("XDG_CACHE_HOME") {
            x.join("huggingface").join("hub")
        } else {
            env("HOME")
                .unwrap_or_else(|| PathBuf::from("."))
                .join(".cache")
                .join("huggingface")
                .join("hub")
        };
        Cache { root }
    }

    /// Root for a role: training sources in the cache root, eval references apart.
    pub fn role_root(&self, role: Role) -> PathBuf {
        match role {
            Role::Train => self.root.clone(),
            Role::EvalReference => self.root.join("eval-reference"),
        }
    }

    /// `datasets--owner--name`
    pub fn repo_folder(repo: &str) -> String {
        RepoKind::Dataset.folder(repo)
    }

    /// `<role root>/datasets--owner--name` (or `models--owner--name`).
    pub fn repo_dir(&self, area: impl Into<Area>, repo: &str) -> PathBuf {
        let a = area.into();
        self.role_root(a.role).join(a.kind.folder(repo))
    }

    /// `blobs/<etag>`; refused unless `etag` is a digest and the path stays in the cache.
    pub fn blob_path(&self, area: impl Into<Area>, repo: &str, etag: &str) -> Result<PathBuf> {
        let a = area.into();
        let etag = check_blob_name(etag)?;
        let p = self.repo_dir(a, repo).join("blobs").join(etag.as_str());
        crate::util::path_within(&self.role_root(a.role), &p)?;
        Ok(p)
    }

    /// `.locks/datasets--owner--name/<etag>.lock` (huggingface_hub's filelock), checked like
    /// [`Cache::blob_path`].
    pub fn lock_path(&self, area: impl Into<Area>, repo: &str, etag: &str) -> Result<PathBuf> {
        let a = area.into();
        let etag = check_blob_name(etag)?;
        let root = self.role_root(a.role);
        let p = root
            .join(".locks")
            .join(a.kind.folder(repo))
            .join(format!("{etag}.lock"));
        crate::util::path_within(&root, &p)?;
        Ok(p)
    }

    /// Where a file of a pinned commit lives once fetched (a symlink to its blob). Unchecked:
    /// for reading files of a verified lock; writers use [`Cache::snapshot_link`].
    pub fn snapshot_path(
        &self,
        area: impl Into<Area>,
        repo: &str,
        commit: &str,
        path: &str,
    ) -> PathBuf {
        self.repo_dir(area, repo)
            .join("snapshots")
            .join(commit_dir(commit))
            .join(path)
    }

    /// [`Cache::snapshot_path`] for reading a file a lock names, checked like a listing path:
    /// a 40-hex commit, a repo-relative path with no `..`, absolute or empty component, and
    /// [`Cache::check_resolved`] (a snapshot link or a blob replaced by a link to a file
    /// outside the cache is refused, naming both).
    pub fn locked_file(&self, role: Role, repo: &str, commit: &str, path: &str) -> Result<PathBuf> {
        let p = self.snapshot_link(role, repo, commit, path)?;
        self.check_resolved(role, repo, &p)?;
        Ok(p)
    }

    /// `path` ([`Cache::locked_file`]'s answer) holds the bytes the lock pins (`sha256`): `Err`
    /// naming `what` (`source "x": locked file F`) when it is not in the cache, naming the
    /// file when its bytes differ (a corrupt cache).
    pub fn verify_locked(path: &Path, sha256: &str, what: &str) -> Result<()> {
        let sha = crate::util::sha256_file(path)
            .with_context(|| format!("{what} is not in the cache; run fetch"))?;
        if sha != sha256 {
            bail!(
                "{}: sha256 {sha} does not match the lock ({sha256}); the cache is corrupt, re-run fetch",
                path.display()
            );
        }
        Ok(())
    }

    /// The one symlink rule of the cache, shared by every command that writes or reads it
    /// (fetch, pack, mcq, decontam, audit): a path of a repo's cache entry must resolve,
    /// through every symlink, inside the repo's directory as resolved — or inside its
    /// `blobs/` directory as resolved, so `blobs/` (or the cache root itself) may be a link to
    /// a bigger disk, as huggingface_hub allows. Anything else (a snapshot link or a blob
    /// replaced by a link to a file elsewhere) is refused, naming both paths. A missing path
    /// passes (its reader reports it).
    pub fn check_resolved(&self, area: impl Into<Area>, repo: &str, p: &Path) -> Result<()> {
        let Ok(real) = std::fs::canonicalize(p) else {
            return Ok(());
        };
        let dir = self.repo_dir(area, repo);
        let inside = |d: &Path| std::fs::canonicalize(d).is_ok_and(|d| real.starts_with(d));
        if inside(&dir) || inside(&dir.join("blobs")) {
            return Ok(());
        }
        bail!(
            "refusing {}: it resolves to {}, outside the cache directory {} (and its blobs/, \
             which may itself be a link to another disk)",
            p.display(),
            real.display(),
            dir.display()
        )
    }

    /// [`Cache::snapshot_path`] for writing: a 40-hex commit, a safe repo path, and the result
    /// inside `snapshots/<commit>/`.
    pub fn snapshot_link(
        &self,
        area: impl Into<Area>,
        repo: &str,
        commit: &str,
        path: &str,
    ) -> Result<PathBuf> {
        let a = area.into();
        let commit = check_commit(commit)?;
        check_repo_path(path)?;
        let p = self.snapshot_path(a, repo, commit.as_str(), path);
        let dir = self
            .repo_dir(a, repo)
            .join("snapshots")
            .join(commit.as_str());
        crate::util::path_within(&dir, &p)?;
        Ok(p)
    }

    /// `refs/<revision>`, refused when the revision would leave `refs/`.
    pub fn ref_path(&self, area: impl Into<Area>, repo: &str, revision: &str) -> Result<PathBuf> {
        check_repo_path(revision).map_err(|_| {
            anyhow::anyhow!(
                "refusing the ref name {}: absolute, `..` or empty component",
                shown(revision)
            )
        })?;
        let refs = self.repo_dir(area, repo).join("refs");
        let p = refs.join(revision);
        crate::util::path_within(&refs, &p)?;
        Ok(p)
    }

    /// The download log: `--log` when given, else `<cache>/download.log` (fetch, pack
    /// `--stream`, audit and merge decide it here).
    pub fn log_path(&self, given: Option<&Path>) -> PathBuf {
        given.map_or_else(|| self.root.join("download.log"), Path::to_path_buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let c = Cache {
            root: PathBuf::from("/c"),
        };
        assert_eq!(
            c.snapshot_path(
                Role::Train,
                "allenai/sciq",
                "abc",
                "data/train-00000-of-00001.parquet"
            ),
            PathBuf::from(
                "/c/datasets--allenai--sciq/snapshots/abc/data/train-00000-of-00001.parquet"
            )
        );
        assert!(c
            .repo_dir(Role::EvalReference, "cais/mmlu")
            .starts_with("/c/eval-reference"));
        let r = Cache::resolve_with(None, |k| (k == "HF_HOME").then(|| PathBuf::from("/h")));
        assert_eq!(r.root, PathBuf::from("/h/hub"));
    }

    #[test]
    fn written_names_are_digests_inside_the_cache() {
        let c = Cache {
            root: PathBuf::from("/c"),
        };
        let sha = "ab".repeat(32);
        let oid = "cd".repeat(20);
        assert_eq!(
            c.blob_path(Role::Train, "o/n", &sha).unwrap(),
            PathBuf::from(format!("/c/datasets--o--n/blobs/{sha}"))
        );
        assert_eq!(
            c.lock_path(Role::EvalReference, "o/n", &oid).unwrap(),
            PathBuf::from(format!(
                "/c/eval-reference/.locks/datasets--o--n/{oid}.lock"
            ))
        );
        for bad in [
            "../../../victim",
            "/etc/passwd",
            "",
            "AG".repeat(32).as_str(),
            &format!("{sha}/x"),
            &format!("../{}", "a".repeat(61)),
        ] {
            assert!(c.blob_path(Role::Train, "o/n", bad).is_err(), "{bad}");
            assert!(c.lock_path(Role::Train, "o/n", bad).is_err(), "{bad}");
        }
        assert!(c
            .snapshot_link(Role::Train, "o/n", &oid, "data/x.parquet")
            .is_ok());
        assert!(c
            .snapshot_link(Role::Train, "o/n", "../../x", "data/x.parquet")
            .is_err());
        assert!(c.snapshot_link(Role::Train, "o/n", &oid, "../x").is_err());
        assert!(c.snapshot_link(Role::Train, "o/n", &oid, "/abs").is_err());
        assert!(c
            .ref_path(Role::Train, "o/n", "refs/convert/parquet")
            .is_ok());
        assert!(c.ref_path(Role::Train, "o/n", "../../../../etc/x").is_err());
        assert!(c.ref_path(Role::Train, "o/n", "/etc/x").is_err());
        assert_eq!(
            c.blob_path(Area::MODEL, "openbmb/MiniCPM5-2B", &sha)
                .unwrap(),
            PathBuf::from(format!("/c/models--openbmb--MiniCPM5-2B/blobs/{sha}"))
        );
        assert_eq!(
            c.snapshot_path(Area::MODEL, "o/n", &oid, "config.json"),
            PathBuf::from(format!("/c/models--o--n/snapshots/{oid}/config.json"))
        );
        // Any case in, the lowercase name out: one blob, one lock, one snapshot per digest.
        let (ab, upper) = ("ab".repeat(32), "AB".repeat(32));
        let blob = |d: &str| c.blob_path(Role::Train, "o/n", d).unwrap();
        assert_eq!(blob(&upper), blob(&ab));
        let lock = |d: &str| c.lock_path(Role::Train, "o/n", d).unwrap();
        assert_eq!(lock(&upper), lock(&ab));
        let snap = |d: &str| c.snapshot_link(Role::Train, "o/n", d, "x").unwrap();
        assert_eq!(snap(&oid.to_ascii_uppercase()), snap(&oid));
        let read = |d: &str| c.snapshot_path(Role::Train, "o/n", d, "x");
        assert_eq!(read(&oid.to_ascii_uppercase()), read(&oid));
    }
}
