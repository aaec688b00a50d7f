//! The run journal (`NAME.run.json` beside the canonical pipeline file): for each step that
//! succeeded, its command lines (its settings) and the signature of every file it read and
//! wrote — by content, with size and modification time only as a fast pre-check (a file whose
//! size and time match the record is not re-read; one that differs is re-hashed, so a touched
//! but unchanged file is still unchanged). A step whose commands and files match is complete
//! and skipped; anything else runs it again.
//!
//! The journal also holds the rebuilds in flight ([`Rebuild`]): a step whose inputs or
//! settings changed is built beside its old output and swapped in when complete, and a night
//! killed half-way finds here what to resume or finish.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// This journal's format version (1: one digest per step, metadata for large files).
pub const VERSION: u32 = 2;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunState {
    pub version: u32,
    /// The canonical (absolute, symlinks resolved) pipeline file this journal belongs to.
    #[serde(default)]
    pub pipeline: String,
    /// Step name → what it was complete against.
    pub steps: BTreeMap<String, StepRecord>,
    /// Step name → its rebuild beside the old output, while one is under way.
    #[serde(default)]
    pub rebuilds: BTreeMap<String, Rebuild>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub commands: Vec<Vec<String>>,
    /// Every file the step read, by path (a directory's files each by their own path).
    #[serde(default)]
    pub inputs: BTreeMap<String, Sig>,
    /// Every file the step is complete against among its outputs.
    #[serde(default)]
    pub outputs: BTreeMap<String, Sig>,
    /// When it completed (RFC 3339).
    pub completed: String,
    pub seconds: f64,
}

/// One file as last seen: its size and modification time (the pre-check) and its sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sig {
    pub bytes: u64,
    pub mtime_ns: i128,
    pub sha256: String,
}

/// A step being rebuilt beside its output: the command lines it runs (their `--out` is the
/// staging path), the inputs they were started against, and — once the staged output is
/// complete — the pairs being swapped into place.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rebuild {
    /// The staging directory (`.NAME.run-next` beside the output); removed when done.
    pub staging: PathBuf,
    /// The step's inputs when the rebuild started: changed again, the staging restarts.
    pub inputs: BTreeMap<String, Sig>,
    pub commands: Vec<Vec<String>>,
    /// Set once the staged output is complete: (staged, live, marker of the staged one).
    #[serde(default)]
    pub swap: Vec<(PathBuf, PathBuf, String)>,
}

