//! `pack --stream`: the Hub side of a pack run — resolve the manifest's files on the Hub when
//! there is no lock (same listing and split policy as `fetch`), read each unit by HTTP Range
//! ([`crate::hub::stream`]) and append one download.log line per streamed file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::plan::Unit;
use crate::hub::client::HubClient;
use crate::hub::log::{self, DownloadLog};
use crate::hub::plan as hplan;
use crate::hub::retry::RetryPolicy;
use crate::hub::stream::{RangeRead, RemoteFile, RemoteSpec};
use crate::manifest::{Format, Lock, Manifest};
use crate::sources::records::Layout;
use crate::sources::{self, Sink};
use crate::worker::WorkerSlice;

/// The runtime, client and log shared by the planner and the reader thread.
pub struct Streaming {
    pub rt: tokio::runtime::Runtime,
    pub client: Arc<HubClient>,
    pub log: DownloadLog,
    pub log_path: PathBuf,
}

impl Streaming {
    /// The runtime and client (retrying as `retry` says) and the download log (`log`, else the
    /// cache's; a worker's own part of it), from the run's settings.
    pub fn new(
        retry: RetryPolicy,
        cache: &crate::hub::cache::Cache,
        log: Option<&std::path::Path>,
        worker: WorkerSlice,
    ) -> Result<Streaming> {
        if crate::hub::offline() {
            return Err(crate::error::usage(
                "--stream reads from the Hub, but HF_HUB_OFFLINE=1: fetch first and pack from the cache",
            ));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let client = Arc::new(HubClient::from_env(retry)?);
        let mut log_path = cache.log_path(log);
        if !worker.is_whole() {
            log_path = log::part_path(&log_path, worker.index, worker.count);
        }
        let log = DownloadLog::open(&log_path)?;
        Ok(Streaming {
            rt,
            client,
            log,
            log_path,
        })
    }

    /// Without a lock: every source resolved on the Hub (revision → commit, listing,
    /// config/split → files) and the split policy applied to the files, as `fetch` does.
    pub fn list(&self, m: &Manifest) -> Result<Lock> {
        let plans = self.rt.block_on(futures::future::join_all(
            m.sources
                .iter()
                .filter(|s| !s.is_local())
                .map(|s| hplan::plan_source(&self.client, s, None)),
        ));
        let mut lock = Lock {
            version: 1,
            sources: Vec::new(),
        };
        for s in m.sources.iter().filter(|s| s.is_local()) {
            lock.sources.push(crate::sources::local::lock_source(m, s)?);
        }
        for p in plans {
            let p = p?;
            let names: Vec<String> = p.files.iter().map(|f| f.path.clone()).collect();
            if let Some(e) = hplan::policy_check(&p.source, &names) {
                return Err(e);
            }
            // Not fetched: an LFS file's sha256 is its oid, a regular file's is unknown.
            let files = p
                .files
                .iter()
                .map(|t| t.locked(t.lfs_sha256.clone().unwrap_or_default()))
                .collect();
            lock.sources.push(p.locked(files));
        }
        Ok(lock)
    }

    /// Read one unit's rows from `start_row` on; logs the file whatever the outcome.
    pub fn read(
        &self,
        u: &Unit,
        spec: &RemoteSpec,
        start_row: u64,
        row_max: crate::bounded::Bound,
        sink: &mut Sink,
    ) -> Result<()> {
        let t0 = Instant::now();
        let f = RemoteFile::new(self.client.clone(), spec.clone());
        let (name, tpl) = (u.file.as_str(), &u.source.tpl);
        let r = match u.format {
            Format::Parquet => {
                sources::parquet::read_async(&self.rt, f.clone(), name, tpl, start_row, sink)
            }
            Format::Text => Err(crate::error::usage(format!(
                "{name}: `.txt` sources are read from the cache, not with --stream"
            ))),
            Format::Json | Format::Jsonl => sources::records::rendered(
                RangeRead::new(&f, &self.rt),
                name,
                match u.format {
                    Format::Json => Layout::Array,
                    _ => Layout::Lines,
                },
                row_max,
                tpl,
                start_row,
                sink,
            ),
        };
        let r = match r {
            Err(e) if sources::is_stop(&e) => Ok(()),
            r => r,
        };
        let url = self
            .client
            .resolve_url(&spec.repo, &spec.commit, &spec.path);
        let rec = f
            .stats
            .log_record(spec, url, t0, r.as_ref().err().map(|e| format!("{e:#}")));
        let logged = self
            .log
            .append(&rec)
            .with_context(|| format!("download log {}", self.log_path.display()));
        r.and(logged)
    }
}
