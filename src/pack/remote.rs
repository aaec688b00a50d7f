//! `pack --stream`: the Hub side of a pack run — resolve the manifest's files on the Hub when
//! there is no lock (same listing and split policy as `fetch`), read each unit by HTTP Range
//! ([`crate::hub::stream`]) and append one download.log line per streamed file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};

use super::plan::Unit;
use crate::hub::client::HubClient;
use crate::hub::log::{self, DownloadLog};
use crate::hub::plan as hplan;
use crate::hub::retry::RetryPolicy;
use crate::hub::stream::{HubSource, RemoteSpec};
use crate::manifest::{Lock, Manifest};
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
                "--stream and hf:// inputs read from the Hub, but HF_HUB_OFFLINE=1: fetch first and pack from the cache",
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

    /// `--input hf://datasets/REPO[@REV]/PATH`: the revision resolved to its commit (what the
    /// units and index.json name), the file PATH names at that commit — or every supported
    /// file under it (a directory) or matching it (a glob), sorted by path — each refused
    /// (exit 2, naming it) when its path is evaluation data, as a manifest source's files are.
    pub fn input_files(&self, h: &crate::storage::HubPath) -> Result<Vec<RemoteSpec>> {
        let shown = |rev: &str, path: &str| format!("hf://datasets/{}@{rev}/{path}", h.repo);
        let rev = h.revision.as_deref().unwrap_or("main");
        let given = match &h.revision {
            Some(r) => shown(r, &h.path),
            None => format!("hf://datasets/{}/{}", h.repo, h.path),
        };
        // The split policy on the path as given, before any request.
        crate::policy::refuse_eval(&h.path, |k| {
            format!(
                "--input {given}: the path names evaluation data ({k:?}); training inputs may not use test/validation/dev data (nothing was read)"
            )
        })?;
        let commit = self.rt.block_on(self.client.commit_of(&h.repo, rev))?;
        let listing = self.rt.block_on(self.client.list_files(&h.repo, &commit))?;
        let known = |p: &str| crate::sources::files::format_of_name(Path::new(p)).is_some();
        let picked: Vec<&crate::hub::client::TreeEntry> = if crate::sources::files::is_glob(&h.path)
        {
            let m = globset::GlobBuilder::new(&h.path)
                .literal_separator(true)
                .build()
                .map_err(|e| crate::error::usage(format!("--input {given}: bad glob: {e}")))?
                .compile_matcher();
            listing.iter().filter(|e| m.is_match(&e.path)).collect()
        } else if let Some(e) = listing.iter().find(|e| e.path == h.path) {
            vec![e]
        } else {
            let dir = format!("{}/", h.path.trim_end_matches('/'));
            listing
                .iter()
                .filter(|e| e.path.starts_with(&dir) && known(&e.path))
                .collect()
        };
        if picked.is_empty() {
            return Err(crate::error::usage(format!(
                "--input {given}: no such file at commit {commit}, and no .parquet, .json, .jsonl or .txt file under it"
            )));
        }
        let bad = crate::policy::eval_files(picked.iter().map(|e| e.path.as_str()));
        if !bad.is_empty() {
            return Err(crate::error::refused(format!(
                "--input {given}: evaluation files selected: {}; training inputs may not use test/validation/dev data (nothing was read)",
                bad.iter()
                    .map(|p| shown(&commit, p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        let mut out = Vec::with_capacity(picked.len());
        for e in picked {
            crate::sources::files::format_of(Path::new(&shown(&commit, &e.path)))?;
            out.push(RemoteSpec {
                source: h.repo.clone(),
                repo: h.repo.clone(),
                revision: rev.to_string(),
                commit: commit.clone(),
                path: e.path.clone(),
                size: e.lfs.as_ref().map_or(e.size, |l| l.size),
                etag: Some(e.lfs.as_ref().map_or(e.oid.clone(), |l| l.oid.clone())),
            });
        }
        Ok(out)
    }

    /// Read one unit's rows from `start_row` on; logs the file whatever the outcome.
    pub fn read(
        &self,
        u: &Unit,
        spec: &RemoteSpec,
        start_row: u64,
        bounds: crate::bounded::ReadBounds,
        decoding: crate::sources::Decoding,
        sink: &mut Sink,
    ) -> Result<()> {
        let t0 = Instant::now();
        let (f, stats) = HubSource::open(self.client.clone(), spec.clone());
        let at = sources::RemoteRows {
            rt: &self.rt,
            file: f,
            name: u.file.as_str(),
            start_row,
        };
        let r = sources::read_remote_rows(at, u.format, bounds, decoding, &u.source.tpl, sink);
        let url = self
            .client
            .resolve_url(&spec.repo, &spec.commit, &spec.path);
        let rec = stats.log_record(spec, url, t0, r.as_ref().err().map(|e| format!("{e:#}")));
        let logged = self
            .log
            .append(&rec)
            .with_context(|| format!("download log {}", self.log_path.display()));
        r.and(logged)
    }
}

/// The sha256 of a Hub file that has no LFS sha256 (a small file kept in git), read whole by
/// range on a runtime of its own (the hasher thread's); `name` in errors.
pub fn hash_hub_file(client: Arc<HubClient>, spec: &RemoteSpec, name: &str) -> Result<String> {
    use sha2::Digest;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let (f, _) = HubSource::open(client, spec.clone());
    let mut r = crate::sources::ranged::RangeRead::new(&f, &rt);
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n =
            std::io::Read::read(&mut r, &mut buf).with_context(|| format!("{name}: reading"))?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(hex::encode(h.finalize()))
}
