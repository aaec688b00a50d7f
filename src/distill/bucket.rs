//! Why a bucket driver for distill: `--out s3://…/distilled.json` must keep what makes the
//! local run worth having — resume after a kill, one writer per part, the output file written
//! last — where the bucket is the only shared state. The unchanged local run writes a staging
//! copy ([`crate::storage::file_output`]); this mirrors its part files to the bucket as batches
//! commit, so the progress lives on the bucket too:
//!
//! - `NAME.parts/IIIII-of-NNNNN.jsonl` (the committed prefix only: whole batches with their
//!   commit lines), its top-k unit files and GEMM plans go up while the run goes on, unit files
//!   before the part that names them;
//! - a rerun (another machine, a cleared staging directory) downloads every part the bucket
//!   holds that is further than the local one, with its unit files, and resumes there;
//! - a whole run ends with `NAME.topk.parquet` (with `--top-k`), then `NAME` — the commit
//!   marker — last. The parts stay on the bucket, as `OUT.parts` stays beside a local output.
//!
//! Each worker holds the lease `NAME.parts/IIIII-of-NNNNN.lease` (a second writer of the part
//! exits 75 naming the holder), as it holds the part's `flock` locally.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

use super::output;
use super::settings::DistillSettings;
use crate::storage::file_output::FileOutput;
use crate::storage::lease::Lease;
use crate::storage::{Bucket, ObjectUrl};

/// The name under the parent prefix of the `.parts` directory.
fn parts_rel(name: &str) -> String {
    format!("{name}.parts")
}

/// `distill --out URL`: the run on the staging copy, its parts mirrored, the output committed.
pub fn run(mut st: DistillSettings, url: &ObjectUrl) -> Result<()> {
    let (_, name) = crate::storage::file_output::split(url, "--out")?;
    let part = st.worker.part_dir_name();
    let lease = format!("{}/{part}.lease", parts_rel(&name));
    let fo = FileOutput::open(url, "--out", &lease, "distill")?;
    let local = fo.local();
    st.out = local.clone();
    st.given.out = local.clone();
    let whole = st.worker.is_whole();
    let ran = run_leased(&fo, st, &name, &part, whole);
    let ok = ran.is_ok();
    // A worker removes only its own files: others of this machine may share the staging copy.
    if ok && !whole && !crate::storage::staging::keep() {
        let parts = output::parts_dir(&local);
        let own = format!("{part}.");
        if let Ok(rd) = std::fs::read_dir(&parts) {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(&own) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }
    let finished = fo.finish(ok && whole);
    ran?;
    finished
}

fn run_leased(
    fo: &FileOutput,
    st: DistillSettings,
    name: &str,
    part: &str,
    whole: bool,
) -> Result<()> {
    let local = fo.local();
    let parts = output::parts_dir(&local);
    restore(&fo.bucket, &parts, &parts_rel(name))?;
    let mut sync = PartSync {
        bucket: fo.bucket.clone(),
        dir: parts.clone(),
        rel: parts_rel(name),
        own: format!("{part}."),
        sent: BTreeMap::new(),
        next_part: Instant::now(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let uploader = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("distill-uploader".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    if let Err(e) = sync.pass(false) {
                        tracing::warn!("uploading distill parts (will retry): {e:#}");
                    }
                    std::thread::park_timeout(Duration::from_millis(500));
                }
                sync
            })?
    };
    let ran = super::run::run(st);
    stop.store(true, Ordering::SeqCst);
    uploader.thread().unpark();
    let mut sync = uploader
        .join()
        .map_err(|_| anyhow!("the distill uploader thread panicked"))?;
    // What the run committed reaches the bucket even when it failed: the rerun resumes there.
    let synced = sync.pass(true);
    ran?;
    synced?;
    if whole {
        let sidecar = super::topk_sidecar::sidecar_path(Path::new(name));
        let sent = fo.commit(&[sidecar.display().to_string(), name.to_string()])?;
        crate::progress::note(&format!(
            "{}: committed ({:.1} MB uploaded; {name} last)",
            fo.url,
            sent as f64 / 1e6
        ));
    }
    Ok(())
}

/// Mirrors this worker's part files (`IIIII-of-NNNNN.*` under the staging `.parts`) to the
/// bucket: unit files and GEMM plans when new or changed, then the part's committed prefix.
struct PartSync {
    bucket: Arc<Bucket>,
    dir: std::path::PathBuf,
    rel: String,
    /// This worker's file prefix (`IIIII-of-NNNNN.`).
    own: String,
    /// Name → (size, sha256) last uploaded.
    sent: BTreeMap<String, (u64, String)>,
    /// The part is sent whole each time (a bucket has no append): not again before this, four
    /// times the last part upload's duration later, so uploading takes at most a fifth of
    /// the run however long the part grows. The final pass sends it regardless.
    next_part: Instant,
}

