//! What `pack` reads, in which order: the ordered list of input units (whole files) built
//! from `--input` or from a manifest + its lock + the cache, with the split policy applied,
//! the mixing order across sources, per-source token budgets, and this worker's share.
//!
//! Mixing: with no `weight` in the manifest, sources follow manifest order (each source's
//! files in path order). With weights, files are interleaved deterministically by a smooth
//! weighted round-robin over the locked file sizes: the next file comes from the source whose
//! `bytes_taken / weight` is smallest (ties: manifest order). `--tokens N` gives each source a
//! budget of `N * weight / sum(weights)` tokens (equal shares without weights); a source stops
//! taking documents once its budget is reached. A source with `epochs = K` has its files read
//! K times (all files, then all again), so a small source can supply its share deliberately;
//! a source that still runs out before its budget is reported (and refused with
//! `--strict-mixture`) by the packing step.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::hub::cache::Cache;
use crate::manifest::{Format, Lock, Manifest, Role};
use crate::sources::Template;

/// One source as `pack` sees it.
#[derive(Debug)]
pub struct SourceInfo {
    pub index: usize,
    pub name: Arc<str>,
    pub repo: String,
    pub commit: String,
    pub split: String,
    pub role: String,
    pub format: Format,
    pub tpl: Template,
    pub weight: f64,
    pub budget: Option<u64>,
    /// Times the source's files are read (the manifest's `epochs`; 1 for `--input`).
    pub epochs: u32,
}

/// One input file.
#[derive(Debug, Clone)]
pub struct Unit {
    pub source: Arc<SourceInfo>,
    /// Repo-relative path (manifest), or for `--input` the path made absolute and resolved.
    pub file: String,
    pub path: PathBuf,
    pub bytes: u64,
    /// The file's format (a source's, or for `--input` each file's own).
    pub format: Format,
    /// A remote file read by range instead of `path` (`--stream`, `--input s3://…` / `hf://…`).
    pub remote: Option<Remote>,
}

/// Where a unit's bytes come from when they are not a local file's.
#[derive(Debug, Clone)]
pub enum Remote {
    /// `--stream`, `--input hf://…`: a Hub file read by HTTP Range.
    Hub(Arc<crate::hub::stream::RemoteSpec>),
    /// `--input s3://…` (gs://, az://): a bucket object read by ranged GETs.
    Object(Arc<crate::sources::bucket::ObjectInput>),
}

/// One `--input` file, wherever it lies.
#[derive(Debug, Clone)]
pub enum InputItem {
    Local(PathBuf),
    Object(Arc<crate::sources::bucket::ObjectInput>),
    /// A Hub file pinned to its commit.
    Hub(Arc<crate::hub::stream::RemoteSpec>),
}

impl InputItem {
    /// What index.json and errors name: the local path made absolute, or the URL (an hf://
    /// one at its commit).
    pub fn name(&self) -> String {
        match self {
            InputItem::Local(p) => crate::shards::index::abs_path(p),
            InputItem::Object(o) => o.url.clone(),
            InputItem::Hub(h) => hub_url(h),
        }
    }
}

impl InputItem {
    /// The format its name says (a local path as given).
    pub fn format(&self) -> Result<Format> {
        match self {
            InputItem::Local(p) => format_of(p),
            _ => format_of(Path::new(&self.name())),
        }
    }
}

/// `hf://datasets/REPO@COMMIT/PATH`.
pub fn hub_url(h: &crate::hub::stream::RemoteSpec) -> String {
    format!("hf://datasets/{}@{}/{}", h.repo, h.commit, h.path)
}

/// The ordered inputs.
#[derive(Debug)]
pub struct Plan {
    pub sources: Vec<Arc<SourceInfo>>,
    /// Global order (all workers agree on it).
    pub units: Vec<Unit>,
    pub manifest: Option<PathBuf>,
    pub lock_sha256: Option<String>,
}

