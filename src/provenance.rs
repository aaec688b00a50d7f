//! Where a document came from: source, repo, commit, file, row. Carried from the reader to
//! every output so `audit` can walk back to a locked, verified download.

use serde::{Deserialize, Serialize};

/// The origin of one document or item.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Provenance {
    /// Manifest source name.
    pub source: String,
    pub repo: String,
    pub commit: String,
    /// Repo-relative path of the file.
    pub file: String,
    /// 0-based row (parquet row, JSON array element, JSONL line) within the file.
    pub row: u64,
}