impl PartSync {
    /// One upload pass; `last`: the run is over, the part goes up now.
    fn pass(&mut self, last: bool) -> Result<()> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(_) if !last => return Ok(()),
            Err(e) => anyhow::bail!("reading {}: {e}", self.dir.display()),
        };
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&self.own) && !n.ends_with(".lock"))
            .collect();
        // Unit files and plans first; the part (which names the units) last.
        names.sort_by_key(|n| (n.ends_with(".jsonl"), n.clone()));
        for n in names {
            let is_part = n.ends_with(".jsonl");
            if is_part && !last && Instant::now() < self.next_part {
                continue;
            }
            let path = self.dir.join(&n);
            let bytes = if is_part {
                let part = output::read_part(&path)?;
                let mut b =
                    std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
                b.truncate(part.valid_len as usize);
                b
            } else {
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?
            };
            let sha = crate::util::sha256_hex(&bytes);
            let key = (bytes.len() as u64, sha);
            if self.sent.get(&n) == Some(&key) {
                continue;
            }
            let rel = format!("{}/{n}", self.rel);
            let t0 = Instant::now();
            self.bucket
                .put(&rel, bytes, object_store::PutMode::Overwrite)?;
            self.sent.insert(n.clone(), key);
            if is_part {
                self.next_part = Instant::now() + t0.elapsed() * 4;
            }
        }
        Ok(())
    }
}

/// Bring the staging `.parts` directory up to what the bucket holds: each part there with
/// more committed batches than the local one (or none here) replaces it, and every unit file
/// or GEMM plan missing here is downloaded.
fn restore(bucket: &Bucket, dir: &Path, rel: &str) -> Result<()> {
    let listed = bucket.list(rel)?;
    if listed.is_empty() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut resumed = 0;
    for (key, _) in listed {
        let Some(n) = key.strip_prefix(&format!("{rel}/")) else {
            continue;
        };
        if n.contains('/') || n.ends_with(".lease") || n.ends_with(".lock") {
            continue;
        }
        let dst = dir.join(n);
        if !n.ends_with(".jsonl") {
            if !dst.is_file() {
                bucket.download_file(&key, &dst)?;
            }
            continue;
        }
        let tmp = dir.join(format!(".{n}.from-bucket"));
        bucket.download_file(&key, &tmp)?;
        let theirs = output::read_part(&tmp)
            .with_context(|| format!("{}: not a distill part", bucket.name(&key)))?;
        let ours = output::read_part(&dst).ok();
        if ours.is_none_or(|o| o.batches.len() < theirs.batches.len()) {
            std::fs::rename(&tmp, &dst)
                .with_context(|| format!("renaming into {}", dst.display()))?;
            resumed += theirs.batches.len();
        } else {
            let _ = std::fs::remove_file(&tmp);
        }
    }
    if resumed > 0 {
        crate::progress::note(&format!(
            "{}: resuming from the bucket's parts ({resumed} batches recorded there)",
            bucket.name(rel)
        ));
    }
    Ok(())
}

/// Whether a bucket URL given to `merge` names a distill output (`….json` / `….jsonl`, its
/// workers' parts in `NAME.parts/` beside it) rather than a directory with `parts/`.
pub fn names_a_file(url: &ObjectUrl) -> bool {
    url.prefix.ends_with(".json") || url.prefix.ends_with(".jsonl")
}

/// `merge URL` of distill workers' parts on a bucket: each worker's lease taken (one still
/// writing: exit 75 naming it), every part and unit file downloaded into the staging
/// `.parts`, `local_merge` run on the staging output, then the sidecar and the output (last)
/// committed. The parts stay on the bucket.
pub fn merge<T>(url: &ObjectUrl, local_merge: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let (_, name) = crate::storage::file_output::split(url, "merge OUT")?;
    let rel = parts_rel(&name);
    let fo = FileOutput::open(url, "merge OUT", &format!("{rel}/merge.lease"), "merge")?;
    let ran = merge_leased(&fo, &name, local_merge);
    let finished = fo.finish(ran.is_ok());
    let v = ran?;
    finished?;
    Ok(v)
}

fn merge_leased<T>(
    fo: &FileOutput,
    name: &str,
    local_merge: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let rel = parts_rel(name);
    let mut held = Vec::new();
    for (key, _) in fo.bucket.list(&rel)? {
        let stem = key
            .strip_prefix(&format!("{rel}/"))
            .and_then(|n| n.strip_suffix(".jsonl"));
        if let Some(stem) = stem.filter(|s| !s.contains('/')) {
            let lease = format!("{rel}/{stem}.lease");
            held.push(Lease::acquire_at(
                fo.bucket.clone(),
                &key,
                lease,
                "distill worker",
            )?);
        }
    }
    if held.is_empty() {
        return Err(crate::error::usage(format!(
            "{}: no distill parts under {}: nothing to merge (distill workers write NAME.parts/IIIII-of-NNNNN.jsonl)",
            fo.url,
            fo.bucket.name(&rel)
        )));
    }
    let local = fo.local();
    restore(&fo.bucket, &output::parts_dir(&local), &rel)?;
    let merged = local_merge(&local);
    for l in held {
        let _ = l.release();
    }
    let v = merged?;
    let sidecar = super::topk_sidecar::sidecar_path(Path::new(name));
    fo.commit(&[sidecar.display().to_string(), name.to_string()])?;
    Ok(v)
}