/// `10B`, `500M`, `2.5T`, `1000` → tokens.
pub fn parse_count(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1e3),
        Some('M' | 'm') => (&t[..t.len() - 1], 1e6),
        Some('B' | 'b' | 'G' | 'g') => (&t[..t.len() - 1], 1e9),
        Some('T' | 't') => (&t[..t.len() - 1], 1e12),
        _ => (t, 1.0),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a count like 10B, 500M or 1000"))?;
    if !(v.is_finite() && v > 0.0) {
        return Err(format!("{s:?}: must be positive"));
    }
    Ok((v * mult).round() as u64)
}

pub use crate::sources::files::format_of;

impl Plan {
    /// `--input PATH...` (files, directories, globs; see [`crate::sources::files`]) with the text
    /// template (`--text`, or `{COLUMN}` from `--text-column`). One source: named by the file
    /// stem when there is one file, else `input`.
    pub fn from_input(files: &[InputItem], text: &str, budget: Option<u64>) -> Result<Plan> {
        // Own data is strict: a missing or non-string field is never silently filtered.
        let tpl = Template::parse(text)
            .map_err(|e| crate::error::usage(format!("--text: {e}")))?
            .strict();
        let names: Vec<String> = files.iter().map(InputItem::name).collect();
        let name: Arc<str> = Arc::from(match &names[..] {
            [one] => std::path::Path::new(&crate::sources::codec::Codec::strip(Path::new(one)))
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "input".into()),
            _ => "input".into(),
        });
        let mut units = Vec::with_capacity(files.len());
        let src = Arc::new(SourceInfo {
            index: 0,
            name,
            repo: "local".into(),
            commit: String::new(),
            split: "train".into(),
            role: "train".into(),
            format: files[0].format()?,
            tpl,
            weight: 1.0,
            budget,
            epochs: 1,
        });
        for (item, file) in files.iter().zip(names) {
            let format = item.format()?;
            let (path, bytes, remote) = match item {
                InputItem::Local(path) => {
                    let meta = std::fs::metadata(path)
                        .with_context(|| format!("--input {}", path.display()))?;
                    (path.clone(), meta.len(), None)
                }
                InputItem::Object(o) => (
                    PathBuf::from(&o.url),
                    o.size,
                    Some(Remote::Object(o.clone())),
                ),
                InputItem::Hub(h) => (PathBuf::from(&file), h.size, Some(Remote::Hub(h.clone()))),
            };
            units.push(Unit {
                source: src.clone(),
                // Absolute and resolved, like every other path the index records: a rerun from
                // another directory (or spelled differently) is the same input. A URL as given
                // (an hf:// one at its commit).
                file,
                path,
                bytes,
                format,
                remote,
            });
        }
        Ok(Plan {
            units,
            sources: vec![src],
            manifest: None,
            lock_sha256: None,
        })
    }

    /// `--manifest FILE`: the lock beside it and the fetched files in the cache.
    pub fn from_manifest(mpath: &Path, cache: &Cache, tokens: Option<u64>) -> Result<Plan> {
        Self::from_manifest_with(mpath, Inputs::Cache(cache), tokens)
    }

    /// `--manifest FILE --stream`: the files read from the Hub by range. The lock beside the
    /// manifest pins commits and files when it exists; otherwise `list` resolves them on the
    /// Hub (a lock in memory only: `lock_sha256` is then null).
    pub fn from_manifest_stream(
        mpath: &Path,
        tokens: Option<u64>,
        list: &dyn Fn(&Manifest) -> Result<Lock>,
    ) -> Result<Plan> {
        Self::from_manifest_with(mpath, Inputs::Hub(list), tokens)
    }

    fn from_manifest_with(mpath: &Path, inputs: Inputs, tokens: Option<u64>) -> Result<Plan> {
        let m = Manifest::load_data(mpath)?;
        // The split policy before anything else (no lock read, no Hub request).
        refuse_eval_sources(&m, mpath)?;
        let (lock, lock_sha256) = load_lock(&m, mpath, inputs)?;
        let lock_path = m.lock_path();
        let any_weight = m.sources.iter().any(|s| s.weight.is_some());
        let mut sources = Vec::new();
        let mut per_source: Vec<Vec<Unit>> = Vec::new();
        for s in &m.sources {
            let at = SourceAt::new(&m, mpath, &lock_path, &lock, s, any_weight, sources.len())?;
            let mut files: Vec<&crate::manifest::LockedFile> = at.ls.files.iter().collect();
            files.sort_by(|a, b| a.path.cmp(&b.path));
            let mut units = Vec::new();
            for f in files {
                units.push(at.unit(f, inputs)?);
            }
            // `epochs = N`: the source's files N times over, epoch after epoch (a small
            // source reaching its weight deliberately).
            let one = units.len();
            for _ in 1..s.epochs {
                units.extend_from_within(..one);
            }
            sources.push(at.info);
            per_source.push(units);
        }
        if let Some(total) = tokens {
            sources = with_budgets(&sources, &mut per_source, total);
        }
        let units = if any_weight {
            interleave(per_source, &sources)
        } else {
            per_source.into_iter().flatten().collect()
        };
        Ok(Plan {
            sources,
            units,
            manifest: Some(mpath.to_path_buf()),
            lock_sha256,
        })
    }
}

