//! Why one driver for bucket outputs: a command that writes a directory output (pack, merge,
//! mcq, decontam's `--drop` copy; pack's workers' parts) runs its unchanged local writer on a
//! staging directory while this takes the bucket's lease, restores the staging copy from the
//! bucket, uploads as the writer journals ([`super::mirror`]) and commits `index.json` last.
//! The command passes its local run as a closure, and the [`Shape`] of its output, so this
//! module never depends on the commands that use it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};

use super::lease::{Lease, LeaseWatch};
use super::location::ObjectUrl;
use super::mirror::{self, Mirror};
use super::store::Bucket;
use crate::shards::index::Index;
use crate::worker::WorkerSlice;

/// Where a directory output keeps its journaled shards, and which other files it holds.
#[derive(Debug, Clone, Copy)]
pub struct Shape<'a> {
    /// The directory under the output holding the shard journal (`index.json`): `""` for
    /// pack, merge and decontam's copy, `"sft"` for mcq; `None`: no shards (mcq's prompts only).
    pub index_dir: Option<&'a str>,
    /// Other files of the output (names under it), uploaded after the shards and before
    /// the card and `index.json`, in this order, when the writer left them; without an index
    /// the last one is the commit marker.
    pub files: &'a [&'a str],
}

/// pack's (and merge's) output: shards, the card and `index.json` at its root.
pub const SHARDS: Shape<'static> = Shape {
    index_dir: Some(""),
    files: &[],
};

/// What a bucket output run ended with.
pub struct Committed {
    /// The committed index.
    pub index: Index,
    /// The URL of the directory committed (a worker's part for `--shard I/N`).
    pub url: ObjectUrl,
    /// Whether the bucket held the complete output already.
    pub already: bool,
    pub bytes_sent: u64,
}

/// Run `local_run(staging_root)` — the command's own writer, told to write under
/// `staging_root` (a worker under `staging_root/parts/IIIII-of-NNNNN`) — for the bucket
/// output `url`, and commit what it wrote there. `what` names the command in a busy message.
pub fn run(
    url: &ObjectUrl,
    worker: WorkerSlice,
    what: &str,
    local_run: impl FnOnce(PathBuf) -> Result<()>,
) -> Result<Committed> {
    let c = run_shaped(url, worker, what, SHARDS, local_run)?;
    Ok(Committed {
        index: c.index.context("a shard output commits an index.json")?,
        url: c.url,
        already: c.already,
        bytes_sent: c.bytes_sent,
    })
}

/// What [`run_shaped`] ended with ([`Committed`], the index absent for an output without
/// shards).
pub struct ShapedCommit {
    pub index: Option<Index>,
    pub url: ObjectUrl,
    pub already: bool,
    pub bytes_sent: u64,
}

/// [`run`] for an output of any [`Shape`].
pub fn run_shaped(
    url: &ObjectUrl,
    worker: WorkerSlice,
    what: &str,
    shape: Shape,
    local_run: impl FnOnce(PathBuf) -> Result<()>,
) -> Result<ShapedCommit> {
    let bucket = Arc::new(Bucket::open(url)?);
    bucket.check()?;
    let staging = super::staging::dir_for(url);
    let part = worker.out_dir(&staging);
    let rel_root = rel_of(&staging, &part);
    let lease = Lease::acquire(bucket.clone(), &rel_root, what)?;
    let result = run_leased(
        &bucket, &lease, &staging, &part, &rel_root, shape, local_run,
    );
    let released = lease.release();
    let committed = result?;
    released?;
    if !super::staging::keep() {
        let _ = std::fs::remove_dir_all(&part);
        for d in part.ancestors().skip(1) {
            if !d.starts_with(&staging) || std::fs::remove_dir(d).is_err() {
                break;
            }
        }
    }
    Ok(committed)
}

fn rel_of(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root)
        .map(|p| {
            p.components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default()
}

fn join_rel(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_string(),
        (false, true) => a.to_string(),
        (false, false) => format!("{a}/{b}"),
    }
}

