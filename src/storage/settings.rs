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

/// The object-store client's retry policy: `DLM_DATA_S3_RETRIES` attempts after the first
/// (default 10) within `DLM_DATA_S3_RETRY_SECS` seconds of the first (default 180), with the
/// crate's exponential backoff and jitter. Applies to S3, GCS and Azure alike.
pub fn retry() -> object_store::RetryConfig {
    let num = |k: &str| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let mut r = object_store::RetryConfig::default();
    if let Some(n) = num("DLM_DATA_S3_RETRIES") {
        r.max_retries = n as usize;
    }
    if let Some(s) = num("DLM_DATA_S3_RETRY_SECS") {
        r.retry_timeout = std::time::Duration::from_secs(s);
    }
    r
}

/// `DLM_DATA_PART_BYTES` (`16MiB` by default; S3 wants ≥ 5 MiB but for the last part): files
/// above it go up as multipart uploads of parts this size. An unreadable value is an error
/// naming the variable.
pub fn part_bytes() -> anyhow::Result<usize> {
    match std::env::var("DLM_DATA_PART_BYTES") {
        Err(_) => Ok(16 << 20),
        Ok(v) => crate::sizes::parse_bytes(&v)
            .ok()
            .filter(|&b| b >= 1)
            .map(|b| b as usize)
            .ok_or_else(|| {
                crate::error::usage(format!(
                    "DLM_DATA_PART_BYTES={v}: not a size (e.g. 16MiB, 8388608)"
                ))
            }),
    }
}

/// `DLM_DATA_UPLOADS`: files uploaded at once by a bucket output's commit (default 8, 1 to
/// 64; each file above the part size has up to 4 parts in flight besides).
pub fn uploads_in_flight() -> usize {
    std::env::var("DLM_DATA_UPLOADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .map(|n| n.clamp(1, 64))
        .unwrap_or(8)
}
