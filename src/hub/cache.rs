//! The local cache in huggingface_hub's layout, so Python tools share it:
//! `{cache}/datasets--{owner}--{name}/{blobs/<sha256 or oid>, snapshots/<commit>/<path>, refs/<rev>}`.
//! Eval-reference sources live in a separate root (`{cache}/eval-reference/...`) so they can
//! never be picked up as training input.

use std::path::{Path, PathBuf};

use crate::manifest::Role;

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
        format!("datasets--{}", repo.replace('/', "--"))
    }

    pub fn repo_dir(&self, role: Role, repo: &str) -> PathBuf {
        self.role_root(role).join(Self::repo_folder(repo))
    }

    pub fn blob_path(&self, role: Role, repo: &str, etag: &str) -> PathBuf {
        self.repo_dir(role, repo).join("blobs").join(etag)
    }

    /// Where a file of a pinned commit lives once fetched (a symlink to its blob).
    pub fn snapshot_path(&self, role: Role, repo: &str, commit: &str, path: &str) -> PathBuf {
        self.repo_dir(role, repo)
            .join("snapshots")
            .join(commit)
            .join(path)
    }

    pub fn ref_path(&self, role: Role, repo: &str, revision: &str) -> PathBuf {
        self.repo_dir(role, repo).join("refs").join(revision)
    }

    /// Default download log: `<cache>/download.log`.
    pub fn default_log(&self) -> PathBuf {
        self.root.join("download.log")
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
}
