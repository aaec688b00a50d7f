//! Why this file: the storage layer's `DLM_DATA_*` variables are read here and nowhere else
//! (issue 56's rule: environment and tuning decided in settings/tuning files only).

use std::path::PathBuf;

/// `DLM_DATA_LEASE_SECS`: seconds a bucket lease lives without renewal (default 60, at least 1).
pub fn lease_ttl_secs() -> u64 {
    std::env::var("DLM_DATA_LEASE_SECS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(60)
}

/// `DLM_DATA_STAGING`: where bucket outputs' local staging copies live, when set.
pub fn staging_base() -> Option<PathBuf> {
    std::env::var_os("DLM_DATA_STAGING").map(PathBuf::from)
}

/// `DLM_DATA_KEEP_STAGING=1`: keep the staging copy after a commit.
pub fn keep_staging() -> bool {
    std::env::var("DLM_DATA_KEEP_STAGING").is_ok_and(|v| v == "1")
}
