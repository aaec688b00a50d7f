//! Why a staging directory: the local writers (journal, resume, byte-identical shards) are
//! reused unchanged for a bucket output; each bucket output gets a private local directory of
//! its own that they write into and the mirror uploads from.

use std::path::PathBuf;

use super::location::ObjectUrl;

/// `$DLM_DATA_STAGING` (else `$XDG_CACHE_HOME/dlm-data/staging`, else
/// `~/.cache/dlm-data/staging`) `/` the output's last name `-` 16 hex digits of its URL's
/// sha256: one directory per output URL, owned by dlm-data (a run may clear it).
pub fn dir_for(url: &ObjectUrl) -> PathBuf {
    let base = super::settings::staging_base()
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|c| PathBuf::from(c).join("dlm-data/staging"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/dlm-data/staging"))
        })
        .unwrap_or_else(|| std::env::temp_dir().join("dlm-data-staging"));
    let text = url.to_string();
    let last: String = text
        .rsplit('/')
        .next()
        .unwrap_or("out")
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(64)
        .collect();
    let hash = &crate::util::sha256_hex(text.as_bytes())[..16];
    base.join(format!("{}-{hash}", last.trim_start_matches('.')))
}

/// Whether the staging copy is kept after a commit (`DLM_DATA_KEEP_STAGING=1`).
pub fn keep() -> bool {
    super::settings::keep_staging()
}
