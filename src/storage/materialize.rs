//! Why materialize: the reading commands (`inspect`, `audit --shards`, `merge`) check what a
//! trainer reads byte for byte with their local code. A bucket output is copied into a local
//! read directory (one per URL) and the command runs on that copy. Only a committed
//! output (a complete `index.json`) is read; every object is fetched again on each use, so
//! the copy is what the bucket holds now and a tampered object fails the command's checks.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use super::location::ObjectUrl;
use super::mirror::{data_files, JOURNAL_FILE};
use super::store::Bucket;
use crate::shards::index::{self, INDEX_FILE};

/// The local read copy of `url`: beside its staging directory, `.read` appended (its
/// files are replaced on every use).
pub fn read_dir_for(url: &ObjectUrl) -> PathBuf {
    let mut d = super::staging::dir_for(url).into_os_string();
    d.push(".read");
    PathBuf::from(d)
}

/// Copy the committed output under `rel` of `bucket` into `local`. With `allow_incomplete`, an
/// output without a complete index.json gets its journal as `index.json` (so the local code
/// names it incomplete) and no data.
pub fn output(bucket: &Bucket, rel: &str, local: &Path, allow_incomplete: bool) -> Result<()> {
    let join = |n: &str| {
        if rel.is_empty() {
            n.to_string()
        } else {
            format!("{rel}/{n}")
        }
    };
    std::fs::create_dir_all(local)?;
    let got = bucket.get(&join(INDEX_FILE))?;
    let complete = match &got {
        Some((b, _)) => {
            index::parse(
                &String::from_utf8_lossy(b),
                Path::new(&bucket.name(&join(INDEX_FILE))),
            )?
            .complete
        }
        None => false,
    };
    if !complete {
        if allow_incomplete {
            if let Some((j, _)) = bucket.get(&join(JOURNAL_FILE))? {
                crate::util::atomic_write(&index::index_path(local), &j)?;
            }
            return Ok(());
        }
        bail!(
            "{}: no complete index.json: the output is incomplete (an interrupted run? rerun the same command to resume it)",
            bucket.name(rel)
        );
    }
    let (bytes, _) = got.expect("complete implies present");
    let idx = index::parse(
        &String::from_utf8_lossy(&bytes),
        Path::new(&bucket.name(&join(INDEX_FILE))),
    )?;
    for (name, sha) in data_files(&idx) {
        // Always fetched: the copy must be what the bucket holds now, not what it held.
        let dst = local.join(&name);
        let got = bucket.download_file(&join(&name), &dst)?;
        if got != sha {
            tracing::warn!(
                "{}: sha256 {got} is not the {sha} its index.json records",
                bucket.name(&join(&name))
            );
        }
    }
    // The card and decontam's report travel with the shards (audit reads the report); one
    // an earlier copy held that the bucket no longer has is removed.
    for name in [
        crate::shards::card::CARD_FILE,
        crate::shards::outdir::DECONTAM_REPORT,
    ] {
        match bucket.get(&join(name))? {
            Some((c, _)) => crate::util::atomic_write(&local.join(name), &c)?,
            None => remove_stale(&local.join(name))?,
        }
    }
    crate::util::atomic_write(&index::index_path(local), &bytes)?;
    Ok(())
}

/// A reading command's path argument: a bucket URL is copied locally (complete outputs only)
/// and the local copy returned; a local path is returned as it is.
pub fn local_copy(path: &Path, flag: &str) -> Result<PathBuf> {
    match super::Location::of_path(path, flag)? {
        super::Location::Local(p) => Ok(p),
        super::Location::Object(url) => {
            let bucket = Bucket::open(&url)?;
            let local = read_dir_for(&url);
            output(&bucket, "", &local, false)?;
            Ok(local)
        }
        super::Location::Hub(_) => Err(crate::error::usage(format!(
            "{flag}: an hf:// URL is an input location, not an output to read here"
        ))),
    }
}

/// A reading command's input file (`distill --prompts`, `audit --prompts` / `--distilled` /
/// `--lineage`): a bucket URL names one object, downloaded (streamed, temp + rename) into the
/// URL's local read directory, with `siblings` (suffixes appended to the object's name that
/// travel with it, e.g. distilled.json's `.topk.parquet`) when they exist; the local file is
/// returned. A local path is returned as it is.
pub fn local_file(path: &Path, flag: &str, siblings: &[&str]) -> Result<PathBuf> {
    match super::Location::of_path(path, flag)? {
        super::Location::Local(p) => Ok(p),
        super::Location::Object(url) => {
            let (dir_url, name) = super::file_output::split(&url, flag)?;
            let bucket = Bucket::open(&dir_url)?;
            if bucket.head(&name)?.is_none() {
                return Err(crate::error::usage(format!("{flag} {url}: no such object")));
            }
            let local = read_dir_for(&url).join(&name);
            bucket.download_file(&name, &local)?;
            for suffix in siblings {
                let sib = format!("{name}{suffix}");
                copy_or_clear(&bucket, &sib, &read_dir_for(&url).join(&sib))?;
            }
            tracing::info!("{flag} {url}: read from the local copy {}", local.display());
            Ok(local)
        }
        super::Location::Hub(_) => Err(crate::error::usage(format!(
            "{flag}: an hf:// URL names a dataset file; `pack --input` is where those are read"
        ))),
    }
}

/// `merge s3://OUT`: every worker part under `OUT/parts/` copied into `local/parts/` (complete
/// ones with their shards, incomplete ones as their journal, for merge to name).
pub fn parts(bucket: &Bucket, local: &Path) -> Result<usize> {
    let mut dirs: Vec<String> = bucket
        .list("parts")?
        .into_iter()
        .filter_map(|(k, _)| {
            let mut it = k.splitn(3, '/');
            match (it.next(), it.next(), it.next()) {
                (Some("parts"), Some(d), Some(_)) => Some(d.to_string()),
                _ => None,
            }
        })
        .collect();
    dirs.dedup();
    for d in &dirs {
        let rel = format!("parts/{d}");
        output(bucket, &rel, &local.join(&rel), true)?;
    }
    Ok(dirs.len())
}

/// What an earlier copy held that the bucket no longer holds: removed (absent is fine).
pub fn remove_stale(p: &Path) -> Result<()> {
    match std::fs::remove_file(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(anyhow::anyhow!("removing {}: {e}", p.display())),
    }
}

/// A file that sits beside an input object: for a bucket URL `path` (one object), its sibling
/// `name` (same prefix) copied into the URL's local read directory when the bucket has it —
/// removed there when not — and the local place returned; for a local path, `name` beside it.
pub fn beside(path: &Path, flag: &str, name: &str) -> Result<PathBuf> {
    match super::Location::of_path(path, flag)? {
        super::Location::Object(url) => {
            let (parent, _) = super::file_output::split(&url, flag)?;
            let bucket = Bucket::open(&parent)?;
            let dst = read_dir_for(&url).join(name);
            copy_or_clear(&bucket, name, &dst)?;
            Ok(dst)
        }
        _ => Ok(path.with_file_name(name)),
    }
}

/// `rel` of `bucket` copied to `dst` when the bucket holds it; else an earlier copy at `dst`
/// removed (what the bucket no longer holds is not read).
fn copy_or_clear(bucket: &Bucket, rel: &str, dst: &Path) -> Result<()> {
    if bucket.head(rel)?.is_some() {
        bucket.download_file(rel, dst)?;
        Ok(())
    } else {
        remove_stale(dst)
    }
}