/// Refused (exit 2): a source of role eval-reference or of an evaluation split.
fn refuse_eval_sources(m: &Manifest, mpath: &Path) -> Result<()> {
    for s in &m.sources {
        if s.role == Role::EvalReference {
            return Err(crate::error::refused(format!(
                "manifest {}: source {:?} has role eval-reference: benchmark data is never packed (use a train-only manifest)",
                mpath.display(),
                s.name
            )));
        }
        crate::policy::refuse_eval(&s.split, |k| {
            format!(
                "manifest {}: source {:?}: split {:?} is an evaluation split ({k:?})",
                mpath.display(),
                s.name,
                s.split
            )
        })?;
    }
    Ok(())
}

/// The lock beside the manifest and its sha256; with `--stream` and no lock, the files
/// resolved on the Hub (a lock in memory only, no sha256).
fn load_lock(m: &Manifest, mpath: &Path, inputs: Inputs) -> Result<(Lock, Option<String>)> {
    let lock_path = m.lock_path();
    Ok(match inputs {
        Inputs::Hub(list) if !lock_path.is_file() => (list(m)?, None),
        _ if !lock_path.is_file() => anyhow::bail!(
            "{}: no lock file; run `dlm-data fetch --manifest {}` first (or pack with --stream)",
            lock_path.display(),
            mpath.display()
        ),
        _ => (
            Lock::load(&lock_path)?,
            Some(crate::util::sha256_file(&lock_path)?),
        ),
    })
}

/// One manifest source with its lock entry and its [`SourceInfo`]: what its units are made
/// from.
struct SourceAt<'a> {
    m: &'a Manifest,
    mpath: &'a Path,
    lock_path: &'a Path,
    s: &'a crate::manifest::Source,
    ls: &'a crate::manifest::LockedSource,
    info: Arc<SourceInfo>,
}

