//! `pack --stream` and `pack --input hf://…`: Hub files read in place by HTTP Range through
//! [`HubClient`] (same redirect, auth and retry code as `fetch`), never downloaded whole.
//! [`HubSource`] is the Hub's [`RangeSource`]: the generic [`RangedFile`]
//! ([`crate::sources::ranged`]) reads parquet through it as an `AsyncFileReader` (footer,
//! then only the projected column chunks) and JSON/JSONL as bounded sequential chunks. Each
//! file's first Hub answer is checked against the lock/listing (size, etag = LFS sha256 or
//! git blob sha1), and [`Streamed::log_record`] gives the download.log line
//! (`"streamed": true`, bytes actually read, `"verified": false` with a note: a file's sha256
//! cannot be checked without reading all of it).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Result};
use bytes::Bytes;
use futures::future::BoxFuture;
use serde::Serialize;

use super::client::HubClient;
use super::log::{now_rfc3339, LogRecord};
use crate::manifest::Role;
use crate::sources::ranged::{RangeSource, RangedFile, ReadCount};

pub const NOTE: &str = "streamed by HTTP Range: only the bytes needed were read, so the file's sha256 was not verified; size and etag were checked against the lock/listing";

/// Identity of one remote file, as planned (lock or listing).
#[derive(Debug, Clone)]
pub struct RemoteSpec {
    pub source: String,
    pub repo: String,
    pub revision: String,
    pub commit: String,
    pub path: String,
    pub size: u64,
    /// LFS sha256 or git blob sha1, when known.
    pub etag: Option<String>,
}

/// Counters of one streamed file.
#[derive(Debug, Default)]
pub struct Streamed {
    pub count: Arc<ReadCount>,
    pub attempts: AtomicU32,
    checked: Mutex<bool>,
}

/// A download.log line for a streamed file (the contract's fields plus `streamed`, `note`).
#[derive(Serialize)]
pub struct StreamRecord {
    #[serde(flatten)]
    pub base: LogRecord,
    pub streamed: bool,
    pub requests: u64,
    pub note: &'static str,
}

impl Streamed {
    pub fn log_record(
        &self,
        spec: &RemoteSpec,
        url: String,
        t0: Instant,
        error: Option<String>,
    ) -> StreamRecord {
        let bytes = self.count.bytes();
        StreamRecord {
            base: LogRecord {
                time: now_rfc3339(),
                source: spec.source.clone(),
                role: Role::Train,
                repo: spec.repo.clone(),
                revision: spec.revision.clone(),
                commit: spec.commit.clone(),
                path: spec.path.clone(),
                url,
                bytes,
                sha256: String::new(),
                verified: false,
                cached: false,
                attempts: self.attempts.load(Ordering::Relaxed),
                seconds: t0.elapsed().as_secs_f64(),
                downloaded: bytes,
                error,
            },
            streamed: true,
            requests: self.count.requests(),
            note: NOTE,
        }
    }
}

/// One Hub file as a [`RangeSource`]: retried ranges, the first answer checked against the
/// plan.
pub struct HubSource {
    pub client: Arc<HubClient>,
    pub spec: Arc<RemoteSpec>,
    pub stats: Arc<Streamed>,
}

impl HubSource {
    /// `spec` read by range through `client`: the file and its counters.
    pub fn open(client: Arc<HubClient>, spec: RemoteSpec) -> (RangedFile, Arc<Streamed>) {
        let stats = Arc::new(Streamed::default());
        let size = spec.size;
        let src = HubSource {
            client,
            spec: Arc::new(spec),
            stats: stats.clone(),
        };
        (
            RangedFile::new(Arc::new(src), size, stats.count.clone()),
            stats,
        )
    }

    async fn range(&self, start: u64, end: u64) -> Result<Bytes> {
        let s = &self.spec;
        let (b, meta, attempts) = self
            .client
            .read_range(&s.repo, &s.commit, &s.path, start, end)
            .await?;
        self.stats.attempts.fetch_add(attempts, Ordering::Relaxed);
        let mut checked = self.stats.checked.lock().unwrap();
        if !*checked && !b.is_empty() {
            if let Some(size) = meta.size.filter(|&n| n != s.size) {
                bail!(
                    "{}@{}/{}: the Hub reports {size} bytes, the lock/listing {}: the file changed; re-run `dlm-data fetch` to re-lock",
                    s.repo, s.commit, s.path, s.size
                );
            }
            if let (Some(want), Some(got)) = (&s.etag, &meta.etag) {
                if !want.is_empty() && !got.eq_ignore_ascii_case(want) {
                    bail!(
                        "{}@{}/{}: the Hub's etag {got} differs from the lock/listing's {want}: the file changed; re-run `dlm-data fetch` to re-lock",
                        s.repo, s.commit, s.path
                    );
                }
            }
            *checked = true;
        }
        Ok(b)
    }
}

impl RangeSource for HubSource {
    fn fetch(&self, start: u64, end: u64) -> BoxFuture<'_, Result<Bytes>> {
        Box::pin(self.range(start, end))
    }
}
