//! Downloading one file into the cache, verifiably and resumably.
//!
//! Bytes go to `blobs/<etag>.incomplete`. Small files (and `--jobs 1`) stream sequentially and
//! resume from the partial file's length with `Range` (starting over when the server answers
//! 200); large files are split into ranged chunks fetched in parallel, their progress kept in
//! `<blob>.incomplete.parts` so a killed run resumes every chunk where it stopped. The
//! sha256 (LFS oid) or git blob sha1 (regular files) is checked before the rename into
//! `blobs/`; then the `snapshots/<commit>/<path>` symlink is (re)made. Every one of these
//! paths comes from the checked builders of [`Cache`] (digest names, inside the cache).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::sync::Semaphore;

use super::cache::{Area, Cache};
use super::client::HubClient;
use super::names::RepoKind;
use super::progress::Progress;
use super::retry::transient;
use super::stall::RateGuard;
use crate::manifest::{LockedFile, Role};

/// One file to fetch.
#[derive(Debug, Clone)]
pub struct FileTask {
    pub source: String,
    /// A dataset's or a model's file.
    pub kind: RepoKind,
    pub role: Role,
    pub repo: String,
    pub revision: String,
    pub commit: String,
    pub path: String,
    pub size: u64,
    /// sha256 for LFS files (the LFS oid).
    pub lfs_sha256: Option<String>,
    /// git blob sha1 (regular files); for LFS files the pointer's oid.
    pub git_oid: String,
}

impl FileTask {
    /// The file's lock entry with its verified `sha256`; a regular file's git oid is kept
    /// (an LFS file is named by its sha256 alone).
    pub fn locked(&self, sha256: String) -> LockedFile {
        LockedFile {
            path: self.path.clone(),
            size: self.size,
            sha256,
            git_oid: self.lfs_sha256.is_none().then(|| self.git_oid.clone()),
        }
    }

    /// The blob name in the cache: sha256 for LFS files, git sha1 otherwise (huggingface_hub).
    pub fn etag(&self) -> &str {
        self.lfs_sha256.as_deref().unwrap_or(&self.git_oid)
    }

    /// Where the file lives in the cache.
    pub fn area(&self) -> Area {
        Area {
            kind: self.kind,
            role: self.role,
        }
    }
}

/// What happened to one file.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub sha256: String,
    pub downloaded: u64,
    pub attempts: u32,
    pub cached: bool,
    pub seconds: f64,
}

/// Shared download machinery for one fetch run.
pub struct Downloader {
    pub client: Arc<HubClient>,
    /// The same client for model repos.
    pub model_client: Arc<HubClient>,
    pub cache: Cache,
    /// Concurrent transfers (files and chunks together).
    pub sem: Arc<Semaphore>,
    pub jobs: usize,
    /// Chunk size for parallel ranged downloads.
    pub chunk: u64,
    pub progress: Progress,
    blob_locks: Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>,
    /// `blobs/` directories already swept of dead processes' temp files this run.
    swept: Mutex<std::collections::HashSet<PathBuf>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Parts {
    size: u64,
    etag: String,
    chunk: u64,
    /// Bytes done from the start of each chunk.
    done: Vec<u64>,
}

/// Most ranged chunks of one file (bounds the progress record of a hostile size).
const MAX_CHUNKS: u64 = 1 << 16;

fn parts_path(inc: &Path) -> PathBuf {
    let mut s = inc.as_os_str().to_owned();
    s.push(".parts");
    PathBuf::from(s)
}

impl Downloader {
    pub fn new(client: Arc<HubClient>, cache: Cache, jobs: usize, chunk: u64) -> Downloader {
        Downloader {
            model_client: Arc::new(client.with_kind(RepoKind::Model)),
            client,
            cache,
            sem: Arc::new(Semaphore::new(jobs.max(1))),
            jobs: jobs.max(1),
            chunk: chunk.max(1 << 20),
            progress: Progress::new(),
            blob_locks: Mutex::new(HashMap::new()),
            swept: Mutex::new(Default::default()),
        }
    }

    /// Plain progress lines (off a terminal) over the plan's `total` bytes.
    pub fn expect_bytes(mut self, total: u64) -> Downloader {
        self.progress = Progress::new().with_total("fetch", total);
        self
    }

    /// The client for `t`'s repo kind.
    pub fn client_for(&self, kind: RepoKind) -> &Arc<HubClient> {
        match kind {
            RepoKind::Dataset => &self.client,
            RepoKind::Model => &self.model_client,
        }
    }

