//! `download.log`: one JSON object per line per file fetched (a file found in the cache,
//! verified, is logged once: an unchanged nightly fetch adds no line) — what an auditor reads
//! to tie every cached byte to a repo, commit, URL and checksum. Appended line by line (a
//! killed run leaves only whole lines for the files it finished); never holds a token: each
//! line passes through [`crate::secret::redact`] before it is written.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::manifest::Role;

/// One line of the log (field names are a cross-stage contract).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LogRecord {
    /// RFC3339 UTC.
    pub time: String,
    pub source: String,
    pub role: Role,
    pub repo: String,
    /// The revision asked for in the manifest.
    pub revision: String,
    pub commit: String,
    pub path: String,
    /// The Hub resolve URL (no token, no CDN signature).
    pub url: String,
    pub bytes: u64,
    pub sha256: String,
    /// sha256 checked against the LFS oid (or git blob sha1 for regular files).
    pub verified: bool,
    /// Already in the cache, not downloaded again.
    pub cached: bool,
    pub attempts: u32,
    pub seconds: f64,
    /// Bytes actually transferred this run (less than `bytes` after a resume).
    #[serde(default)]
    pub downloaded: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An append-only JSONL writer.
pub struct DownloadLog {
    path: PathBuf,
    file: Mutex<File>,
    /// (repo, commit, path, sha256) of every verified line already in the log.
    logged: HashSet<(String, String, String, String)>,
}

/// The verified files a log already records (unreadable lines are skipped: the audit names
/// them).
fn verified_lines(path: &Path) -> HashSet<(String, String, String, String)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return HashSet::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<LogRecord>(l).ok())
        .filter(|r| r.verified && r.error.is_none())
        .map(|r| (r.repo, r.commit, r.path, r.sha256))
        .collect()
}

impl DownloadLog {
    pub fn open(path: &Path) -> Result<DownloadLog> {
        if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("opening download log {}", path.display()))?;
        Ok(DownloadLog {
            path: path.to_path_buf(),
            file: Mutex::new(file),
            logged: verified_lines(path),
        })
    }

    /// [`Self::append`], except for a file found in the cache, verified, that the log already
    /// records with this sha256: a rerun that downloads nothing adds no line (the log stays
    /// one line per file per download, not per night). Returns whether it wrote.
    pub fn append_new(&self, rec: &LogRecord) -> Result<bool> {
        let key = (
            rec.repo.clone(),
            rec.commit.clone(),
            rec.path.clone(),
            rec.sha256.clone(),
        );
        if rec.cached && rec.verified && rec.error.is_none() && self.logged.contains(&key) {
            return Ok(false);
        }
        self.append(rec)?;
        Ok(true)
    }

    /// Append one record, redacted, as a single `write` of a whole line, then fsync.
    pub fn append<T: Serialize>(&self, rec: &T) -> Result<()> {
        let mut line = crate::secret::redact(&serde_json::to_string(rec)?).into_owned();
        line.push('\n');
        let mut f = self.file.lock().unwrap();
        f.write_all(line.as_bytes())
            .and_then(|_| f.sync_data())
            .with_context(|| format!("writing {}", self.path.display()))
    }
}

/// `<log>.part-00001-of-00004`: the log a sharded worker writes.
pub fn part_path(log: &Path, index: usize, count: usize) -> PathBuf {
    let name = log
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "download.log".into());
    log.with_file_name(format!("{name}.part-{index:05}-of-{count:05}"))
}

/// Current time as RFC3339 UTC with milliseconds, e.g. `2026-12-02T10:42:14.123Z`.
pub fn now_rfc3339() -> String {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_millis())
}

fn rfc3339(secs: i64, millis: u32) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_format() {
        assert_eq!(rfc3339(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_709_251_199, 5), "2024-02-29T23:59:59.005Z");
        assert_eq!(rfc3339(1_798_761_600, 0), "2027-01-01T00:00:00.000Z");
    }

    #[test]
    fn part_names() {
        assert_eq!(
            part_path(Path::new("/c/download.log"), 1, 4),
            PathBuf::from("/c/download.log.part-00001-of-00004")
        );
    }
}
