//! Step 2 of an mcq run: every locked parquet file of every source, its sha256 checked
//! against the lock and its path against the eval policy, read into items with one
//! provenance range per file.

use std::path::PathBuf;

use anyhow::{Context, Result};

use super::item::McqItem;
use super::read;
use crate::hub::cache::Cache;
use crate::manifest::{Lock, LockedFile, LockedSource, Manifest, Role, Source};
use crate::shards::index::ProvenanceRange;

/// Items read from the locked files, with per-file provenance ranges.
pub struct Loaded {
    pub items: Vec<McqItem>,
    pub ranges: Vec<ProvenanceRange>,
    pub skipped_empty: u64,
    pub skipped_oversize: u64,
    /// Items kept without their blank options.
    pub kept_without_blank: u64,
    /// Every row that gave no item: file, row, reason.
    pub skipped: Vec<read::Skipped>,
}

/// Most skipped rows named one by one in the log (all are in the `--json` summary).
const LOG_SKIPPED: usize = 20;

/// Refuse anything that is not a training source of a non-eval split (exit 2).
pub(super) fn check_policy(m: &Manifest) -> Result<()> {
    for s in &m.sources {
        if s.role == Role::EvalReference {
            return Err(crate::error::refused(format!(
                "manifest {}: source {:?} has role eval-reference; benchmark sets are never prompted or trained on",
                m.path.display(),
                s.name
            )));
        }
        for name in [&s.split, &s.config] {
            crate::policy::refuse_eval(name, |k| {
                format!(
                    "manifest {}: source {:?}: {name:?} is an evaluation split (keyword {k:?})",
                    m.path.display(),
                    s.name
                )
            })?;
        }
    }
    Ok(())
}

/// Read every locked parquet file of every source, verifying sha256 against the lock.
pub fn load_items(
    m: &Manifest,
    lock: &Lock,
    cache: &Cache,
    seed: u64,
    max_item_bytes: u64,
) -> Result<Loaded> {
    check_policy(m)?;
    let mut loaded = Loaded {
        items: Vec::new(),
        ranges: Vec::new(),
        skipped_empty: 0,
        skipped_oversize: 0,
        kept_without_blank: 0,
        skipped: Vec::new(),
    };
    for s in &m.sources {
        let ls = pinned_source(m, lock, s)?;
        let id_prefix = format!("{}-{}", s.name, s.split);
        let mut row_offset = 0;
        for f in parquet_files(m, ls, s)? {
            let path = verified_file(m, cache, s, ls, f)?;
            let ctx = read::FileCtx {
                prov: crate::provenance::Provenance {
                    source: s.name.clone(),
                    repo: ls.repo.clone(),
                    commit: ls.commit.clone(),
                    file: f.path.clone(),
                    row: 0,
                },
                id_prefix: &id_prefix,
                row_offset,
                seed,
                max_item_bytes,
            };
            let before = loaded.items.len();
            let st = read::read_file(&path, &ctx, &mut loaded.items)?;
            row_offset += st.rows;
            loaded.skipped_empty += st.skipped_empty;
            loaded.skipped_oversize += st.skipped_oversize;
            loaded.kept_without_blank += st.kept_without_blank;
            loaded.ranges.push(ProvenanceRange {
                source: s.name.clone(),
                repo: ls.repo.clone(),
                commit: ls.commit.clone(),
                file: f.path.clone(),
                split: s.split.clone(),
                role: "train".into(),
                row_start: 0,
                row_end: st.rows,
                documents: (loaded.items.len() - before) as u64,
                out_row_start: None,
                out_row_end: None,
            });
            log_file(s, f, &st);
            loaded.skipped.extend(st.skipped);
        }
    }
    Ok(loaded)
}

/// Source `s` as the lock pins it: a Hub training source of the same repo (a local source is
/// refused: mcq reads Hub datasets).
fn pinned_source<'a>(m: &Manifest, lock: &'a Lock, s: &Source) -> Result<&'a LockedSource> {
    let lock_path = m.lock_path();
    if s.is_local() {
        return Err(crate::error::usage(format!(
            "manifest {}: source {:?} is local (`path = …`): local sources are read by `pack` only; mcq reads Hub datasets",
            m.path.display(),
            s.name
        )));
    }
    let ls: &LockedSource = lock.source(&s.name).ok_or_else(|| {
        anyhow::anyhow!(
            "lock {}: source {:?} is not pinned; run `dlm-data fetch --manifest {}`",
            lock_path.display(),
            s.name,
            m.path.display()
        )
    })?;
    if ls.repo != s.repo || ls.role != Role::Train {
        anyhow::bail!(
            "lock {}: source {:?} is pinned to {} (role {:?}) but the manifest says {}; re-run fetch",
            lock_path.display(),
            s.name,
            ls.repo,
            ls.role,
            s.repo
        );
    }
    Ok(ls)
}

/// The source's locked parquet files in path order (at least one).
fn parquet_files<'a>(
    m: &Manifest,
    ls: &'a LockedSource,
    s: &Source,
) -> Result<Vec<&'a LockedFile>> {
    let mut files: Vec<_> = ls
        .files
        .iter()
        .filter(|f| f.path.ends_with(".parquet"))
        .collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    if files.is_empty() {
        anyhow::bail!(
            "lock {}: source {:?} has no parquet files",
            m.lock_path().display(),
            s.name
        );
    }
    Ok(files)
}

/// The cached copy of locked file `f`, refused when its name is an evaluation file (exit 2),
/// an error when it is missing or its sha256 is not the lock's.
fn verified_file(
    m: &Manifest,
    cache: &Cache,
    s: &Source,
    ls: &LockedSource,
    f: &LockedFile,
) -> Result<PathBuf> {
    let lock_path = m.lock_path();
    crate::policy::refuse_eval(&f.path, |k| {
        format!(
            "lock {}: source {:?} file {:?} is an evaluation file (keyword {k:?})",
            lock_path.display(),
            s.name,
            f.path
        )
    })?;
    let path = cache
        .locked_file(Role::Train, &ls.repo, &ls.commit, &f.path)
        .with_context(|| format!("lock {}: source {:?}", lock_path.display(), s.name))?;
    let what = format!("source {:?}: locked file {}", s.name, f.path);
    Cache::verify_locked(&path, &f.sha256, &what)?;
    Ok(path)
}

/// One file's counts in the log, and its first skipped rows by name.
fn log_file(s: &Source, f: &LockedFile, st: &read::ReadStats) {
    let kept_note = if st.kept_without_blank > 0 {
        format!(
            "; {} kept without their blank options (listed in blank_options)",
            st.kept_without_blank
        )
    } else {
        String::new()
    };
    tracing::info!(
        "{}: {} rows, {} items from {} ({} skipped{kept_note})",
        s.name,
        st.rows,
        st.items,
        f.path,
        st.skipped.len()
    );
    for k in &st.skipped[..st.skipped.len().min(LOG_SKIPPED)] {
        tracing::warn!(
            "{}: {} row {}: skipped: {}",
            s.name,
            k.file,
            k.row,
            k.reason
        );
    }
    if st.skipped.len() > LOG_SKIPPED {
        tracing::warn!(
            "{}: {}: {} more skipped rows (all listed by --json)",
            s.name,
            f.path,
            st.skipped.len() - LOG_SKIPPED
        );
    }
}
