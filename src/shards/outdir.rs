//! Claiming an output directory: a command deletes or overwrites only files its own journal
//! proves it wrote, and never an input.
//!
//! Before `pack`, `merge`, `mcq` or `decontam --drop` write into a directory they *claim* it
//! ([`Claim::apply`]). Every entry already there is one of:
//! - **kept**: files this run continues from (a resumed pack's recorded shards) and the
//!   subdirectories the command owns (`parts/`, `sft/`); parquet's `data/` is checked entry by
//!   entry (`data/part-NNNNN.parquet`) by the same rules, and so is the staging directory
//!   `.incomplete/` of an unfinished pack ([`super::staged`]), each file there under the
//!   name of its final place;
//! - **removable**: files a dlm-data journal there proves this tool wrote ([`journal_files`]:
//!   the shards an `index.json` lists, the index itself, and the one shard an interrupted
//!   writer may have renamed before journaling it), and this tool's own temp files
//!   (`.NAME.tmp`, `.NAME.tmp-PID`);
//! - **anything else**: refused, naming the file (exit 2) — before anything is removed. With
//!   `--force`, files of dlm-data's own formats ([`is_own_format`]) are removable too.
//!
//! An input of the run is never removed: a claim that would remove one is refused naming it,
//! `--force` or not.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::index::Index;
use super::parquet::DATA_DIR;
use super::staged::STAGED_DIR;

/// What a command may do with the entries of its output directory.
#[derive(Debug, Default, Clone)]
pub struct Claim {
    keep: BTreeSet<String>,
    remove: BTreeSet<String>,
    force: bool,
    inputs: Vec<PathBuf>,
    what: String,
}

impl Claim {
    /// A claim for `what` (the command, for messages), `--force` as given.
    pub fn new(what: &str, force: bool) -> Claim {
        Claim {
            force,
            what: what.to_string(),
            ..Default::default()
        }
    }
    /// Entries left untouched (files this run continues from, owned subdirectories).
    pub fn keep<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Claim {
        self.keep.extend(names.into_iter().map(Into::into));
        self
    }
    /// Entries the journal proves this tool wrote: removed.
    pub fn remove<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Claim {
        self.remove.extend(names.into_iter().map(Into::into));
        self
    }
    /// Inputs of the run: never removed.
    pub fn inputs<'a, I: IntoIterator<Item = &'a Path>>(mut self, paths: I) -> Claim {
        self.inputs.extend(
            paths
                .into_iter()
                .filter_map(|p| std::fs::canonicalize(p).ok()),
        );
        self
    }

    fn is_input(&self, path: &Path) -> bool {
        let Ok(c) = std::fs::canonicalize(path) else {
            return false;
        };
        self.inputs.iter().any(|i| i == &c || i.starts_with(&c))
    }

    /// Check every entry of `dir` (missing is fine) — of its parquet `data/` subdirectory
    /// entry by entry as `data/NAME`, and of its staging directory (`.incomplete/`, where an
    /// unfinished pack keeps its shards) by the same rules under the same names — then remove
    /// the removable ones. Nothing is removed when any entry is refused.
    pub fn apply(&self, dir: &Path) -> Result<()> {
        let mut doomed = Vec::new();
        self.scan(dir, dir, "", &mut doomed)?;
        for p in doomed {
            std::fs::remove_file(&p).with_context(|| format!("removing {}", p.display()))?;
        }
        Ok(())
    }