    /// Fetch `t` into the cache (or find it there, re-verified), link its snapshot path.
    pub async fn fetch(&self, t: &FileTask) -> Result<Outcome> {
        let t0 = Instant::now();
        let blob = self
            .cache
            .blob_path(t.area(), &t.repo, t.etag())
            .with_context(|| format!("{}: {}", t.repo, t.path))?;
        let lock = self
            .blob_locks
            .lock()
            .unwrap()
            .entry(blob.clone())
            .or_default()
            .clone();
        let _guard = lock.lock().await;
        // Across processes (Slurm workers, a second fetch on the same cache): the same
        // `.locks/` flock huggingface_hub's filelock takes, so Python tools interoperate too.
        let _flock = self.flock(t).await?;
        let (t2, b2) = (t.clone(), blob.clone());
        if let Some(sha) = tokio::task::spawn_blocking(move || verify_existing(&t2, &b2)).await?? {
            link_snapshot(&self.cache, t, &blob)?;
            return Ok(Outcome {
                sha256: sha,
                downloaded: 0,
                attempts: 0,
                cached: true,
                seconds: t0.elapsed().as_secs_f64(),
            });
        }
        std::fs::create_dir_all(blob.parent().unwrap())
            .with_context(|| format!("creating {}", blob.parent().unwrap().display()))?;
        let blobs = blob.parent().unwrap().to_path_buf();
        if self.swept.lock().unwrap().insert(blobs.clone()) {
            // Temp files (`.NAME.tmp-PID`) a killed fetch left here; live writers' stay.
            crate::util::sweep_dead_temps(&blobs, |_| true);
        }
        let inc = PathBuf::from(format!("{}.incomplete", blob.display()));
        // Nothing in blobs/ is followed out of the cache: a link where a partial download
        // (or its progress record) belongs is removed, never written through.
        unlink_if_link(&inc)?;
        unlink_if_link(&parts_path(&inc))?;
        let downloaded = Arc::new(AtomicU64::new(0));
        let bar = self.progress.bar(&format!("{}/{}", t.repo, t.path), t.size);
        let mut attempt = 0u32;
        let sha = loop {
            attempt += 1;
            let r = self.attempt(t, &inc, &downloaded, &bar).await;
            let err = match r {
                Ok(()) => match blocking_verify(t, &inc).await {
                    Ok(sha) => break sha,
                    Err(e) => {
                        let _ = std::fs::remove_file(&inc);
                        let _ = std::fs::remove_file(parts_path(&inc));
                        bar.set_position(0);
                        transient(format!("{e:#}"))
                    }
                },
                Err(e) => e,
            };
            if let Err(e) = self.client.backoff_or_fail(attempt, err).await {
                bar.abandon();
                return Err(e.context(format!(
                    "{}@{}: {}",
                    t.repo,
                    &t.commit[..8.min(t.commit.len())],
                    t.path
                )));
            }
        };
        crate::util::commit_rename(&inc, &blob)?;
        let _ = std::fs::remove_file(parts_path(&inc));
        link_snapshot(&self.cache, t, &blob)?;
        bar.finish();
        Ok(Outcome {
            sha256: sha,
            downloaded: downloaded.load(Ordering::SeqCst),
            attempts: attempt,
            cached: false,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }

    /// `<root>/.locks/datasets--owner--name/<etag>.lock`, held (flock) until dropped.
    async fn flock(&self, t: &FileTask) -> Result<File> {
        use std::os::fd::AsRawFd;
        let p = self.cache.lock_path(t.area(), &t.repo, t.etag())?;
        std::fs::create_dir_all(p.parent().unwrap())
            .with_context(|| format!("creating {}", p.parent().unwrap().display()))?;
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&p)
            .with_context(|| format!("opening lock {}", p.display()))?;
        tokio::task::spawn_blocking(move || {
            // SAFETY: flock on a descriptor we own; blocks until the lock is ours.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) };
            if rc == 0 {
                Ok(f)
            } else {
                Err(anyhow!(
                    "flock {}: {}",
                    p.display(),
                    std::io::Error::last_os_error()
                ))
            }
        })
        .await?
    }

    /// One attempt: sequential or chunked, resuming whatever is on disk.
    async fn attempt(
        &self,
        t: &FileTask,
        inc: &Path,
        downloaded: &Arc<AtomicU64>,
        bar: &super::progress::Bar,
    ) -> Result<()> {
        let pp = parts_path(inc);
        let chunked = if pp.exists() {
            true
        } else if inc.exists() {
            false
        } else {
            self.jobs > 1 && t.size >= 2 * self.chunk
        };
        if chunked {
            self.chunked(t, inc, &pp, downloaded, bar).await
        } else {
            let _permit = self.sem.acquire().await?;
            self.sequential(t, inc, downloaded, bar).await
        }
    }

    async fn sequential(
        &self,
        t: &FileTask,
        inc: &Path,
        downloaded: &AtomicU64,
        bar: &super::progress::Bar,
    ) -> Result<()> {
        let mut have = std::fs::metadata(inc).map(|m| m.len()).unwrap_or(0);
        if have > t.size {
            have = 0;
        }
        let range = (have > 0 && have < t.size).then_some((have, None));
        if have == t.size && t.size > 0 {
            return Ok(());
        }
        let (resp, meta) = self
            .client_for(t.kind)
            .resolve(&t.repo, &t.commit, &t.path, range)
            .await?;
        check_meta(t, &meta)?;
        let status = resp.status().as_u16();
        let f = OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(inc)
            .with_context(|| format!("opening {}", inc.display()))?;
        if status == 206 {
            let start =
                content_range_start(&resp).ok_or_else(|| transient("206 without Content-Range"))?;
            if start != have {
                f.set_len(0)?;
                return Err(transient(format!(
                    "asked for bytes from {have}, got {start}: starting over"
                )));
            }
        } else {
            if have > 0 {
                tracing::info!(
                    "{}: server answered 200 to a Range request; starting over",
                    t.path
                );
            }
            have = 0;
        }
        f.set_len(have)?;
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        std::io::Seek::seek(&mut w, std::io::SeekFrom::Start(have))?;
        bar.set_position(have);
        let mut pos = have;
        let mut stream = resp.bytes_stream();
        let what = format!("{}/{}", t.repo, t.path);
        let mut guard = RateGuard::new(self.client.stall, &format!("{what}: body"));
        loop {
            // A failed body keeps what arrived (flushed) for the resume.
            let next = guard.next(&mut stream).await;
            if next.is_err() {
                w.flush()?;
            }
            let Some(chunk) = next? else { break };
            if pos + chunk.len() as u64 > t.size {
                w.flush()?;
                w.get_ref().set_len(0)?;
                return Err(transient(format!(
                    "{what}: server sent more than {} bytes",
                    t.size
                )));
            }
            w.write_all(&chunk)?;
            pos += chunk.len() as u64;
            downloaded.fetch_add(chunk.len() as u64, Ordering::SeqCst);
            bar.inc(chunk.len() as u64);
            crate::signals::pause_point("fetch-body");
        }
        w.flush()?;
        if pos != t.size {
            return Err(transient(format!(
                "{what}: truncated body ({pos} of {} bytes)",
                t.size
            )));
        }
        Ok(())
    }

    /// A large file as parallel ranged chunks written in place, resuming every chunk where the
    /// parts file (`pp`) left it.
    async fn chunked(
        &self,
        t: &FileTask,
        inc: &Path,
        pp: &Path,
        downloaded: &Arc<AtomicU64>,
        bar: &super::progress::Bar,
    ) -> Result<()> {
        let parts = self.chunk_parts(t, inc, pp)?;
        let file = OpenOptions::new().write(true).open(inc)?;
        bar.set_position(parts.done.iter().sum());
        let chunk = parts.chunk;
        let n = parts.done.len();
        let run = ChunkRun {
            t,
            client: self.client_for(t.kind),
            file: &file,
            state: &Mutex::new(parts),
            since_save: &AtomicU64::new(0),
            // Persist chunk progress every quarter chunk (1..64 MiB): what a kill -9 can lose.
            save_every: (chunk / 4).clamp(1 << 20, 64 << 20),
            downloaded,
            bar,
            pp,
        };
        let mut tasks = Vec::new();
        for i in 0..n {
            let start = i as u64 * chunk;
            let end = ((i as u64 + 1) * chunk).min(t.size);
            let done = run.state.lock().unwrap().done[i];
            if start + done >= end {
                continue;
            }
            let (run, sem) = (&run, &self.sem);
            tasks.push(async move {
                let _permit = sem.acquire().await?;
                run.fetch(i, start, start + done, end).await
            });
        }
        first_error(futures::future::join_all(tasks).await)
    }

    /// The parts file's chunk progress when it still describes this file and the partial
    /// file is there; else a fresh partial file of the full size and a fresh parts file.
    fn chunk_parts(&self, t: &FileTask, inc: &Path, pp: &Path) -> Result<Parts> {
        let parts = std::fs::read(pp)
            .ok()
            .and_then(|b| serde_json::from_slice::<Parts>(&b).ok())
            .filter(|p| {
                p.size == t.size
                    && p.etag == t.etag()
                    && p.chunk > 0
                    && p.done.len() as u64 == t.size.div_ceil(p.chunk)
                    && inc.exists()
            });
        if let Some(p) = parts {
            return Ok(p);
        }
        let f = File::create(inc).with_context(|| format!("creating {}", inc.display()))?;
        f.set_len(t.size)?;
        // At most MAX_CHUNKS chunks, whatever size the listing claims.
        let chunk = self.chunk.max(t.size.div_ceil(MAX_CHUNKS));
        let n = t.size.div_ceil(chunk) as usize;
        let p = Parts {
            size: t.size,
            etag: t.etag().to_string(),
            chunk,
            done: vec![0; n],
        };
        crate::util::atomic_write(pp, &serde_json::to_vec(&p)?)?;
        Ok(p)
    }
}

/// What the chunk tasks of one file share.
struct ChunkRun<'a> {
    t: &'a FileTask,
    client: &'a HubClient,
    /// The partial file, written in place at each chunk's offsets.
    file: &'a File,
    state: &'a Mutex<Parts>,
    /// Bytes since the parts file was last saved, and how many make a save.
    since_save: &'a AtomicU64,
    save_every: u64,
    downloaded: &'a AtomicU64,
    bar: &'a super::progress::Bar,
    /// The parts file.
    pp: &'a Path,
}

impl ChunkRun<'_> {
    /// Chunk `i` (bytes `start..end` of the file) from byte `from` on, its progress saved
    /// every `save_every` bytes, on a stall and at its end.
    async fn fetch(&self, i: usize, start: u64, from: u64, end: u64) -> Result<()> {
        let t = self.t;
        let (resp, meta) = self
            .client
            .resolve(&t.repo, &t.commit, &t.path, Some((from, Some(end - 1))))
            .await?;
        check_meta(t, &meta)?;
        if resp.status().as_u16() != 206 || content_range_start(&resp) != Some(from) {
            return Err(transient(format!(
                "{}: chunk {i}: server ignored Range (HTTP {})",
                t.path,
                resp.status()
            )));
        }
        let mut pos = from;
        let mut stream = resp.bytes_stream();
        let mut guard = RateGuard::new(self.client.stall, &format!("{}: chunk {i}", t.path));
        loop {
            // A failed chunk keeps its progress (saved) for the resume.
            let next = guard.next(&mut stream).await;
            if next.is_err() {
                self.save()?;
            }
            let Some(c) = next? else { break };
            if pos + c.len() as u64 > end {
                return Err(transient(format!("{}: chunk {i}: too many bytes", t.path)));
            }
            self.file.write_all_at(&c, pos)?;
            pos += c.len() as u64;
            self.state.lock().unwrap().done[i] = pos - start;
            self.downloaded.fetch_add(c.len() as u64, Ordering::SeqCst);
            self.bar.inc(c.len() as u64);
            if self.since_save.fetch_add(c.len() as u64, Ordering::SeqCst) >= self.save_every {
                self.since_save.store(0, Ordering::SeqCst);
                self.save()?;
            }
        }
        self.save()?;
        if pos != end {
            return Err(transient(format!(
                "{}: chunk {i}: truncated ({} of {})",
                t.path,
                pos - start,
                end - start
            )));
        }
        Ok(())
    }

