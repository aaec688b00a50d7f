//! Why the shards of an unfinished pack output wait in `OUT/.incomplete/`: dataset discovery
//! (`datasets.load_dataset(OUT)`, `pq.read_table(OUT/data)`, MosaicML streaming, a Megatron
//! prefix) never looks inside a dot-directory, so the partial shards of a killed run are not
//! taken for a dataset.
//!
//! The writer puts each shard there under its final relative name
//! (`data/part-00000.parquet` → `.incomplete/data/part-00000.parquet`); [`promote`] renames
//! them into place and removes the directory just before the index is marked complete. A kill
//! during those renames leaves an incomplete index whose shards sit partly in each place: a
//! resume finds them in either ([`locate`]) and puts them back first ([`stage`]), as it does
//! for an output written before shards were staged (every journaled shard in its final place).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::index::Index;

/// The dot-directory of an output that holds its shards until the index is complete.
pub const STAGED_DIR: &str = ".incomplete";

/// `out`'s staging directory.
pub fn dir(out: &Path) -> PathBuf {
    out.join(STAGED_DIR)
}

/// Every data file `idx` lists (shards and their extra files), as relative names.
pub fn listed(idx: &Index) -> Vec<String> {
    idx.shards
        .iter()
        .flat_map(|s| std::iter::once(s.file.clone()).chain(s.extra_files.keys().cloned()))
        .collect()
}

/// Where listed file `name` of the incomplete output `out` is: staged, else in its final place.
pub fn locate(out: &Path, name: &str) -> Option<PathBuf> {
    [dir(out).join(name), out.join(name)]
        .into_iter()
        .find(|p| p.is_file())
}

/// The directory to read listed file `name` of `out` from: the staging directory while the
/// output is incomplete (`complete` false) and holds it there, else `out` itself.
pub fn dir_of(out: &Path, complete: bool, name: &str) -> PathBuf {
    let staged = dir(out);
    if !complete && staged.join(name).is_file() {
        staged
    } else {
        out.to_path_buf()
    }
}

/// Rename `from` to `to` (same filesystem), making `to`'s directory if missing; the caller
/// fsyncs the directories.
fn move_file(from: &Path, to: &Path) -> Result<()> {
    if let Some(parent) = to.parent() {
        if !parent.is_dir() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
            crate::util::fsync_dir(parent);
        }
    }
    std::fs::rename(from, to)
        .with_context(|| format!("renaming {} to {}", from.display(), to.display()))
}

/// fsync the directories holding `names` in `base` (each once).
fn fsync_dirs(base: &Path, names: &[String]) {
    // One file's path per directory: fsync_dir syncs the directory holding it.
    let by_dir: std::collections::BTreeMap<PathBuf, PathBuf> = names
        .iter()
        .map(|n| base.join(n))
        .filter_map(|p| Some((p.parent()?.to_path_buf(), p)))
        .collect();
    for p in by_dir.values() {
        crate::util::fsync_dir(p);
    }
}

/// A resume: every listed file found in its final place and not staged is moved into the
/// staging directory (made if missing), so the output shows no shard until it is complete.
pub fn stage(out: &Path, names: &[String]) -> Result<()> {
    let staged = dir(out);
    std::fs::create_dir_all(&staged).with_context(|| format!("creating {}", staged.display()))?;
    crate::util::fsync_dir(&staged);
    for name in names {
        let (here, there) = (out.join(name), staged.join(name));
        if here.is_file() && !there.exists() {
            move_file(&here, &there)?;
        }
    }
    fsync_dirs(out, names);
    fsync_dirs(&staged, names);
    Ok(())
}

/// The commit of a complete output (before its index says so): every listed file moved from
/// the staging directory into its final place, then the staging directory — empty by now —
/// removed. A file already in its final place (an earlier, interrupted promote) stays.
pub fn promote(out: &Path, names: &[String]) -> Result<()> {
    let staged = dir(out);
    for name in names {
        let (from, to) = (staged.join(name), out.join(name));
        if from.is_file() {
            move_file(&from, &to)?;
        } else if !to.is_file() {
            bail!(
                "{}: {name} is listed in the index but neither in {STAGED_DIR}/ nor in place",
                out.display()
            );
        }
    }
    // Every rename durable before the index that says complete is written.
    fsync_dirs(out, names);
    if !staged.exists() {
        return Ok(());
    }
    // Subdirectories (parquet's `data/`) first; anything left in them is not a listed shard
    // and stops the commit, named.
    let mut dirs = vec![staged.clone()];
    for e in std::fs::read_dir(&staged).with_context(|| format!("listing {}", staged.display()))? {
        let p = e?.path();
        if p.is_dir() {
            dirs.insert(0, p);
        }
    }
    for d in dirs {
        std::fs::remove_dir(&d).with_context(|| {
            format!(
                "removing {} (it should be empty once its shards are in place)",
                d.display()
            )
        })?;
    }
    crate::util::fsync_dir(&staged);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promote_moves_staged_files_into_place_and_removes_the_directory() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path();
        let names = vec![
            "data/part-00000.parquet".to_string(),
            "data/part-00001.parquet".to_string(),
        ];
        // One staged, one already in place (an interrupted promote).
        std::fs::create_dir_all(dir(out).join("data")).unwrap();
        std::fs::write(dir(out).join(&names[0]), b"a").unwrap();
        std::fs::create_dir_all(out.join("data")).unwrap();
        std::fs::write(out.join(&names[1]), b"b").unwrap();
        assert_eq!(locate(out, &names[0]), Some(dir(out).join(&names[0])));
        assert_eq!(locate(out, &names[1]), Some(out.join(&names[1])));
        assert_eq!(dir_of(out, false, &names[0]), dir(out));
        assert_eq!(dir_of(out, false, &names[1]), out);
        assert_eq!(dir_of(out, true, &names[0]), out);
        // A resume stages both again.
        stage(out, &names).unwrap();
        assert!(!out.join(&names[1]).exists());
        assert_eq!(std::fs::read(dir(out).join(&names[1])).unwrap(), b"b");
        promote(out, &names).unwrap();
        assert_eq!(std::fs::read(out.join(&names[0])).unwrap(), b"a");
        assert_eq!(std::fs::read(out.join(&names[1])).unwrap(), b"b");
        assert!(!dir(out).exists());
        // A listed file in neither place stops the commit, named.
        let e = promote(out, &["data/part-00002.parquet".to_string()]).unwrap_err();
        assert!(format!("{e:#}").contains("part-00002"), "{e:#}");
    }
}
