//! Why `fetch --local-dir` keeps a record: the directory is the user's as much as ours (a
//! model directory they also edit, a `config.json` of their own). A file there is replaced
//! only when this tool wrote it — its bytes are the ones `DIR/.dlm-data-local-dir.json`
//! records writing — or with `--overwrite`; anything else is refused (exit 2) naming every
//! such file, before one byte is written.
//!
//! The record is a hidden file, so the directory's digest as `lineage` and `audit` hash it
//! (hidden entries skipped) is that of the model's files alone.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::cache::{Area, Cache};
use super::download::FileTask;
use super::plan::models::ModelPlan;

/// The record's file name inside `--local-dir`.
pub const RECORD: &str = ".dlm-data-local-dir.json";

/// Path (relative to `--local-dir`, `/`-separated) → the sha256 this tool wrote there.
type Record = BTreeMap<String, String>;

fn load(dir: &Path) -> Record {
    std::fs::read(dir.join(RECORD))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default()
}

/// `--local-dir DIR`: the model's files as real files under `dir` (one model) or
/// `dir/<name>` (several), like `hf download --local-dir`. A file already there with the
/// locked sha256 is kept; one this tool wrote is replaced atomically; any other is refused
/// unless `overwrite` (module doc).
pub fn materialise(
    cache: &Cache,
    dir: &Path,
    plans: &[ModelPlan],
    shas: &dyn Fn(&FileTask) -> String,
    overwrite: bool,
) -> Result<()> {
    let mut record = load(dir);
    let mut todo: Vec<(PathBuf, String, &FileTask)> = Vec::new();
    let mut foreign = Vec::new();
    for p in plans {
        let root = if plans.len() == 1 {
            dir.to_path_buf()
        } else {
            dir.join(&p.model.name)
        };
        for t in &p.files {
            super::names::check_repo_path(&t.path)?;
            let dst = root.join(&t.path);
            let rel = dst
                .strip_prefix(dir)
                .unwrap_or(&dst)
                .to_string_lossy()
                .replace('\\', "/");
            let want = shas(t);
            // What is there now: nothing, a regular file's sha256, or "" (not a regular file).
            let have = match std::fs::symlink_metadata(&dst) {
                Err(_) => None,
                Ok(m) if m.is_file() => Some(crate::util::sha256_file(&dst)?),
                Ok(_) => Some(String::new()),
            };
            match have {
                None => {}
                Some(h) if h == want => {
                    record.insert(rel, want);
                    continue;
                }
                Some(h) => {
                    let ours = !h.is_empty() && record.get(&rel) == Some(&h);
                    if !ours && !overwrite {
                        foreign.push(dst.display().to_string());
                    }
                }
            }
            todo.push((dst, rel, t));
        }
    }
    if !foreign.is_empty() {
        return Err(crate::error::refused(format!(
            "--local-dir {}: {} file(s) there were not written by dlm-data (or were changed \
             since) and would be replaced: {}; move them away, choose another --local-dir, \
             or pass --overwrite",
            dir.display(),
            foreign.len(),
            foreign.join(", ")
        )));
    }
    for (dst, rel, t) in todo {
        let src = cache.snapshot_path(Area::MODEL, &t.repo, &t.commit, &t.path);
        if let Some(d) = dst.parent() {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let tmp = crate::util::temp_path(&dst);
        std::fs::copy(&src, &tmp)
            .with_context(|| format!("copying {} to {}", src.display(), tmp.display()))?;
        crate::util::commit_rename(&tmp, &dst)?;
        record.insert(rel, shas(t));
    }
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut b = serde_json::to_vec_pretty(&record)?;
    b.push(b'\n');
    crate::util::write_if_changed(&dir.join(RECORD), &b)?;
    for p in plans {
        crate::progress::note(&format!(
            "fetch: model {:?} materialised in {} ({} files)",
            p.model.name,
            dir.display(),
            p.files.len()
        ));
    }
    Ok(())
}