    /// The chunk progress made durable: the data first, then the parts file.
    fn save(&self) -> Result<()> {
        self.file.sync_data()?;
        let bytes = serde_json::to_vec(&*self.state.lock().unwrap())?;
        crate::util::atomic_write(self.pp, &bytes)
    }
}

/// The first error of the chunks, preferring one that is not transient (fatal wins).
fn first_error(results: Vec<Result<()>>) -> Result<()> {
    let mut first: Option<anyhow::Error> = None;
    for r in results {
        if let Err(e) = r {
            let fatal = super::retry::as_transient(&e).is_none();
            if first.is_none() || fatal {
                first = Some(e);
            }
        }
    }
    match first {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

async fn blocking_verify(t: &FileTask, path: &Path) -> Result<String> {
    let (t, p) = (t.clone(), path.to_path_buf());
    tokio::task::spawn_blocking(move || verify_file(&t, &p)).await?
}

fn content_range_start(resp: &reqwest::Response) -> Option<u64> {
    let v = resp.headers().get("content-range")?.to_str().ok()?;
    let spec = v.trim().strip_prefix("bytes ")?;
    spec.split('-').next()?.trim().parse().ok()
}

/// The first Hub response must agree with the listing (commit, LFS sha256, size).
fn check_meta(t: &FileTask, m: &super::client::FileMeta) -> Result<()> {
    if let Some(c) = &m.commit {
        if !c.eq_ignore_ascii_case(&t.commit) {
            bail!(
                "{}/{}: Hub answered X-Repo-Commit {c}, expected {}",
                t.repo,
                t.path,
                t.commit
            );
        }
    }
    if let (Some(want), Some(got)) = (&t.lfs_sha256, &m.etag) {
        if !got.eq_ignore_ascii_case(want) {
            bail!(
                "{}/{}: Hub answered X-Linked-Etag {got}, listing says {want}",
                t.repo,
                t.path
            );
        }
    }
    if let Some(s) = m.size {
        if t.lfs_sha256.is_some() && s != t.size {
            bail!(
                "{}/{}: Hub answered X-Linked-Size {s}, listing says {}",
                t.repo,
                t.path,
                t.size
            );
        }
    }
    Ok(())
}

/// Hash a complete file and check it; returns its sha256.
pub fn verify_file(t: &FileTask, path: &Path) -> Result<String> {
    let mut f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    if len != t.size {
        bail!("{}/{}: size {len}, expected {}", t.repo, t.path, t.size);
    }
    let mut sha = Sha256::new();
    let mut git = t.lfs_sha256.is_none().then(|| {
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {len}\0").as_bytes());
        h
    });
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha.update(&buf[..n]);
        if let Some(g) = git.as_mut() {
            g.update(&buf[..n]);
        }
    }
    let sha = hex::encode(sha.finalize());
    match (&t.lfs_sha256, git) {
        (Some(want), _) if !want.eq_ignore_ascii_case(&sha) => Err(anyhow!(
            "{}/{}: sha256 mismatch: got {sha}, LFS oid {want}",
            t.repo,
            t.path
        )),
        (None, Some(g)) => {
            let got = hex::encode(g.finalize());
            if got.eq_ignore_ascii_case(&t.git_oid) {
                Ok(sha)
            } else {
                Err(anyhow!(
                    "{}/{}: git blob sha1 mismatch: got {got}, oid {}",
                    t.repo,
                    t.path,
                    t.git_oid
                ))
            }
        }
        _ => Ok(sha),
    }
}

/// Remove `p` when it is a symbolic link (only the link: its target is never touched).
fn unlink_if_link(p: &Path) -> Result<()> {
    if std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
        tracing::warn!(
            "{}: a symbolic link where dlm-data keeps its own file; removing the link",
            p.display()
        );
        std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))?;
    }
    Ok(())
}

