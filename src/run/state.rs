//! The run journal (`NAME.run.json` beside the pipeline file): for each step that succeeded,
//! its command lines and a digest of the files it read and wrote. A step whose commands and
//! digest are unchanged is complete and skipped; anything else runs it again (and the command
//! itself resumes or no-ops as it would when typed by hand).
//!
//! Digests are cheap: small files (≤ 64 MiB: manifests, locks, index.json, prompts.jsonl,
//! reports, distilled.json) by sha256, larger files by size and modification time, a
//! directory by its entries' names, sizes and times (a checkpoint's weights are not re-read).

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// Files up to this size are digested by content.
const HASH_LIMIT: u64 = 64 << 20;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    /// Step name → what it was complete against.
    pub steps: BTreeMap<String, StepRecord>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub commands: Vec<Vec<String>>,
    /// sha256 over the watched files' digests.
    pub digest: String,
    /// When it completed (RFC 3339).
    pub completed: String,
    pub seconds: f64,
}

impl RunState {
    pub fn load(path: &Path) -> Result<RunState> {
        match std::fs::read(path) {
            Ok(b) => serde_json::from_slice(&b)
                .with_context(|| format!("{}: not a dlm-data run journal", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(RunState {
                version: 1,
                ..Default::default()
            }),
            Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
        }
    }

    pub fn save(&self, path: &Path) -> Result<()> {
        let mut b = serde_json::to_vec_pretty(self)?;
        b.push(b'\n');
        crate::util::atomic_write(path, &b)
    }
}

/// The default journal path: `NAME.run.json` beside the pipeline file `NAME.toml`.
pub fn default_path(pipeline: &Path) -> PathBuf {
    let stem = pipeline
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pipeline".into());
    pipeline.with_file_name(format!("{stem}.run.json"))
}

/// The digest of every watched path, in order (a missing one digests as missing).
pub fn digest(paths: &[PathBuf]) -> Result<String> {
    let mut all = String::new();
    for p in paths {
        all.push_str(&p.display().to_string());
        all.push('\t');
        all.push_str(&one(p)?);
        all.push('\n');
    }
    Ok(crate::util::sha256_hex(all.as_bytes()))
}

fn one(p: &Path) -> Result<String> {
    let md = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok("missing".into()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
    };
    if md.is_dir() {
        let mut entries = Vec::new();
        walk(p, p, &mut entries)?;
        entries.sort();
        return Ok(format!(
            "dir {}",
            crate::util::sha256_hex(entries.join("\n").as_bytes())
        ));
    }
    if md.len() <= HASH_LIMIT {
        return crate::util::sha256_file(p);
    }
    Ok(format!(
        "size {} mtime {}.{}",
        md.len(),
        md.mtime(),
        md.mtime_nsec()
    ))
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let md = e.metadata()?;
        let rel = e
            .path()
            .strip_prefix(root)
            .unwrap_or(&e.path())
            .display()
            .to_string();
        // Lock files come and go with the runs that hold them.
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && name.ends_with(".lock") {
            continue;
        }
        if md.is_dir() {
            walk(root, &e.path(), out)?;
        } else {
            out.push(format!(
                "{rel}\t{}\t{}.{}",
                md.len(),
                md.mtime(),
                md.mtime_nsec()
            ));
        }
    }
    Ok(())
}