impl RunState {
    pub fn load(path: &Path, pipeline: &Path) -> Result<RunState> {
        let fresh = RunState {
            version: VERSION,
            pipeline: pipeline.display().to_string(),
            ..Default::default()
        };
        match std::fs::read(path) {
            Ok(b) => {
                let st: RunState = serde_json::from_slice(&b)
                    .with_context(|| format!("{}: not a dlm-data run journal", path.display()))?;
                // A journal of the first format records no files: its steps run again (each
                // command then resumes or finds its output complete on its own).
                if st.version < VERSION {
                    return Ok(fresh);
                }
                Ok(st)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(fresh),
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

/// Signatures of every file under `paths` (a file itself; a directory's files, recursively;
/// nothing for a missing path), re-using `prev`'s sha256 where size and time still match
/// (`run --hash` passes no `prev`: every file is read).
pub fn sigs(paths: &[PathBuf], prev: &BTreeMap<String, Sig>) -> Result<BTreeMap<String, Sig>> {
    let mut out = BTreeMap::new();
    for p in paths {
        let md = match std::fs::metadata(p) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                out.insert(p.display().to_string(), missing());
                continue;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {}", p.display())),
        };
        if md.is_dir() {
            let mut files = Vec::new();
            walk(p, &mut files)?;
            for f in files {
                let md =
                    std::fs::metadata(&f).with_context(|| format!("reading {}", f.display()))?;
                out.insert(f.display().to_string(), sig(&f, &md, prev)?);
            }
        } else {
            out.insert(p.display().to_string(), sig(p, &md, prev)?);
        }
    }
    Ok(out)
}

/// Signatures of a step's outputs: [`sigs`] of `paths`, and for each `index.json` among them
/// every shard file it lists (and their `extra_files`) with its size on disk and the sha256
/// the index records — or, with `hash`, the file's own sha256. Sizes are so checked every
/// night without re-reading the shards; contents with `run --hash`.
pub fn out_sigs(
    paths: &[PathBuf],
    prev: &BTreeMap<String, Sig>,
    hash: bool,
) -> Result<BTreeMap<String, Sig>> {
    let mut out = sigs(paths, prev)?;
    for p in paths {
        if p.file_name() != Some(std::ffi::OsStr::new(crate::shards::index::INDEX_FILE)) {
            continue;
        }
        let Some(dir) = p.parent() else { continue };
        // A missing or unreadable index is already a change of its own signature.
        let Ok(idx) = crate::shards::index::load(dir) else {
            continue;
        };
        for e in &idx.shards {
            let listed = std::iter::once((&e.file, &e.sha256)).chain(&e.extra_files);
            for (file, sha) in listed {
                let f = dir.join(file);
                let sig = match std::fs::metadata(&f) {
                    Ok(md) if md.is_file() => Sig {
                        bytes: md.len(),
                        mtime_ns: md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128,
                        sha256: if hash {
                            crate::util::sha256_file(&f)?
                        } else {
                            sha.to_ascii_lowercase()
                        },
                    },
                    _ => missing(),
                };
                out.insert(f.display().to_string(), sig);
            }
        }
    }
    Ok(out)
}

/// The recorded outputs not found now at their recorded size and digest (empty: the outputs
/// are as the step left them). A file only `now` names is no change: the record of a journal
/// written before shards were recorded lists the index alone, and the index, unchanged,
/// names the same shards.
pub fn changed_outputs(rec: &BTreeMap<String, Sig>, now: &BTreeMap<String, Sig>) -> Vec<String> {
    rec.iter()
        .filter(|(k, r)| {
            now.get(*k)
                .is_none_or(|n| n.sha256 != r.sha256 || n.bytes != r.bytes)
        })
        .map(|(k, _)| k.clone())
        .collect()
}

/// A path that does not exist (recorded, so that its appearing is a change).
fn missing() -> Sig {
    Sig {
        bytes: 0,
        mtime_ns: -1,
        sha256: "missing".into(),
    }
}

fn sig(p: &Path, md: &std::fs::Metadata, prev: &BTreeMap<String, Sig>) -> Result<Sig> {
    let mtime_ns = md.mtime() as i128 * 1_000_000_000 + md.mtime_nsec() as i128;
    if let Some(s) = prev.get(&p.display().to_string()) {
        if s.bytes == md.len() && s.mtime_ns == mtime_ns {
            return Ok(s.clone());
        }
    }
    Ok(Sig {
        bytes: md.len(),
        mtime_ns,
        sha256: crate::util::sha256_file(p)?,
    })
}

/// Two signature sets name the same bytes (times may differ: a touched file is unchanged).
pub fn same(a: &BTreeMap<String, Sig>, b: &BTreeMap<String, Sig>) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((ka, sa), (kb, sb))| ka == kb && sa.sha256 == sb.sha256)
}

/// The paths whose bytes differ between two signature sets (for the log line).
pub fn changed(a: &BTreeMap<String, Sig>, b: &BTreeMap<String, Sig>) -> Vec<String> {
    let mut v: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| {
            a.get(*k).map(|s| (&s.sha256, s.bytes)) != b.get(*k).map(|s| (&s.sha256, s.bytes))
        })
        .cloned()
        .collect();
    v.sort();
    v.dedup();
    v
}

/// One line per file under `dir` (relative path, size, and the sha256 of files up to `small`
/// bytes): what tells two versions of an output apart without re-reading its large shards.
pub fn sigs_shallow(dir: &Path, small: u64) -> Result<String> {
    let mut files = Vec::new();
    walk(dir, &mut files)?;
    let mut s = String::new();
    for f in files {
        let md = std::fs::metadata(&f).with_context(|| format!("reading {}", f.display()))?;
        let rel = f.strip_prefix(dir).unwrap_or(&f).display().to_string();
        let h = if md.len() <= small {
            crate::util::sha256_file(&f)?
        } else {
            String::new()
        };
        s.push_str(&format!("{rel}\t{}\t{h}\n", md.len()));
    }
    Ok(s)
}

/// Files under `dir`, recursively, skipping run locks (`.NAME.lock`: they come and go with the
/// runs that hold them) and staging directories (`.NAME.run-next`).
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .collect::<std::io::Result<_>>()
        .with_context(|| format!("listing {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') && (name.ends_with(".lock") || name.ends_with(super::STAGING)) {
            continue;
        }
        if e.file_type()?.is_dir() {
            walk(&e.path(), out)?;
        } else {
            out.push(e.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touched_file_is_unchanged_and_an_edited_one_is_re_read() {
        let (_d, f) = crate::testkit::temp_file("a.txt", "one");
        let first = sigs(&[f.clone()], &BTreeMap::new()).unwrap();
        // Same bytes, a new time: unchanged.
        std::fs::write(&f, "one").unwrap();
        let t = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        std::fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(t)
            .unwrap();
        let second = sigs(&[f.clone()], &first).unwrap();
        assert!(same(&first, &second));
        // Other bytes of the same size, the recorded time restored: the pre-check would pass,
        // but a different size or time is re-read, so only metadata lies slip through.
        std::fs::write(&f, "two!").unwrap();
        let third = sigs(&[f.clone()], &second).unwrap();
        assert!(!same(&second, &third));
        assert_eq!(changed(&second, &third), [f.display().to_string()]);
        // Gone: a change too.
        std::fs::remove_file(&f).unwrap();
        assert!(!same(&third, &sigs(&[f], &third).unwrap()));
    }
}