/// A blob already in the cache, re-verified: `Some(sha256)` when good. A bad blob is removed,
/// and so is a link in its place (a blob is a regular file inside the cache).
fn verify_existing(t: &FileTask, blob: &Path) -> Result<Option<String>> {
    unlink_if_link(blob)?;
    match std::fs::metadata(blob) {
        Ok(m) if m.is_file() => match verify_file(t, blob) {
            Ok(sha) => Ok(Some(sha)),
            Err(e) => {
                tracing::warn!("cached blob is bad, fetching again: {e:#}");
                std::fs::remove_file(blob)?;
                Ok(None)
            }
        },
        _ => Ok(None),
    }
}

/// `snapshots/<commit>/<path>` → `../../blobs/<etag>` (relative, like huggingface_hub), made
/// atomically.
pub fn link_snapshot(cache: &Cache, t: &FileTask, blob: &Path) -> Result<()> {
    let snap = cache.snapshot_link(t.area(), &t.repo, &t.commit, &t.path)?;
    let etag = super::cache::check_blob_name(t.etag())?;
    let dir = snap.parent().unwrap();
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // A directory of snapshots/ replaced by a link out of the cache is refused, by the rule
    // every reader of the cache applies.
    cache.check_resolved(t.area(), &t.repo, dir)?;
    unlink_if_link(&crate::util::temp_path(&snap))?;
    let ups = t.path.split('/').count() + 1;
    let target = format!("{}blobs/{etag}", "../".repeat(ups));
    if std::fs::read_link(&snap).ok().as_deref() == Some(Path::new(&target)) {
        return Ok(());
    }
    debug_assert!(dir.join(&target).canonicalize().ok() == blob.canonicalize().ok());
    let tmp = crate::util::temp_path(&snap);
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(&target, &tmp)
        .with_context(|| format!("linking {}", snap.display()))?;
    crate::util::commit_rename(&tmp, &snap)
}
