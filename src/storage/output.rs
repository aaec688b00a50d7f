//! Why one driver for bucket outputs: a command that writes a directory output (pack; its
//! workers' parts) runs its unchanged local writer on a staging directory while this takes
//! the bucket's lease, restores the staging copy from the bucket, uploads as the writer
//! journals ([`super::mirror`]) and commits `index.json` last. The command passes its local
//! run as a closure, so this module never depends on the commands that use it.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Result};

use super::lease::{Lease, LeaseWatch};
use super::location::ObjectUrl;
use super::mirror::{self, Mirror};
use super::store::Bucket;
use crate::shards::index::Index;
use crate::worker::WorkerSlice;

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
    let bucket = Arc::new(Bucket::open(url)?);
    bucket.check()?;
    let staging = super::staging::dir_for(url);
    let part = worker.out_dir(&staging);
    let rel_root = rel_of(&staging, &part);
    let lease = Lease::acquire(bucket.clone(), &rel_root, what)?;
    let result = run_leased(&bucket, &lease, &staging, &part, &rel_root, local_run);
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

fn run_leased(
    bucket: &Arc<Bucket>,
    lease: &Lease,
    staging: &Path,
    part: &Path,
    rel_root: &str,
    local_run: impl FnOnce(PathBuf) -> Result<()>,
) -> Result<Committed> {
    let already = mirror::restore(bucket, part, rel_root)?;
    let stop = Arc::new(AtomicBool::new(false));
    let uploader = spawn_uploader(
        Mirror::new(bucket.clone(), part, rel_root),
        lease.watch(),
        stop.clone(),
    )?;
    let ran = local_run(staging.to_path_buf());
    stop.store(true, Ordering::SeqCst);
    uploader.thread().unpark();
    let mut m = uploader
        .join()
        .map_err(|_| anyhow!("the uploader thread panicked"))?;
    ran?;
    lease.check()?;
    let index = m.commit()?;
    let url = bucket.url().child(rel_root);
    if !already {
        crate::progress::note(&format!(
            "{url}: committed ({} shards, {:.1} MB uploaded; index.json last)",
            index.shards.len(),
            m.bytes_sent as f64 / 1e6
        ));
    }
    Ok(Committed {
        index,
        url,
        already,
        bytes_sent: m.bytes_sent,
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