impl<'a> SourceAt<'a> {
    /// Source `s` checked (a weight if any source has one, pinned by the lock, not locked as
    /// eval-reference, its text template valid) and described.
    fn new(
        m: &'a Manifest,
        mpath: &'a Path,
        lock_path: &'a Path,
        lock: &'a Lock,
        s: &'a crate::manifest::Source,
        any_weight: bool,
        index: usize,
    ) -> Result<SourceAt<'a>> {
        // (The split policy was checked before the lock.)
        if any_weight && s.weight.is_none() {
            return Err(crate::error::usage(format!(
                "manifest {}: source {:?} has no weight while others do: give every source a weight, or none",
                mpath.display(),
                s.name
            )));
        }
        let ls = lock.source(&s.name).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: source {:?} is not in the lock; run `dlm-data fetch --manifest {}`",
                lock_path.display(),
                s.name,
                mpath.display()
            )
        })?;
        if ls.role == Role::EvalReference {
            return Err(crate::error::refused(format!(
                "{}: source {:?} is locked as eval-reference: never packed",
                lock_path.display(),
                s.name
            )));
        }
        let tpl = Template::parse(&s.text).map_err(|e| {
            crate::error::usage(format!(
                "manifest {}: source {:?}: {e}",
                mpath.display(),
                s.name
            ))
        })?;
        let info = Arc::new(SourceInfo {
            index,
            name: Arc::from(s.name.as_str()),
            repo: ls.repo.clone(),
            commit: ls.commit.clone(),
            split: ls.split.clone(),
            role: "train".into(),
            format: s.format,
            tpl,
            weight: s.weight.unwrap_or(1.0),
            budget: None,
            epochs: s.epochs,
        });
        Ok(SourceAt {
            m,
            mpath,
            lock_path,
            s,
            ls,
            info,
        })
    }

    /// Locked file `f` as a unit: refused when its name is an evaluation file; a local
    /// source's own file, a Hub range reader (`--stream`), or the cached copy.
    fn unit(&self, f: &crate::manifest::LockedFile, inputs: Inputs) -> Result<Unit> {
        crate::policy::refuse_eval(&f.path, |k| {
            format!(
                "{}: source {:?}: file {} looks like an evaluation file ({k:?})",
                self.lock_path.display(),
                self.s.name,
                f.path
            )
        })?;
        if self.s.is_local() {
            return self.local_unit(f);
        }
        match inputs {
            Inputs::Cache(c) => self.cached_unit(f, c),
            Inputs::Hub(_) => Ok(self.remote_unit(f)),
        }
    }

    /// The user's own file, pinned by the lock (size checked here; `audit` re-hashes).
    fn local_unit(&self, f: &crate::manifest::LockedFile) -> Result<Unit> {
        let (s, mpath) = (self.s, self.mpath);
        let p = crate::sources::local::file_path(self.m, f);
        let len = std::fs::metadata(&p)
            .map_err(|e| {
                anyhow::anyhow!(
                    "source {:?}: locked local file {}: {e}; re-run `dlm-data fetch --manifest {}`",
                    s.name,
                    p.display(),
                    mpath.display()
                )
            })?
            .len();
        if len != f.size {
            anyhow::bail!(
                "source {:?}: {} has {len} bytes but {} in the lock: the file changed since `dlm-data fetch --manifest {}` locked it",
                s.name,
                p.display(),
                f.size,
                mpath.display()
            );
        }
        Ok(Unit {
            source: self.info.clone(),
            file: f.path.clone(),
            path: p,
            bytes: f.size,
            format: crate::sources::files::format_of_name(Path::new(&f.path)).unwrap_or(s.format),
            remote: None,
        })
    }

    /// `--stream`: the file read from the Hub by range at the locked commit.
    fn remote_unit(&self, f: &crate::manifest::LockedFile) -> Unit {
        let (s, ls) = (self.s, self.ls);
        let spec = crate::hub::stream::RemoteSpec {
            source: s.name.clone(),
            repo: ls.repo.clone(),
            revision: ls.revision.clone(),
            commit: ls.commit.clone(),
            path: f.path.clone(),
            size: f.size,
            etag: Some(f.git_oid.clone().unwrap_or_else(|| f.sha256.clone())),
        };
        Unit {
            source: self.info.clone(),
            file: f.path.clone(),
            path: PathBuf::from(format!("{}@{}/{}", ls.repo, ls.commit, f.path)),
            bytes: f.size,
            format: s.format,
            remote: Some(Remote::Hub(Arc::new(spec))),
        }
    }

    /// The fetched copy in the cache, of the locked size.
    fn cached_unit(&self, f: &crate::manifest::LockedFile, cache: &Cache) -> Result<Unit> {
        let (s, ls) = (self.s, self.ls);
        let p = cache
            .locked_file(Role::Train, &ls.repo, &ls.commit, &f.path)
            .with_context(|| format!("{}: source {:?}", self.lock_path.display(), s.name))?;
        let meta = std::fs::metadata(&p).map_err(|_| {
            anyhow::anyhow!(
                "source {:?}: locked file {} is not in the cache ({}); run `dlm-data fetch --manifest {} --cache {}`",
                s.name,
                f.path,
                p.display(),
                self.mpath.display(),
                cache.root.display()
            )
        })?;
        if meta.len() != f.size {
            anyhow::bail!(
                "source {:?}: {} has {} bytes in the cache but {} in the lock; re-run `dlm-data fetch`",
                s.name,
                p.display(),
                meta.len(),
                f.size
            );
        }
        Ok(Unit {
            source: self.info.clone(),
            file: f.path.clone(),
            path: p,
            bytes: f.size,
            format: s.format,
            remote: None,
        })
    }
}

