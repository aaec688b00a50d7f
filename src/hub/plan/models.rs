//! `[[model]]` sources in `fetch`: a model repo at its pinned commit (the Hub's model API and
//! resolve URLs, cached as `models--owner--name`), the files its globs select, their lock
//! entries, `architecture.json` beside the lock, and `--local-dir`. Downloading, resume,
//! verification and download.log lines are the datasets' own ([`crate::hub::download`]).

use std::path::Path;

use anyhow::{bail, Context, Result};

use crate::hub::cache::{Area, Cache};
use crate::hub::client::HubClient;
use crate::hub::download::FileTask;
use crate::hub::names::RepoKind;
use crate::manifest::{LockedFile, LockedModel, ModelSource, Role};
use crate::model::architecture::{ArchitectureFile, ModelArchitecture, ARCHITECTURE_FILE};

/// A model resolved to its commit and files.
#[derive(Debug, Clone)]
pub struct ModelPlan {
    pub model: ModelSource,
    pub commit: String,
    /// Sorted by path.
    pub files: Vec<FileTask>,
}

fn proto(m: &ModelSource, commit: &str) -> FileTask {
    FileTask {
        source: m.name.clone(),
        kind: RepoKind::Model,
        role: Role::Train,
        repo: m.repo.clone(),
        revision: m.revision.clone(),
        commit: commit.to_string(),
        path: String::new(),
        size: 0,
        lfs_sha256: None,
        git_oid: String::new(),
    }
}

/// The locked model must be the manifest's (same repo, revision = commit).
pub fn check_lock_matches(m: &ModelSource, l: &LockedModel, lock_path: &str) -> Result<()> {
    if l.repo != m.repo
        || l.revision != m.revision
        || m.commit().is_none_or(|c| c.as_str() != l.commit)
    {
        bail!(
            "lock {lock_path} is stale for model {:?}: it pins {}@{} (commit {}), the manifest asks for {}@{} (run `dlm-data fetch` without --locked to update it)",
            m.name, l.repo, l.revision, l.commit, m.repo, m.revision
        );
    }
    Ok(())
}

/// Tasks for a locked model (offline: no listing).
pub fn tasks_from_lock(m: &ModelSource, l: &LockedModel, lock_path: &str) -> Result<Vec<FileTask>> {
    super::locked_tasks(
        &proto(m, &l.commit),
        &l.files,
        &format!("lock {lock_path}: model {:?}", m.name),
    )
}

/// Resolve one model: the revision must be the commit the Hub answers; list it; select the
/// globs' files (each explicit glob must match something). With `locked`, the same files.
pub async fn plan_model(
    client: &HubClient,
    m: &ModelSource,
    locked: Option<&LockedModel>,
) -> Result<ModelPlan> {
    debug_assert_eq!(client.kind(), RepoKind::Model);
    let ctx = || format!("model {:?} ({}@{})", m.name, m.repo, m.revision);
    // The pinned commit as read (lowercase): what the Hub is asked for and compared with.
    let pinned = m
        .commit()
        .ok_or_else(|| anyhow::anyhow!("{}: revision is not a 40-hex commit", ctx()))?;
    let commit = client
        .commit_of(&m.repo, pinned.as_str())
        .await
        .with_context(ctx)?;
    if commit != pinned.as_str() {
        bail!(
            "{}: the Hub resolves the revision to commit {commit}: a model must be pinned to its exact commit",
            ctx()
        );
    }
    let entries = client
        .list_files(&m.repo, &commit)
        .await
        .with_context(ctx)?;
    let globs = m.globs();
    let mut matchers = Vec::new();
    for g in &globs {
        matchers.push(
            globset::Glob::new(g)
                .with_context(|| format!("{}: bad glob {g:?}", ctx()))?
                .compile_matcher(),
        );
    }
    let mut hits = vec![0usize; globs.len()];
    let mut files = Vec::new();
    for e in &entries {
        let mut any = false;
        for (i, g) in matchers.iter().enumerate() {
            if g.is_match(&e.path) {
                hits[i] += 1;
                any = true;
            }
        }
        if any {
            files.push(FileTask {
                path: e.path.clone(),
                size: e.lfs.as_ref().map(|l| l.size).unwrap_or(e.size),
                lfs_sha256: e.lfs.as_ref().map(|l| l.oid.clone()),
                git_oid: e.oid.clone(),
                ..proto(m, &commit)
            });
        }
    }
    if m.files.is_some() {
        let unmatched: Vec<&String> = globs
            .iter()
            .zip(&hits)
            .filter(|(_, n)| **n == 0)
            .map(|(g, _)| g)
            .collect();
        if !unmatched.is_empty() {
            return Err(crate::error::usage(format!(
                "{}: files glob(s) {unmatched:?} match nothing at commit {commit}",
                ctx()
            )));
        }
    }
    if !files.iter().any(|f| f.path == "config.json") {
        return Err(crate::error::usage(format!(
            "{}: no config.json selected at commit {commit} (globs {globs:?})",
            ctx()
        )));
    }
    if let Some(l) = locked {
        super::compare_with_lock(&m.name, &m.repo, &commit, &files, &l.files)?;
    }
    Ok(ModelPlan {
        model: m.clone(),
        commit,
        files,
    })
}

/// The lock entry of a fetched model (`shas`: each file's verified sha256, by path).
pub fn locked_model(p: &ModelPlan, sha_of: impl Fn(&FileTask) -> String) -> LockedModel {
    let mut files: Vec<LockedFile> = p.files.iter().map(|t| t.locked(sha_of(t))).collect();
    files.sort_by(|a, b| a.path.cmp(&b.path));
    LockedModel {
        name: p.model.name.clone(),
        repo: p.model.repo.clone(),
        revision: p.model.revision.clone(),
        commit: p.commit.clone(),
        files,
    }
}

/// The snapshot directory of a fetched model.
pub fn snapshot_dir(cache: &Cache, repo: &str, commit: &str) -> std::path::PathBuf {
    cache
        .repo_dir(Area::MODEL, repo)
        .join("snapshots")
        .join(commit)
}

/// Write (update) `<lock dir>/architecture.json` with each fetched model's architecture,
/// read from its snapshot (config.json + safetensors headers). Returns the file's path.
pub fn write_architecture(
    cache: &Cache,
    lock_path: &Path,
    plans: &[ModelPlan],
) -> Result<std::path::PathBuf> {
    let mut models = Vec::new();
    for p in plans {
        let dir = snapshot_dir(cache, &p.model.repo, &p.commit);
        let mut a = ModelArchitecture::from_dir(&dir).with_context(|| {
            format!(
                "model {:?}: architecture of {}",
                p.model.name,
                dir.display()
            )
        })?;
        a.name = p.model.name.clone();
        a.repo = p.model.repo.clone();
        a.revision = p.model.revision.clone();
        a.commit = p.commit.clone();
        models.push(a);
    }
    let path = lock_path.with_file_name(ARCHITECTURE_FILE);
    ArchitectureFile::update(&path, models)?;
    Ok(path)
}
