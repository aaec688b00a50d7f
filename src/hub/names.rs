//! The small, dependency-free vocabulary of the Hub client and the cache: repo kinds
//! (`datasets` / `models`), repo-path checks (digests: [`crate::digest`]), and how a server-supplied string is
//! shown in an error. A leaf module, so `cache`, `client` and `retry` import it and not each
//! other.

use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// A Hub repository type: where its API, resolve URLs and cache folders live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RepoKind {
    #[default]
    Dataset,
    Model,
}

impl RepoKind {
    /// The API's plural: `/api/datasets/...`, `/api/models/...`.
    pub fn api_plural(self) -> &'static str {
        match self {
            RepoKind::Dataset => "datasets",
            RepoKind::Model => "models",
        }
    }

    /// The resolve URL's prefix: `{E}/datasets/{repo}/resolve/...`, `{E}/{repo}/resolve/...`.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoKind::Dataset => "datasets/",
            RepoKind::Model => "",
        }
    }

    /// The cache folder: `datasets--owner--name`, `models--owner--name` (huggingface_hub).
    pub fn folder(self, repo: &str) -> String {
        format!("{}--{}", self.api_plural(), repo.replace('/', "--"))
    }

    pub fn is_dataset(&self) -> bool {
        *self == RepoKind::Dataset
    }
}

/// Reject listed paths that could escape the cache.
pub fn check_repo_path(path: &str) -> Result<()> {
    if path.is_empty()
        || path.starts_with('/')
        || path.starts_with('\\')
        || path.contains('\0')
        || path.contains('\\')
        || path
            .split('/')
            .any(|c| c == ".." || c == "." || c.is_empty())
        || (path.len() > 1 && path.as_bytes()[1] == b':')
    {
        bail!("unsafe path {path:?} in the Hub's listing (absolute, `..` or empty component): refusing the listing");
    }
    Ok(())
}

/// A server-supplied string for an error message: quoted, at most 120 characters.
pub fn shown(s: &str) -> String {
    if s.chars().count() <= 120 {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(120).collect();
        format!("{head:?}... ({} bytes)", s.len())
    }
}

/// A server's message for an error line: one line, at most 300 characters.
pub fn clip(s: &str) -> String {
    let one: String = s
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one.chars().count() <= 300 {
        one
    } else {
        let head: String = one.chars().take(300).collect();
        format!("{head}... ({} bytes)", s.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_paths() {
        assert_eq!(
            RepoKind::Model.folder("openbmb/MiniCPM5-2B"),
            "models--openbmb--MiniCPM5-2B"
        );
        assert_eq!(
            RepoKind::Dataset.folder("allenai/sciq"),
            "datasets--allenai--sciq"
        );
        assert!(check_repo_path("data/train-00000-of-00001.parquet").is_ok());
        for bad in ["/etc/passwd", "data/../../x", "..", "a//b", "C:/x", "a\\b"] {
            assert!(check_repo_path(bad).is_err(), "{bad}");
        }
        assert_eq!(
            shown(&"x".repeat(200)).len(),
            122 + " (200 bytes)".len() + 3
        );
        assert_eq!(clip("a\nb"), "a b");
    }
}