/// `--tokens`: each source's budget, its weight's share of the total; the units re-pointed at
/// the sources with budgets.
fn with_budgets(
    sources: &[Arc<SourceInfo>],
    per_source: &mut [Vec<Unit>],
    total: u64,
) -> Vec<Arc<SourceInfo>> {
    let wsum: f64 = sources.iter().map(|s| s.weight).sum();
    let mut with_budget = Vec::new();
    for s in sources {
        let mut inner = SourceInfo {
            index: s.index,
            name: s.name.clone(),
            repo: s.repo.clone(),
            commit: s.commit.clone(),
            split: s.split.clone(),
            role: s.role.clone(),
            format: s.format,
            tpl: s.tpl.clone(),
            weight: s.weight,
            budget: None,
            epochs: s.epochs,
        };
        inner.budget = Some(if wsum > 0.0 {
            (total as f64 * s.weight / wsum).round() as u64
        } else {
            0
        });
        with_budget.push(Arc::new(inner));
    }
    for units in per_source.iter_mut() {
        for u in units.iter_mut() {
            u.source = with_budget[u.source.index].clone();
        }
    }
    with_budget
}

/// Where a manifest's files are read from.
#[derive(Clone, Copy)]
enum Inputs<'a> {
    Cache(&'a Cache),
    Hub(&'a dyn Fn(&Manifest) -> Result<Lock>),
}

/// Smooth weighted round-robin of whole files by locked bytes (sources of weight 0 are left
/// out).
fn interleave(per_source: Vec<Vec<Unit>>, sources: &[Arc<SourceInfo>]) -> Vec<Unit> {
    let mut queues: Vec<std::collections::VecDeque<Unit>> =
        per_source.into_iter().map(Into::into).collect();
    let mut taken = vec![0f64; queues.len()];
    let mut out = Vec::new();
    loop {
        let mut best: Option<usize> = None;
        for (i, q) in queues.iter().enumerate() {
            if q.is_empty() || sources[i].weight <= 0.0 {
                continue;
            }
            let key = taken[i] / sources[i].weight;
            if best.is_none_or(|b| key < taken[b] / sources[b].weight) {
                best = Some(i);
            }
        }
        let Some(i) = best else { break };
        let u = queues[i].pop_front().expect("non-empty");
        taken[i] += u.bytes.max(1) as f64;
        out.push(u);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts() {
        assert_eq!(parse_count("10B").unwrap(), 10_000_000_000);
        assert_eq!(parse_count("2.5M").unwrap(), 2_500_000);
        assert_eq!(parse_count("1000").unwrap(), 1000);
        assert!(parse_count("x").is_err());
        assert!(parse_count("-1").is_err());
    }

    #[test]
    fn interleave_follows_weights() {
        let mk = |i: usize, w: f64| {
            Arc::new(SourceInfo {
                index: i,
                name: Arc::from(format!("s{i}").as_str()),
                repo: "o/n".into(),
                commit: "c".into(),
                split: "train".into(),
                role: "train".into(),
                format: Format::Parquet,
                tpl: Template::parse("{text}").unwrap(),
                weight: w,
                budget: None,
                epochs: 1,
            })
        };
        let srcs = vec![mk(0, 3.0), mk(1, 1.0)];
        let units = |s: &Arc<SourceInfo>, n: usize| -> Vec<Unit> {
            (0..n)
                .map(|k| Unit {
                    source: s.clone(),
                    file: format!("{}-{k}", s.name),
                    path: PathBuf::new(),
                    bytes: 100,
                    format: Format::Parquet,
                    remote: None,
                })
                .collect()
        };
        let order = interleave(vec![units(&srcs[0], 6), units(&srcs[1], 2)], &srcs);
        let names: Vec<&str> = order.iter().map(|u| u.file.as_str()).collect();
        assert_eq!(
            names,
            vec!["s0-0", "s1-0", "s0-1", "s0-2", "s0-3", "s1-1", "s0-4", "s0-5"]
        );
    }
}
