//! Why a mirror: an output on a bucket is written through a local staging directory by the
//! unchanged local writer, and this copies what that writer has *journaled* — never a file
//! still being written — to the bucket while it goes on, so uploading overlaps tokenizing.
//!
//! The bucket protocol (the local one with "rename" replaced by "the commit object last"):
//! 1. every shard (and its extra files) the local `index.json` journal lists goes up first,
//!    each with its sha256 as user metadata; an object already there with the journal's size
//!    and sha256 is kept (a resumed run re-sends nothing it finished);
//! 2. after them, the journal itself as `PREFIX/.dlm-data.journal.json` — what a rerun on
//!    another machine resumes from;
//! 3. at the end the dataset card (`README.md`), then `index.json` — the commit marker: a
//!    prefix without it is incomplete to every reader — and the journal object is deleted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};

use super::store::Bucket;
use crate::shards::index::{self, Index, INDEX_FILE};

/// The journal object's name, relative to the output prefix.
pub const JOURNAL_FILE: &str = ".dlm-data.journal.json";

/// Uploads one output directory's journaled files to `bucket` under `rel_root`.
pub struct Mirror {
    bucket: Arc<Bucket>,
    /// The local (staging) output directory.
    local: PathBuf,
    /// Its place under the bucket prefix (`""`, or a worker's `parts/IIIII-of-NNNNN`).
    rel_root: String,
    /// Objects known to hold these bytes: relative name → sha256.
    sent: BTreeMap<String, String>,
    /// The journal bytes last put.
    journal: Option<Vec<u8>>,
    /// Bytes uploaded by this process.
    pub bytes_sent: u64,
    /// Other files of the output (local path, name under the bucket prefix) that go up at the
    /// commit after the data and before the card and `index.json`, when the writer left them
    /// (mcq's prompts.jsonl, decontam's report).
    pub before_index: Vec<(PathBuf, String)>,
}

/// Every data file an index lists, with its sha256: shards, then each shard's extra files.
pub fn data_files(idx: &Index) -> Vec<(String, String)> {
    idx.shards
        .iter()
        .flat_map(|s| {
            std::iter::once((s.file.clone(), s.sha256.clone()))
                .chain(s.extra_files.iter().map(|(k, v)| (k.clone(), v.clone())))
        })
        .collect()
}

impl Mirror {
    pub fn new(bucket: Arc<Bucket>, local: &Path, rel_root: &str) -> Mirror {
        Mirror {
            bucket,
            local: local.to_path_buf(),
            rel_root: rel_root.to_string(),
            sent: BTreeMap::new(),
            journal: None,
            bytes_sent: 0,
            before_index: Vec::new(),
        }
    }

    /// `name` relative to the bucket prefix.
    pub fn rel(&self, name: &str) -> String {
        if self.rel_root.is_empty() {
            name.to_string()
        } else {
            format!("{}/{name}", self.rel_root)
        }
    }

    /// Where the local writer keeps `name`: `DIR/name`, or inside one of its dot-directories
    /// (an incomplete output's shards wait in `.incomplete/` until the index commits; they
    /// may be moved into place between two looks, so the final place is looked at last too).
    fn local_file(&self, name: &str) -> Result<PathBuf> {
        let p = self.local.join(name);
        if p.is_file() {
            return Ok(p);
        }
        if let Ok(rd) = std::fs::read_dir(&self.local) {
            for e in rd.flatten() {
                let hidden = e.file_name().to_string_lossy().starts_with('.');
                let q = e.path().join(name);
                if hidden && e.path().is_dir() && q.is_file() {
                    return Ok(q);
                }
            }
        }
        if p.is_file() {
            return Ok(p);
        }
        bail!(
            "{}: {name} is listed in the journal but not on disk",
            self.local.display()
        )
    }