    /// The entries of `level` — `dir` itself (`shown` empty) or its staging directory
    /// (`shown` = `.incomplete/`, the prefix messages name them with).
    fn scan(&self, dir: &Path, level: &Path, shown: &str, doomed: &mut Vec<PathBuf>) -> Result<()> {
        let rd = match std::fs::read_dir(level) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e).with_context(|| format!("listing {}", level.display())),
        };
        for e in rd {
            let e = e.with_context(|| format!("listing {}", level.display()))?;
            let name = e.file_name().to_string_lossy().into_owned();
            // The lock of the run claiming the directory is never touched.
            if shown.is_empty() && name == crate::lock::DIR_LOCK {
                continue;
            }
            let is_dir = e.file_type().map(|t| t.is_dir()).unwrap_or(false);
            if is_dir && shown.is_empty() && name == STAGED_DIR && !self.keep.contains(&name) {
                self.scan(dir, &e.path(), &format!("{STAGED_DIR}/"), doomed)?;
                continue;
            }
            if is_dir && name == DATA_DIR && !self.keep.contains(&name) {
                let sub = e.path();
                for f in
                    std::fs::read_dir(&sub).with_context(|| format!("listing {}", sub.display()))?
                {
                    let f = f.with_context(|| format!("listing {}", sub.display()))?;
                    let base = f.file_name().to_string_lossy().into_owned();
                    let is_file = f.file_type().map(|t| !t.is_dir()).unwrap_or(false);
                    let logical = format!("{DATA_DIR}/{base}");
                    doomed.extend(self.check(
                        dir,
                        (&logical, &format!("{shown}{logical}")),
                        &base,
                        f.path(),
                        is_file,
                    )?);
                }
                continue;
            }
            doomed.extend(self.check(
                dir,
                (&name, &format!("{shown}{name}")),
                &name,
                e.path(),
                !is_dir,
            )?);
        }
        Ok(())
    }

    /// One entry (`name` relative to `dir` — its final place for a staged shard — and
    /// `shown` as messages name it, `base` its file name): `None` when kept, its path when
    /// removable, an error naming it otherwise.
    fn check(
        &self,
        dir: &Path,
        (name, shown): (&str, &str),
        base: &str,
        path: PathBuf,
        is_file: bool,
    ) -> Result<Option<PathBuf>> {
        if self.keep.contains(name) {
            return Ok(None);
        }
        let removable = is_file
            && (self.remove.contains(name)
                || is_own_temp(base)
                || (self.force && is_own_format(base))
                || (self.force && name == super::card::CARD_FILE && super::card::is_card(&path)));
        if removable && self.is_input(&path) {
            return Err(crate::error::refused(format!(
                "{}: {} is an input of this {} run; it is never deleted or overwritten: choose another --out",
                dir.display(),
                shown,
                self.what
            )));
        }
        if !removable {
            let hint = if self.force || !is_file {
                "move it away or choose an empty or new --out"
            } else if is_own_format(base) {
                "choose an empty or new --out, or pass --force to clear dlm-data's own files"
            } else {
                "choose an empty or new --out (--force clears only dlm-data's own shard and index files)"
            };
            return Err(crate::error::refused(format!(
                "{}: holds {shown}, which no dlm-data journal there says this tool wrote; {} refuses to delete or overwrite it: {hint}",
                dir.display(),
                self.what
            )));
        }
        Ok(Some(path))
    }
}

/// The files an index lists (shards and their extra files) plus `index.json` itself.
pub fn journal_files(idx: &Index) -> Vec<String> {
    idx.shards
        .iter()
        .flat_map(|s| std::iter::once(s.file.clone()).chain(s.extra_files.keys().cloned()))
        .chain(std::iter::once(super::index::INDEX_FILE.to_string()))
        // The dataset card written with every complete index.
        .chain(idx.complete.then(|| super::card::CARD_FILE.to_string()))
        .collect()
}

/// The dlm-data index in `dir`, if there is one this tool wrote. An unreadable or foreign
/// `index.json` proves nothing (`None`).
pub fn own_index(dir: &Path) -> Option<Index> {
    let idx = super::index::load(dir).ok()?;
    idx.tool.starts_with("dlm-data").then_some(idx)
}

/// The files shard number `n` of `format` is written as (what an interrupted writer may have
/// renamed into place before journaling it).
pub fn shard_files(format: super::ShardFormat, n: usize) -> Vec<String> {
    use super::ShardFormat as F;
    match format {
        F::Parquet => vec![super::parquet::shard_name(n)],
        F::Mds => vec![format!("{}.zstd", super::mds::raw_name(n))],
        F::Megatron => {
            let p = super::megatron::prefix(n);
            vec![
                format!("{p}.bin"),
                format!("{p}.idx"),
                format!("{p}.rows.jsonl"),
            ]
        }
    }
}

/// A temp file this tool writes for one of its own outputs: `.NAME.tmp` (shard writers) or
/// `.NAME.tmp-PID` (atomic writes), NAME being one of [`is_own_format`]'s names.
pub fn is_own_temp(name: &str) -> bool {
    let Some(rest) = name.strip_prefix('.') else {
        return false;
    };
    let base = match rest.strip_suffix(".tmp") {
        Some(b) => b,
        None => match rest.rsplit_once(".tmp-") {
            Some((b, pid)) if !pid.is_empty() && pid.bytes().all(|c| c.is_ascii_digit()) => b,
            _ => return false,
        },
    };
    is_own_format(base)
}

/// The report `decontam` writes inside a scanned (or `--drop`) shard directory, one of
/// dlm-data's own files there (`mcq` removes a stale one when it replaces the shards).
pub const DECONTAM_REPORT: &str = "decontam.json";

/// The report `decontam --prompts DIR/NAME.jsonl` writes beside it (`NAME.decontam.json`).
pub fn prompts_decontam_report(prompts_file: &str) -> String {
    let stem = prompts_file.strip_suffix(".jsonl").unwrap_or(prompts_file);
    format!("{stem}.decontam.json")
}

