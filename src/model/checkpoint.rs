//! A checkpoint directory as the chain identifies it: every file's size and sha256, one digest
//! over them all, and the weights digest `distill` records as `weights_sha256`.
//!
//! The weights digest follows the teacher's rule (`teacher::weights`): a single
//! `model.safetensors` → that file's sha256; shards listed by `model.safetensors.index.json` →
//! the sha256 of `"<sha256>  <file>\n"` per shard in file-name order. The directory digest is
//! the same construction over every file (hidden files and directories skipped), so two
//! directories with the same digest hold the same files with the same bytes.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

pub const SINGLE: &str = "model.safetensors";
pub const INDEX: &str = "model.safetensors.index.json";

/// `model.safetensors.index.json`: which shard file holds each tensor.
#[derive(Debug, Deserialize)]
pub struct ShardIndex {
    pub weight_map: BTreeMap<String, String>,
    #[serde(skip)]
    files: Vec<String>,
}

impl ShardIndex {
    /// Read and check `index`: every shard a plain file name in the checkpoint directory.
    pub fn read(index: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(index)
            .with_context(|| format!("reading {}", index.display()))?;
        let mut idx: ShardIndex = serde_json::from_str(&text).with_context(|| {
            format!(
                "{}: not an index with a `weight_map` object of file names",
                index.display()
            )
        })?;
        let mut files: Vec<String> = idx.weight_map.values().cloned().collect();
        files.sort();
        files.dedup();
        for f in &files {
            if f.contains('/') || f.contains("..") || f.is_empty() {
                bail!(
                    "{}: shard name {f:?} is not a plain file name",
                    index.display()
                );
            }
        }
        idx.files = files;
        Ok(idx)
    }

    /// The shard files, sorted, each once.
    pub fn files(&self) -> &[String] {
        &self.files
    }
}

/// The safetensors files holding `dir`'s weights, relative names, sorted.
pub fn weight_files(dir: &Path) -> Result<Vec<String>> {
    if dir.join(SINGLE).is_file() {
        return Ok(vec![SINGLE.to_string()]);
    }
    let index = dir.join(INDEX);
    if index.is_file() {
        return Ok(ShardIndex::read(&index)?.files().to_vec());
    }
    bail!("{}: neither {SINGLE} nor {INDEX} found", dir.display())
}

/// `"<sha256>  <name>\n"` for each (name, sha256) in order, hashed.
fn listing_digest<'a>(items: impl Iterator<Item = (&'a String, &'a String)>) -> String {
    let mut s = String::new();
    for (name, sha) in items {
        s.push_str(&format!("{sha}  {name}\n"));
    }
    crate::util::sha256_hex(s.as_bytes())
}

/// The weights digest from the weight files' sha256 (keys: the files of [`weight_files`]).
pub fn weights_digest(shas: &BTreeMap<String, String>) -> String {
    match shas.get(SINGLE) {
        Some(sha) if shas.len() == 1 => sha.clone(),
        _ => listing_digest(shas.iter()),
    }
}

/// One file of a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileDigest {
    /// Relative to the checkpoint directory, `/`-separated.
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// A checkpoint directory, hashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The directory as given.
    pub path: String,
    /// Digest over every file (module doc).
    pub sha256: String,
    /// The weights digest `distill` records, when the directory holds safetensors weights.
    pub weights_sha256: Option<String>,
    /// Sorted by path.
    pub files: Vec<FileDigest>,
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
    for e in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') {
            continue;
        }
        let p = e.path();
        // Follows symlinks: a huggingface_hub snapshot is a tree of links to blobs.
        let m = std::fs::metadata(&p).with_context(|| format!("{}", p.display()))?;
        if m.is_dir() {
            walk(base, &p, out)?;
        } else if m.is_file() {
            let rel = p.strip_prefix(base)?.to_string_lossy().replace('\\', "/");
            out.push(rel);
        }
    }
    Ok(())
}

