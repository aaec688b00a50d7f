//! Why manifests may name local files: a user's own data belongs in the same audited chain as
//! Hub data. A `[[source]]` with `path = "…"` (a file, a directory or a glob, relative to the
//! manifest's directory) instead of `repo` is pinned by `fetch` in the lock like a Hub source:
//! every file's path (as resolved relative to the manifest), size and sha256, with `repo` and
//! `revision` empty and `commit` the sha256 of that file list. `pack` reads exactly the locked
//! files (their size checked); `audit` re-hashes them and fails naming any file that changed.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};

use crate::manifest::{LockedFile, LockedSource, Manifest, Source};

/// The directory a manifest's relative paths start from.
pub fn base_dir(m: &Manifest) -> PathBuf {
    match m.path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A locked local file's path on disk (lock paths are relative to the manifest's directory,
/// or absolute).
pub fn file_path(m: &Manifest, f: &LockedFile) -> PathBuf {
    let p = Path::new(&f.path);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base_dir(m).join(p)
    }
}

/// The files a local source names now, in the order `pack --input` would read them.
pub fn files(m: &Manifest, s: &Source) -> Result<Vec<(String, PathBuf)>> {
    let given = s.path.as_deref().unwrap_or_default();
    let base = base_dir(m);
    let root = if Path::new(given).is_absolute() {
        PathBuf::from(given)
    } else {
        base.join(given)
    };
    let found = super::files::expand(std::slice::from_ref(&root))
        .with_context(|| format!("manifest {}: source {:?}", m.path.display(), s.name))?;
    Ok(found
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(&base)
                .map(|r| r.display().to_string())
                .unwrap_or_else(|_| p.display().to_string());
            (rel, p)
        })
        .collect())
}

/// Hash a local source's files into its lock entry.
pub fn lock_source(m: &Manifest, s: &Source) -> Result<LockedSource> {
    let found = files(m, s)?;
    let mut locked = Vec::with_capacity(found.len());
    for (rel, p) in &found {
        let size = std::fs::metadata(p)
            .with_context(|| format!("source {:?}: {}", s.name, p.display()))?
            .len();
        locked.push(LockedFile {
            path: rel.clone(),
            size,
            sha256: crate::util::sha256_file(p)?,
            git_oid: None,
        });
    }
    Ok(LockedSource {
        name: s.name.clone(),
        repo: String::new(),
        revision: String::new(),
        commit: content_id(&locked),
        config: s.config.clone(),
        split: s.split.clone(),
        role: s.role,
        files: locked,
    })
}

/// The sha256 of a locked file list (`path\0size\0sha256\n` each): the local source's
/// "commit".
pub fn content_id(files: &[LockedFile]) -> String {
    let mut h = Sha256::new();
    for f in files {
        h.update(f.path.as_bytes());
        h.update([0]);
        h.update(f.size.to_string().as_bytes());
        h.update([0]);
        h.update(f.sha256.as_bytes());
        h.update(b"\n");
    }
    hex::encode(h.finalize())
}

/// Every way the files on disk differ from a local source's lock entry (a missing, resized
/// or re-written file, a file added under the source's path, a file list that does not give
/// the locked commit), each naming the file. Re-hashes every file.
pub fn verify(m: &Manifest, s: &Source, ls: &LockedSource) -> Vec<String> {
    let mut out = Vec::new();
    for f in &ls.files {
        let p = file_path(m, f);
        match std::fs::metadata(&p) {
            Err(e) => out.push(format!("source {:?}: {}: {e}", s.name, p.display())),
            Ok(md) if md.len() != f.size => out.push(format!(
                "source {:?}: {}: {} bytes, the lock says {}",
                s.name,
                p.display(),
                md.len(),
                f.size
            )),
            Ok(_) => match crate::util::sha256_file(&p) {
                Ok(h) if h == f.sha256 => {}
                Ok(h) => out.push(format!(
                    "source {:?}: {}: sha256 {h}, the lock says {} (the file changed since \
                     `dlm-data fetch` locked it)",
                    s.name,
                    p.display(),
                    f.sha256
                )),
                Err(e) => out.push(format!("source {:?}: {e:#}", s.name)),
            },
        }
    }
    if content_id(&ls.files) != ls.commit {
        out.push(format!(
            "source {:?}: the lock's file list does not hash to its commit {}",
            s.name, ls.commit
        ));
    }
    match files(m, s) {
        Ok(now) => {
            for (rel, p) in now {
                if !ls.files.iter().any(|f| f.path == rel) {
                    out.push(format!(
                        "source {:?}: {} is under the source's path but not in the lock \
                         (re-run `dlm-data fetch` to lock it)",
                        s.name,
                        p.display()
                    ));
                }
            }
        }
        Err(e) => out.push(format!("{e:#}")),
    }
    out
}
