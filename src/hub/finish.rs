//! Step 4 of a fetch run, once every file of this worker is good: the refs, the lock (whole
//! job only), `architecture.json` and the `--local-dir` copy of the models, then the summary
//! (a line on stderr; with `--json`, one JSON object on stdout).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};

use super::cache::Cache;
use super::plan::models::{self, ModelPlan};
use super::plan::SourcePlan;
use super::settings::FetchSettings;
use super::transfers::Fetched;
use crate::manifest::{Lock, LockedModel, LockedSource};

/// Each source's revision → commit ref in the cache (not offline: the refs are there).
pub(super) fn write_refs(cache: &Cache, plans: &[SourcePlan]) -> Result<()> {
    for p in plans {
        if p.source.revision != p.commit {
            let r = cache
                .ref_path(p.source.role, &p.source.repo, &p.source.revision)
                .with_context(|| format!("source {:?}", p.source.name))?;
            crate::util::write_if_changed(&r, p.commit.as_bytes())?;
        }
    }
    Ok(())
}

/// The whole job's `architecture.json` beside the lock (its path) and, with `--local-dir`,
/// the models copied there; a worker leaves both to the unsharded run.
pub(super) fn architecture(
    st: &FetchSettings,
    model_plans: &[ModelPlan],
    results: &[Fetched],
) -> Result<Option<String>> {
    let (cache, lock_path, slice) = (&st.cache, st.lock_path.as_path(), st.slice);
    let mut architecture = None;
    if slice.is_whole() && !model_plans.is_empty() {
        let a = models::write_architecture(cache, lock_path, model_plans)?;
        crate::progress::note(&format!("fetch: architecture {}", a.display()));
        architecture = Some(a.display().to_string());
        if let Some(dir) = &st.local_dir {
            let shas = verified_shas(results);
            let sha = |t: &super::download::FileTask| {
                shas.get(&(t.repo.clone(), t.path.clone()))
                    .cloned()
                    .unwrap_or_default()
            };
            super::local_dir::materialise(cache, dir, model_plans, &sha, st.overwrite)?;
        }
    } else if st.local_dir.is_some() {
        crate::progress::note(&format!(
            "fetch: --local-dir is left to the unsharded run (this is worker {}/{})",
            slice.index, slice.count
        ));
    }
    Ok(architecture)
}

/// What the run did, for its summary.
pub(super) struct Summary<'a> {
    pub st: &'a FetchSettings,
    pub t0: Instant,
    /// This run wrote the lock.
    pub wrote_lock: bool,
    /// A whole-job run that honoured an existing lock (and left it as it was).
    pub lock_unchanged: bool,
    pub architecture: Option<String>,
    pub plans: &'a [SourcePlan],
    pub model_plans: &'a [ModelPlan],
    pub results: &'a [Fetched],
}

impl Summary<'_> {
    fn downloaded(&self) -> u64 {
        self.results
            .iter()
            .filter_map(|r| r.3.as_ref().ok())
            .map(|o| o.downloaded)
            .sum()
    }

    fn cached(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.3.as_ref().is_ok_and(|o| o.cached))
            .count()
    }

    /// The line on stderr; with `--json`, the object on stdout.
    pub(super) fn print(&self) {
        crate::progress::note(&format!(
            "fetch: {} files ({} cached), {:.1} MB downloaded in {:.1}s; log {}{}",
            self.results.len(),
            self.cached(),
            self.downloaded() as f64 / 1e6,
            self.t0.elapsed().as_secs_f64(),
            self.st.log_path.display(),
            if self.wrote_lock {
                format!("; lock {}", self.st.lock_path.display())
            } else {
                String::new()
            }
        ));
        if self.st.json {
            crate::cron::json_line(self.json());
        }
    }

    /// The `--json` object: the totals, then every source and model with its share here.
    fn json(&self) -> serde_json::Value {
        let (results, plans) = (self.results, self.plans);
        let count = |i: usize| results.iter().filter(|r| r.1 == i).count();
        let sources: Vec<serde_json::Value> = plans
            .iter()
            .enumerate()
            .map(|(i, p)| {
                serde_json::json!({
                    "name": p.source.name,
                    "repo": p.source.repo,
                    "revision": p.source.revision,
                    "commit": p.commit,
                    "files": p.files.len(),
                    "bytes": p.files.iter().map(|f| f.size).sum::<u64>(),
                    "files_this_worker": count(i),
                })
            })
            .collect();
        let models: Vec<serde_json::Value> = self
            .model_plans
            .iter()
            .enumerate()
            .map(|(j, p)| {
                serde_json::json!({
                    "name": p.model.name,
                    "repo": p.model.repo,
                    "commit": p.commit,
                    "files": p.files.len(),
                    "bytes": p.files.iter().map(|f| f.size).sum::<u64>(),
                    "files_this_worker": count(plans.len() + j),
                })
            })
            .collect();
        let secs = self.t0.elapsed().as_secs_f64();
        let cached = self.cached();
        serde_json::json!({
            "manifest": self.st.manifest.path.display().to_string(),
            "worker": self.st.slice.to_string(),
            "offline": self.st.offline,
            "files": results.len(),
            "cached": cached,
            "fetched": results.len() - cached,
            "downloaded_bytes": self.downloaded(),
            "seconds": (secs * 1000.0).round() / 1000.0,
            "log": self.st.log_path.display().to_string(),
            "lock": self.wrote_lock.then(|| self.st.lock_path.display().to_string()),
            "lock_unchanged": self.lock_unchanged.then(|| self.st.lock_path.display().to_string()),
            "architecture": self.architecture,
            "sources": sources,
            "models": models,
        })
    }
}

/// `(repo, path) → verified sha256` of every good result.
fn verified_shas(results: &[Fetched]) -> std::collections::HashMap<(String, String), String> {
    results
        .iter()
        .filter_map(|(_, _, t, r)| {
            let o = r.as_ref().ok()?;
            Some(((t.repo.clone(), t.path.clone()), o.sha256.clone()))
        })
        .collect()
}

/// The lock: every source's files with their verified sha256, the local sources, the models.
pub(super) fn write_lock(
    path: &Path,
    plans: &[SourcePlan],
    locals: &[LockedSource],
    model_plans: &[ModelPlan],
    results: &[Fetched],
) -> Result<()> {
    let mut lock = Lock {
        version: 1,
        sources: Vec::new(),
    };
    for (i, p) in plans.iter().enumerate() {
        let files = results
            .iter()
            .filter(|r| r.1 == i)
            .map(|(_, _, t, r)| t.locked(r.as_ref().map(|o| o.sha256.clone()).unwrap_or_default()))
            .collect();
        lock.sources.push(p.locked(files));
    }
    lock.sources.extend(locals.iter().cloned());
    let shas = verified_shas(results);
    let models: Vec<LockedModel> = model_plans
        .iter()
        .map(|p| {
            models::locked_model(p, |t| {
                shas.get(&(t.repo.clone(), t.path.clone()))
                    .cloned()
                    .unwrap_or_default()
            })
        })
        .collect();
    crate::manifest::save_lock(path, &lock, &models)
}