fn run_leased(
    bucket: &Arc<Bucket>,
    lease: &Lease,
    staging: &Path,
    part: &Path,
    rel_root: &str,
    shape: Shape,
    local_run: impl FnOnce(PathBuf) -> Result<()>,
) -> Result<ShapedCommit> {
    let url = bucket.url().child(rel_root);
    let Some(index_dir) = shape.index_dir else {
        return run_files(
            bucket,
            lease,
            staging,
            part,
            rel_root,
            shape.files,
            local_run,
        );
    };
    let (local, rel) = (part.join(index_dir), join_rel(rel_root, index_dir));
    let already = mirror::restore(bucket, &local, &rel)?;
    let mut m = Mirror::new(bucket.clone(), &local, &rel);
    m.before_index = shape
        .files
        .iter()
        .map(|f| (part.join(f), join_rel(rel_root, f)))
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let uploader = spawn_uploader(m, lease.watch(), stop.clone())?;
    let ran = local_run(staging.to_path_buf());
    stop.store(true, Ordering::SeqCst);
    uploader.thread().unpark();
    let mut m = uploader
        .join()
        .map_err(|_| anyhow!("the uploader thread panicked"))?;
    ran?;
    lease.check()?;
    let index = m.commit()?;
    if !already {
        crate::progress::note(&format!(
            "{url}: committed ({} shards, {:.1} MB uploaded; index.json last)",
            index.shards.len(),
            m.bytes_sent as f64 / 1e6
        ));
    }
    Ok(ShapedCommit {
        index: Some(index),
        url,
        already,
        bytes_sent: m.bytes_sent,
    })
}

/// An output without shards: its files uploaded in order once the writer is done, the last
/// (the commit marker) last. Found complete on the bucket (the marker there), its files are
/// copied into the staging directory first, so the writer sees what a local rerun would.
fn run_files(
    bucket: &Arc<Bucket>,
    lease: &Lease,
    staging: &Path,
    part: &Path,
    rel_root: &str,
    files: &[&str],
    local_run: impl FnOnce(PathBuf) -> Result<()>,
) -> Result<ShapedCommit> {
    let marker = files.last().context("an output of no files")?;
    let already = bucket.head(&join_rel(rel_root, marker))?.is_some();
    if already {
        for f in files {
            let rel = join_rel(rel_root, f);
            if bucket.head(&rel)?.is_some() {
                bucket.download_file(&rel, &part.join(f))?;
            }
        }
    }
    local_run(staging.to_path_buf())?;
    lease.check()?;
    let mut sent = 0;
    for f in files {
        let src = part.join(f);
        if src.is_file() {
            if f == marker {
                crate::signals::pause_point("object-commit");
            }
            sent += mirror::put_file_if_changed(bucket, &src, &join_rel(rel_root, f))?;
        }
    }
    let url = bucket.url().child(rel_root);
    if sent > 0 {
        crate::progress::note(&format!(
            "{url}: committed ({:.1} MB uploaded; {marker} last)",
            sent as f64 / 1e6
        ));
    }
    Ok(ShapedCommit {
        index: None,
        url,
        already,
        bytes_sent: sent,
    })
}

/// The thread that uploads journaled files while the writer goes on. A failed pass is
/// retried (the commit's final pass reports what still fails); a lost lease stops it.
fn spawn_uploader(
    mut m: Mirror,
    lease: LeaseWatch,
    stop: Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<Mirror>> {
    Ok(std::thread::Builder::new()
        .name("object-uploader".into())
        .spawn(move || {
            let mut pause = Duration::from_millis(200);
            while !stop.load(Ordering::SeqCst) && lease.check().is_ok() {
                match m.sync() {
                    Ok(_) => pause = Duration::from_millis(200),
                    Err(e) => {
                        tracing::warn!("uploading (will retry): {e:#}");
                        pause = (pause * 4).min(Duration::from_secs(5));
                    }
                }
                std::thread::park_timeout(pause);
            }
            m
        })?)
}