/// The sha256 of what the dlm-data decontam report at `path` scanned; `None` when the file
/// is missing, unreadable or not a dlm-data decontam report (it proves nothing then).
pub fn own_decontam_report(path: &Path) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    if !v.get("tool")?.as_str()?.starts_with("dlm-data") {
        return None;
    }
    Some(v.get("scanned")?.get("sha256")?.as_str()?.to_string())
}

/// A file name of dlm-data's own output formats (what `--force` may clear).
pub fn is_own_format(name: &str) -> bool {
    if name == super::index::INDEX_FILE
        || name == "prompts.jsonl"
        || name == DECONTAM_REPORT
        || name == prompts_decontam_report("prompts.jsonl")
    {
        return true;
    }
    let numbered = |rest: &str, suffixes: &[&str]| {
        suffixes.iter().any(|s| {
            rest.strip_suffix(s)
                .is_some_and(|d| d.len() >= 5 && d.bytes().all(|b| b.is_ascii_digit()))
        })
    };
    if let Some(rest) = name.strip_prefix("part-") {
        return numbered(rest, &[".parquet", ".bin", ".idx", ".rows.jsonl"]);
    }
    if let Some(rest) = name.strip_prefix("shard.") {
        return numbered(rest, &[".mds.zstd", ".mds"]);
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        // Only temps of our own output names are ours.
        for t in [
            ".part-00000.parquet.tmp",
            ".index.json.tmp-1234",
            ".prompts.jsonl.tmp-9",
        ] {
            assert!(is_own_temp(t), "{t}");
        }
        for t in [".tmp", "x.tmp", ".notes.tmp-abc", ".notes.txt.tmp"] {
            assert!(!is_own_temp(t), "{t}");
        }
        let ours = [
            "part-00003.parquet",
            "part-00003.rows.jsonl",
            "shard.00001.mds.zstd",
        ];
        for f in ours.into_iter().chain(["index.json"]) {
            assert!(is_own_format(f), "{f}");
        }
        for f in ["part-x.parquet", "data.parquet", "part-1.parquet"] {
            assert!(!is_own_format(f), "{f}");
        }
    }

    #[test]
    fn refuses_unproven_and_removes_nothing() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("part-00000.parquet"), b"x").unwrap();
        std::fs::write(d.path().join(".index.json.tmp-7"), b"x").unwrap();
        let e = Claim::new("pack", false).apply(d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("part-00000.parquet"), "{e:#}");
        assert_eq!(crate::error::exit_code(&e), 2);
        assert!(d.path().join(".index.json.tmp-7").exists());
        // Proven: removed, with the temp file.
        Claim::new("pack", false)
            .remove(["part-00000.parquet"])
            .apply(d.path())
            .unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn data_subdirectory_is_claimed_entry_by_entry() {
        let (d, data) = crate::testkit::temp_path(DATA_DIR);
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("part-00000.parquet"), b"x").unwrap();
        std::fs::write(data.join("part-00001.parquet"), b"x").unwrap();
        std::fs::write(data.join(".part-00002.parquet.tmp"), b"x").unwrap();
        let e = Claim::new("pack", false)
            .keep(["data/part-00000.parquet"])
            .apply(d.path())
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("data/part-00001.parquet"),
            "{e:#}"
        );
        assert!(
            data.join(".part-00002.parquet.tmp").exists(),
            "nothing removed on refusal"
        );
        Claim::new("pack", false)
            .keep(["data/part-00000.parquet"])
            .remove(["data/part-00001.parquet"])
            .apply(d.path())
            .unwrap();
        let left: Vec<_> = std::fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("part-00000.parquet")]);
        std::fs::write(data.join("notes.txt"), b"x").unwrap();
        let e = Claim::new("pack", true).apply(d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("data/notes.txt"), "{e:#}");
    }

    #[test]
    fn force_clears_own_formats_only_and_never_an_input() {
        let (d, input) = crate::testkit::temp_file("part-00000.parquet", b"x");
        std::fs::write(d.path().join("part-00001.parquet"), b"x").unwrap();
        let e = Claim::new("pack", true)
            .inputs([input.as_path()])
            .apply(d.path())
            .unwrap_err();
        assert!(format!("{e:#}").contains("is an input"), "{e:#}");
        assert!(input.exists() && d.path().join("part-00001.parquet").exists());
        std::fs::write(d.path().join("notes.txt"), b"x").unwrap();
        std::fs::remove_file(&input).unwrap();
        let e = Claim::new("pack", true).apply(d.path()).unwrap_err();
        assert!(format!("{e:#}").contains("notes.txt"), "{e:#}");
        std::fs::remove_file(d.path().join("notes.txt")).unwrap();
        Claim::new("pack", true).apply(d.path()).unwrap();
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }
}