    /// Make `name` (sha256 `sha`) present on the bucket: kept when an object there already has
    /// its size and sha256, else uploaded. Returns the bytes uploaded.
    fn ensure(&self, name: &str, sha: &str) -> Result<u64> {
        let rel = self.rel(name);
        let src = match self.local_file(name) {
            Ok(p) => p,
            // An output found complete on the bucket has no local copy: it must be there.
            Err(e) => match self.bucket.stat(&rel)? {
                Some((_, Some(s))) if s == sha => return Ok(0),
                _ => return Err(e),
            },
        };
        put_if_changed(&self.bucket, &src, &rel, sha)
    }

    /// [`Mirror::ensure`] every file of `files` not yet known sent, `DLM_DATA_UPLOADS` at a
    /// time (a commit of many finished shards goes up in parallel). Every file that went up is
    /// recorded even when another failed; the first error is returned.
    fn ensure_all(&mut self, files: Vec<(String, String)>) -> Result<()> {
        let todo: Vec<(String, String)> = files
            .into_iter()
            .filter(|(n, s)| self.sent.get(n) != Some(s))
            .collect();
        let next = std::sync::atomic::AtomicUsize::new(0);
        let done = std::sync::Mutex::new(Vec::new());
        let first_err = std::sync::Mutex::new(None);
        std::thread::scope(|sc| {
            for _ in 0..super::settings::uploads_in_flight().min(todo.len()) {
                sc.spawn(|| loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some((name, sha)) = todo.get(i) else {
                        break;
                    };
                    match self.ensure(name, sha) {
                        Ok(n) => done.lock().unwrap().push((i, n)),
                        Err(e) => {
                            first_err.lock().unwrap().get_or_insert(e);
                            break;
                        }
                    }
                });
            }
        });
        for (i, n) in done.into_inner().unwrap() {
            let (name, sha) = &todo[i];
            self.sent.insert(name.clone(), sha.clone());
            self.bytes_sent += n;
        }
        match first_err.into_inner().unwrap() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// One pass: upload what the local journal lists and is not yet on the bucket, then the
    /// journal object. Returns the local index read (None before the first journal exists).
    pub fn sync(&mut self) -> Result<Option<Index>> {
        let path = index::index_path(&self.local);
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(None);
        };
        let idx = index::parse(&String::from_utf8_lossy(&bytes), &path)?;
        self.ensure_all(data_files(&idx))?;
        if !idx.complete && self.journal.as_deref() != Some(&bytes[..]) {
            let rel = self.rel(JOURNAL_FILE);
            self.bucket
                .put(&rel, bytes.clone(), object_store::PutMode::Overwrite)?;
            self.journal = Some(bytes);
            crate::signals::pause_point("object-journal");
        }
        Ok(Some(idx))
    }

    /// The commit: every data file of the complete local index, the card, then `index.json`
    /// last; the journal object removed.
    pub fn commit(&mut self) -> Result<Index> {
        let idx = self
            .sync()?
            .with_context(|| format!("{}: no index.json to commit", self.local.display()))?;
        if !idx.complete {
            bail!(
                "{}: the local index is not complete; nothing is committed",
                self.local.display()
            );
        }
        for (src, rel) in self.before_index.clone() {
            if src.is_file() {
                self.bytes_sent += put_file_if_changed(&self.bucket, &src, &rel)?;
            }
        }
        crate::signals::pause_point("object-commit");
        let card = crate::shards::card::CARD_FILE;
        for name in [card, INDEX_FILE] {
            let src = self.local.join(name);
            if !src.is_file() {
                continue;
            }
            let bytes =
                std::fs::read(&src).with_context(|| format!("reading {}", src.display()))?;
            let remote = self.bucket.get(&self.rel(name))?;
            if remote.as_ref().map(|(b, _)| &b[..]) != Some(&bytes[..]) {
                self.bucket
                    .put(&self.rel(name), bytes, object_store::PutMode::Overwrite)?;
            }
        }
        self.bucket.delete(&self.rel(JOURNAL_FILE))?;
        Ok(idx)
    }
}

