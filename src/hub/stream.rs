//! `pack --stream`: Hub files read in place by HTTP Range through [`HubClient`] (same
//! redirect, auth and retry code as `fetch`), never downloaded whole. Parquet goes through
//! [`RemoteFile`] as a parquet `AsyncFileReader` (footer, then only the projected column
//! chunks of each row group); JSON/JSONL through [`RangeRead`], a sequential reader of
//! bounded chunks. Each file's first Hub answer is checked against the lock/listing (size,
//! etag = LFS sha256 or git blob sha1), and [`Streamed::log_record`] gives the download.log
//! line (`"streamed": true`, bytes actually read, `"verified": false` with a note: a file's
//! sha256 cannot be checked without reading all of it).

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{bail, Result};
use bytes::Bytes;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};
use serde::Serialize;

use super::client::HubClient;
use super::log::{now_rfc3339, LogRecord};
use crate::manifest::Role;

/// Bytes per request for sequential (JSON) reads.
pub const CHUNK: u64 = 8 << 20;
/// Footer prefetch: one request covers the footer of typical files (a larger footer costs
/// one more request). The fetched tail is kept and serves later reads that fall inside it.
const FOOTER_HINT: usize = 16 << 10;

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
    pub bytes: AtomicU64,
    pub requests: AtomicU64,
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
        let bytes = self.bytes.load(Ordering::Relaxed);
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
            requests: self.requests.load(Ordering::Relaxed),
            note: NOTE,
        }
    }
}

/// One Hub file read by range.
#[derive(Clone)]
pub struct RemoteFile {
    pub client: Arc<HubClient>,
    pub spec: Arc<RemoteSpec>,
    pub stats: Arc<Streamed>,
    /// The file's last bytes (offset, bytes) once read (at most the footer prefetch).
    tail: Option<(u64, Bytes)>,
}

impl RemoteFile {
    pub fn new(client: Arc<HubClient>, spec: RemoteSpec) -> RemoteFile {
        RemoteFile {
            client,
            spec: Arc::new(spec),
            stats: Arc::default(),
            tail: None,
        }
    }

    /// Bytes `[start, end)`, retried; the first answer is checked against the plan.
    pub async fn range(&self, start: u64, end: u64) -> Result<Bytes> {
        let s = &self.spec;
        let end = end.min(s.size);
        let (b, meta, attempts) = self
            .client
            .read_range(&s.repo, &s.commit, &s.path, start, end)
            .await?;
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        self.stats
            .bytes
            .fetch_add(b.len() as u64, Ordering::Relaxed);
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

fn perr(e: anyhow::Error) -> ParquetError {
    ParquetError::General(format!("{e:#}"))
}

impl AsyncFileReader for RemoteFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            if let Some((off, t)) = self.tail.clone() {
                let tail_end = off + t.len() as u64;
                if range.start >= off && range.end <= tail_end {
                    return Ok(t.slice((range.start - off) as usize..(range.end - off) as usize));
                }
                if range.start < off && range.end > off && range.end <= tail_end {
                    // Only the part before the tail goes over the network.
                    let head = self.range(range.start, off).await.map_err(perr)?;
                    let mut v = Vec::with_capacity((range.end - range.start) as usize);
                    v.extend_from_slice(&head);
                    v.extend_from_slice(&t[..(range.end - off) as usize]);
                    return Ok(Bytes::from(v));
                }
            }
            let b = self.range(range.start, range.end).await.map_err(perr)?;
            if range.end >= self.spec.size && b.len() <= FOOTER_HINT && self.tail.is_none() {
                self.tail = Some((range.start, b.clone()));
            }
            Ok(b)
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move {
            let size = self.spec.size;
            let md = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_HINT))
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(md))
        })
    }
}

/// A `Read` over a remote file in [`CHUNK`]-sized ranges (one chunk in memory at a time).
pub struct RangeRead<'a> {
    file: &'a RemoteFile,
    rt: &'a tokio::runtime::Runtime,
    pos: u64,
    buf: Bytes,
}

impl<'a> RangeRead<'a> {
    pub fn new(file: &'a RemoteFile, rt: &'a tokio::runtime::Runtime) -> Self {
        RangeRead {
            file,
            rt,
            pos: 0,
            buf: Bytes::new(),
        }
    }
}

impl Read for RangeRead<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            let size = self.file.spec.size;
            if self.pos >= size {
                return Ok(0);
            }
            let end = (self.pos + CHUNK).min(size);
            self.buf = self
                .rt
                .block_on(self.file.range(self.pos, end))
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            self.pos = end;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        let _ = self.buf.split_to(n);
        Ok(n)
    }
}
