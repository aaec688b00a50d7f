//! Why a driver for single-object outputs: `distill --out s3://…/distilled.json` and
//! `decontam --prompts --drop s3://…/clean.jsonl` write one file (and files beside it), not a
//! directory with an `index.json`. The same protocol holds: a lease object (beside the file,
//! named by the command), the command's unchanged local writer on a staging directory, the
//! files beside it uploaded first and the object itself — the commit marker — last.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Result;

use super::lease::Lease;
use super::location::ObjectUrl;
use super::store::Bucket;

/// A single-object output being written: its bucket (opened at the object's parent prefix),
/// its name there, its staging directory and the held lease.
pub struct FileOutput {
    pub bucket: Arc<Bucket>,
    /// The object's name under [`FileOutput::bucket`]'s prefix (`distilled.json`).
    pub name: String,
    pub url: ObjectUrl,
    /// The staging directory: the local writer writes [`FileOutput::local`] in it.
    pub staging: PathBuf,
    lease: Option<Lease>,
}

/// `url` split into its parent prefix and its last name; a URL without a name is bad usage.
pub fn split(url: &ObjectUrl, flag: &str) -> Result<(ObjectUrl, String)> {
    let (parent, name) = match url.prefix.rsplit_once('/') {
        Some((d, n)) => (d.to_string(), n.to_string()),
        None => (String::new(), url.prefix.clone()),
    };
    if name.is_empty() {
        return Err(crate::error::usage(format!(
            "{flag} {url}: names a bucket, not an object (give …/NAME)"
        )));
    }
    Ok((
        ObjectUrl {
            prefix: parent,
            ..url.clone()
        },
        name,
    ))
}

impl FileOutput {
    /// Connect, check the bucket, and take the lease `lease_rel` (a name under the parent
    /// prefix; exit 75 naming the holder when another writer has it).
    pub fn open(url: &ObjectUrl, flag: &str, lease_rel: &str, what: &str) -> Result<FileOutput> {
        let (parent, name) = split(url, flag)?;
        let bucket = Arc::new(Bucket::open(&parent)?);
        bucket.check()?;
        let staging = super::staging::dir_for(url);
        std::fs::create_dir_all(&staging)
            .map_err(|e| anyhow::anyhow!("creating {}: {e}", staging.display()))?;
        let lease = Lease::acquire_at(bucket.clone(), &name, lease_rel.to_string(), what)?;
        Ok(FileOutput {
            bucket,
            name,
            url: url.clone(),
            staging,
            lease: Some(lease),
        })
    }

    /// Where the local writer writes the object's bytes.
    pub fn local(&self) -> PathBuf {
        self.staging.join(&self.name)
    }

    /// Fails when the lease was lost: nothing may be committed.
    pub fn check(&self) -> Result<()> {
        match &self.lease {
            Some(l) => l.check(),
            None => Ok(()),
        }
    }

    /// The commit: every file of `names` (under the staging directory, names kept under the
    /// parent prefix) that the writer left, in order, each only when the bucket does not
    /// already hold its bytes; the lease is checked before each. Put the object itself last.
    /// Returns the bytes sent.
    pub fn commit(&self, names: &[String]) -> Result<u64> {
        let mut sent = 0;
        for (i, n) in names.iter().enumerate() {
            let src = self.staging.join(n);
            if !src.is_file() {
                continue;
            }
            self.check()?;
            if i + 1 == names.len() {
                crate::signals::pause_point("object-commit");
            }
            sent += super::mirror::put_file_if_changed(&self.bucket, &src, n)?;
        }
        Ok(sent)
    }

    /// Release the lease; with `committed`, the staging copy is removed
    /// (`DLM_DATA_KEEP_STAGING=1` keeps it). An uncommitted run's staging copy stays: the
    /// rerun resumes from it.
    pub fn finish(mut self, committed: bool) -> Result<()> {
        let released = match self.lease.take() {
            Some(l) => l.release(),
            None => Ok(()),
        };
        if committed && !super::staging::keep() {
            let _ = std::fs::remove_dir_all(&self.staging);
        }
        released
    }
}

impl Drop for FileOutput {
    fn drop(&mut self) {
        if let Some(l) = self.lease.take() {
            let _ = l.release();
        }
    }
}