/// Upload `src` to `rel` unless an object there already has its size and sha256; the bytes
/// sent.
pub fn put_file_if_changed(bucket: &Bucket, src: &Path, rel: &str) -> Result<u64> {
    put_if_changed(bucket, src, rel, &crate::util::sha256_file(src)?)
}

/// [`put_file_if_changed`] of a file whose sha256 is known (`sha`).
fn put_if_changed(bucket: &Bucket, src: &Path, rel: &str, sha: &str) -> Result<u64> {
    let len = std::fs::metadata(src)
        .with_context(|| format!("reading {}", src.display()))?
        .len();
    match bucket.stat(rel)? {
        Some((size, Some(s))) if size == len && s == sha => {
            tracing::debug!("{}: already uploaded", bucket.name(rel));
            Ok(0)
        }
        _ => {
            bucket.upload_file(src, rel, sha)?;
            Ok(len)
        }
    }
}

/// Make the staging directory `local` match the bucket output under `rel_root` before the
/// local writer opens it:
/// - a complete `index.json` on the bucket: copied (with its card) — the writer then finds
///   the output complete, or refuses other arguments, exactly as for a local directory;
/// - else a journal object: when the local journal is not at least as far, the journal and
///   every file it lists are downloaded (sha256 checked), so the writer resumes there;
/// - else nothing on the bucket: the staging directory is left as it is (a local journal
///   from an earlier attempt on this machine resumes; its files are re-sent or kept).
pub fn restore(bucket: &Bucket, local: &Path, rel_root: &str) -> Result<bool> {
    let rel = |n: &str| {
        if rel_root.is_empty() {
            n.to_string()
        } else {
            format!("{rel_root}/{n}")
        }
    };
    std::fs::create_dir_all(local).with_context(|| format!("creating {}", local.display()))?;
    if let Some((bytes, _)) = bucket.get(&rel(INDEX_FILE))? {
        let idx = index::parse(
            &String::from_utf8_lossy(&bytes),
            Path::new(&bucket.name(&rel(INDEX_FILE))),
        )?;
        if idx.complete {
            if let Some((card, _)) = bucket.get(&rel(crate::shards::card::CARD_FILE))? {
                crate::util::atomic_write(&local.join(crate::shards::card::CARD_FILE), &card)?;
            }
            crate::util::atomic_write(&index::index_path(local), &bytes)?;
            return Ok(true);
        }
    }
    let Some((bytes, _)) = bucket.get(&rel(JOURNAL_FILE))? else {
        return Ok(false);
    };
    let remote = index::parse(
        &String::from_utf8_lossy(&bytes),
        Path::new(&bucket.name(&rel(JOURNAL_FILE))),
    )?;
    let here = index::load(local).ok();
    let ahead = here.as_ref().is_some_and(|h| {
        h.args == remote.args
            && h.shards.len() >= remote.shards.len()
            && h.shards[..remote.shards.len()] == remote.shards[..]
            && data_files(h)
                .iter()
                .all(|(n, _)| crate::shards::staged::locate(local, n).is_some())
    });
    if ahead {
        return Ok(false);
    }
    // The staging directory is this output's own (see `staging`): what it holds that the
    // bucket's journal does not prove is dropped, and the journal's files come back.
    if local.exists() {
        std::fs::remove_dir_all(local).with_context(|| format!("clearing {}", local.display()))?;
        std::fs::create_dir_all(local)?;
    }
    crate::progress::note(&format!(
        "{}: resuming from the bucket's journal ({} shards recorded): downloading them",
        bucket.name(rel_root),
        remote.shards.len()
    ));
    for (name, sha) in data_files(&remote) {
        let dst = local.join(&name);
        if dst.is_file() && crate::util::sha256_file(&dst)? == sha {
            continue;
        }
        let got = bucket.download_file(&rel(&name), &dst)?;
        if got != sha {
            let _ = std::fs::remove_file(&dst);
            bail!(
                "{}: sha256 {got} is not the {sha} its journal records",
                bucket.name(&rel(&name))
            );
        }
    }
    crate::util::atomic_write(&index::index_path(local), &bytes)?;
    Ok(false)
}