impl Checkpoint {
    /// Hash every file of `dir` (hidden entries skipped).
    pub fn hash_dir(dir: &Path) -> Result<Checkpoint> {
        if !dir.is_dir() {
            bail!("checkpoint {}: not a directory", dir.display());
        }
        let mut paths = Vec::new();
        walk(dir, dir, &mut paths)?;
        paths.sort();
        if paths.is_empty() {
            bail!("checkpoint {}: no files", dir.display());
        }
        let mut files = Vec::new();
        for p in paths {
            let full = dir.join(&p);
            files.push(FileDigest {
                size: std::fs::metadata(&full)?.len(),
                sha256: crate::util::sha256_file(&full)?,
                path: p,
            });
        }
        let by_path: BTreeMap<String, String> = files
            .iter()
            .map(|f| (f.path.clone(), f.sha256.clone()))
            .collect();
        // A directory with no safetensors weights has no weights digest; one whose weights
        // cannot be resolved (an index naming files outside it) is an error, never a null.
        let has_weights = dir.join(SINGLE).is_file() || dir.join(INDEX).is_file();
        let weights_sha256 = match has_weights.then(|| weight_files(dir)).transpose()? {
            Some(w) => {
                let shas: BTreeMap<String, String> = w
                    .iter()
                    .map(|f| {
                        by_path
                            .get(f)
                            .map(|s| (f.clone(), s.clone()))
                            .with_context(|| {
                                format!("checkpoint {}: weight file {f} is missing", dir.display())
                            })
                    })
                    .collect::<Result<_>>()?;
                Some(weights_digest(&shas))
            }
            None => None,
        };
        Ok(Checkpoint {
            path: dir.display().to_string(),
            sha256: listing_digest(by_path.iter()),
            weights_sha256,
            files,
        })
    }

    /// How this record contradicts itself (empty: consistent): its file list must give its
    /// recorded `sha256` (and, where it lists the weight files, its `weights_sha256`) by the
    /// same construction [`Checkpoint::hash_dir`] uses. A lineage entry whose file list was
    /// edited to match other files fails here, though its digests still chain.
    pub fn inconsistencies(&self) -> Vec<String> {
        let by_path: BTreeMap<String, String> = self
            .files
            .iter()
            .map(|f| (f.path.clone(), f.sha256.clone()))
            .collect();
        let mut out = Vec::new();
        if by_path.len() != self.files.len() {
            out.push("its file list names a file twice".to_string());
        }
        let listed = listing_digest(by_path.iter());
        if listed != self.sha256 {
            out.push(format!(
                "its file list gives the digest {listed}, not its recorded sha256 {}",
                self.sha256
            ));
        }
        // A single-file checkpoint's weights digest is that file's sha256 (a sharded one's
        // follows its index, which the file list covers through the digest above).
        if let (Some(w), Some(single)) = (&self.weights_sha256, by_path.get(SINGLE)) {
            if w != single {
                out.push(format!(
                    "its {SINGLE} has sha256 {single}, not its recorded weights_sha256 {w}"
                ));
            }
        }
        out
    }

    /// `path → sha256`.
    pub fn by_path(&self) -> BTreeMap<&str, &str> {
        self.files
            .iter()
            .map(|f| (f.path.as_str(), f.sha256.as_str()))
            .collect()
    }
}

/// How `got` differs from `want`, file by file (sha256): missing, extra, changed.
pub fn file_differences(want: &Checkpoint, got: &Checkpoint) -> Vec<String> {
    let (w, g) = (want.by_path(), got.by_path());
    let mut out = Vec::new();
    for (p, sha) in &w {
        match g.get(p) {
            None => out.push(format!("{p} is missing")),
            Some(s) if s != sha => out.push(format!("{p}: sha256 {s}, expected {sha}")),
            Some(_) => {}
        }
    }
    for p in g.keys().filter(|p| !w.contains_key(*p)) {
        out.push(format!("{p} is extra"));
    }
    out
}
