//! From a manifest source to the exact files to fetch: revision → commit, listing,
//! config/split → files ([`crate::hub::configs`]), the split policy, and `--locked` checks
//! against the lock. Everything here happens before a single data byte is downloaded; the
//! fetch run's planning steps over every source and model are [`steps`], a model's own
//! planning (and what a fetched model leaves behind) [`models`].

pub mod models;
pub(super) mod steps;

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Context, Result};

use crate::digest::{HexDigest, SHA1_HEX, SHA256_HEX};
use crate::hub::client::{HubClient, TreeEntry};
use crate::hub::configs;
use crate::hub::download::FileTask;
use crate::hub::names::{check_repo_path, shown, RepoKind};
use crate::hub::retry::{as_transient, transient};
use crate::manifest::{LockedFile, LockedSource, Role, Source};

/// A source resolved to a commit and its files.
#[derive(Debug, Clone)]
pub struct SourcePlan {
    pub source: Source,
    pub commit: String,
    /// Sorted by path.
    pub files: Vec<FileTask>,
}

impl SourcePlan {
    /// This source's lock entry: its declaration at the resolved commit, with `files`
    /// (sorted by path here).
    pub fn locked(&self, mut files: Vec<LockedFile>) -> LockedSource {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let s = &self.source;
        LockedSource {
            name: s.name.clone(),
            repo: s.repo.clone(),
            revision: s.revision.clone(),
            commit: self.commit.clone(),
            config: s.config.clone(),
            split: s.split.clone(),
            role: s.role,
            files,
        }
    }
}

fn task_of(s: &Source, commit: &str, e: &TreeEntry) -> FileTask {
    FileTask {
        source: s.name.clone(),
        kind: RepoKind::Dataset,
        role: s.role,
        repo: s.repo.clone(),
        revision: s.revision.clone(),
        commit: commit.to_string(),
        path: e.path.clone(),
        size: e.lfs.as_ref().map(|l| l.size).unwrap_or(e.size),
        lfs_sha256: e.lfs.as_ref().map(|l| l.oid.clone()),
        git_oid: e.oid.clone(),
    }
}

/// Tasks for a locked source (offline mode: no listing). The lock's paths and digests are
/// checked as a listing's are: they name files in the cache.
pub fn tasks_from_lock(s: &Source, l: &LockedSource, lock_path: &str) -> Result<Vec<FileTask>> {
    let proto = FileTask {
        source: s.name.clone(),
        kind: RepoKind::Dataset,
        role: s.role,
        repo: s.repo.clone(),
        revision: s.revision.clone(),
        commit: l.commit.clone(),
        path: String::new(),
        size: 0,
        lfs_sha256: None,
        git_oid: String::new(),
    };
    locked_tasks(
        &proto,
        &l.files,
        &format!("lock {lock_path}: source {:?}", s.name),
    )
}

/// `proto` (everything but the file fields) for each locked file, paths and digests checked.
pub fn locked_tasks(proto: &FileTask, files: &[LockedFile], what: &str) -> Result<Vec<FileTask>> {
    files
        .iter()
        .map(|f| {
            let ctx = || format!("{what}: file {:?}", f.path);
            check_repo_path(&f.path).with_context(ctx)?;
            let Some(sha256) = HexDigest::parse(&f.sha256, SHA256_HEX) else {
                bail!(
                    "{}: field `sha256` {} is not 64 hex digits",
                    ctx(),
                    shown(&f.sha256)
                );
            };
            let git_oid = match f.git_oid.as_deref() {
                None => None,
                Some(o) => match HexDigest::parse(o, SHA1_HEX) {
                    Some(d) => Some(d.into_string()),
                    None => bail!(
                        "{}: field `git_oid` {} is not 40 hex digits",
                        ctx(),
                        shown(o)
                    ),
                },
            };
            Ok(FileTask {
                path: f.path.clone(),
                size: f.size,
                lfs_sha256: git_oid.is_none().then(|| sha256.into_string()),
                git_oid: git_oid.unwrap_or_default(),
                ..proto.clone()
            })
        })
        .collect()
}

/// The lock entry must describe the same source as the manifest, at a 40-hex commit.
pub fn check_lock_matches(s: &Source, l: &LockedSource, lock_path: &str) -> Result<()> {
    if HexDigest::parse(&l.commit, SHA1_HEX).is_none() {
        bail!(
            "lock {lock_path}: source {:?}: field `commit` {} is not a 40-hex git commit",
            s.name,
            shown(&l.commit)
        );
    }
    if l.repo != s.repo
        || l.revision != s.revision
        || l.config != s.config
        || l.split != s.split
        || l.role != s.role
    {
        bail!(
            "lock {lock_path} is stale for source {:?}: it pins {}@{} config {} split {}, the manifest asks for {}@{} config {} split {} (run `dlm-data fetch` without --locked to update it)",
            s.name, l.repo, l.revision, l.config, l.split, s.repo, s.revision, s.config, s.split
        );
    }
    Ok(())
}

/// Resolve one source. With `locked`, list the locked commit and require the same files.
pub async fn plan_source(
    client: &HubClient,
    s: &Source,
    locked: Option<&LockedSource>,
) -> Result<SourcePlan> {
    let ctx = || format!("source {:?} ({}@{})", s.name, s.repo, s.revision);
    let commit = match locked {
        Some(l) => l.commit.clone(),
        None => client
            .commit_of(&s.repo, &s.revision)
            .await
            .with_context(ctx)?,
    };
    let entries = client
        .list_files(&s.repo, &commit)
        .await
        .with_context(ctx)?;
    let paths: Vec<String> = entries.iter().map(|e| e.path.clone()).collect();
    let readme = match (&s.files, entries.iter().find(|e| e.path == "README.md")) {
        (None, Some(e)) => Some(
            fetch_small(client, &s.repo, &commit, e)
                .await
                .with_context(ctx)?,
        ),
        _ => None,
    };
    let selected = configs::files_for(
        &paths,
        readme.as_deref(),
        &s.config,
        &s.split,
        s.files.as_deref(),
    );
    let selected = match selected {
        Ok((f, _)) => f,
        Err(e) => {
            // An eval split is refused even when it does not resolve to files.
            if s.role == Role::Train && crate::policy::is_eval_name(&s.split) {
                return Err(refusal(s, &[]));
            }
            return Err(e.context(ctx()));
        }
    };
    if selected.is_empty() {
        return Err(crate::error::usage(format!(
            "{}: config {:?} split {:?} selects no files at commit {commit}",
            ctx(),
            s.config,
            s.split
        )));
    }
    let by_path: BTreeMap<&str, &TreeEntry> =
        entries.iter().map(|e| (e.path.as_str(), e)).collect();
    let files: Vec<FileTask> = selected
        .iter()
        .map(|p| task_of(s, &commit, by_path[p.as_str()]))
        .collect();
    if let Some(l) = locked {
        compare_with_lock(&s.name, &s.repo, &commit, &files, &l.files)?;
    }
    Ok(SourcePlan {
        source: s.clone(),
        commit,
        files,
    })
}

/// A small regular file (README.md) into memory, verified against its git blob sha1.
async fn fetch_small(
    client: &HubClient,
    repo: &str,
    commit: &str,
    e: &TreeEntry,
) -> Result<String> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let r: Result<Vec<u8>> = async {
            let (resp, _) = client.resolve(repo, commit, &e.path, None).await?;
            let size = e.lfs.as_ref().map_or(e.size, |l| l.size);
            let limit = size.min(crate::hub::client::MAX_API_BODY as u64) as usize;
            let bytes = crate::hub::client::api_body(
                &format!("{repo}/{}", e.path),
                &client.resolve_url(repo, commit, &e.path),
                resp,
                limit,
            )
            .await?;
            if e.lfs.is_none() && crate::util::git_blob_sha1(&bytes) != e.oid {
                return Err(transient(format!(
                    "{repo}/{}: git blob sha1 mismatch",
                    e.path
                )));
            }
            Ok(bytes.to_vec())
        }
        .await;
        match r {
            Ok(b) => {
                return String::from_utf8(b).map_err(|_| anyhow!("{repo}/{}: not UTF-8", e.path))
            }
            Err(err) => client.backoff_or_fail(attempt, err).await?,
        }
    }
}

/// The refusal for a training source whose split or files are evaluation data.
pub fn refusal(s: &Source, files: &[String]) -> anyhow::Error {
    let bad: Vec<&String> = files
        .iter()
        .filter(|f| crate::policy::is_eval_name(f))
        .collect();
    let mut why = Vec::new();
    if let Some(k) = crate::policy::eval_keyword(&s.split) {
        why.push(format!(
            "split {:?} is an evaluation split (keyword {k:?})",
            s.split
        ));
    }
    if !bad.is_empty() {
        why.push(format!(
            "evaluation files selected: {}",
            bad.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    crate::error::refused(format!(
        "source {:?} ({} config {:?} split {:?}): {}; training sources may not use test/validation/dev data (nothing was downloaded)",
        s.name,
        s.repo,
        s.config,
        s.split,
        why.join("; ")
    ))
}

/// `Some(refusal)` when a training source's split or any selected file is eval data.
pub fn policy_check(s: &Source, files: &[String]) -> Option<anyhow::Error> {
    if s.role != Role::Train {
        return None;
    }
    let bad = crate::policy::is_eval_name(&s.split)
        || files.iter().any(|f| crate::policy::is_eval_name(f));
    bad.then(|| refusal(s, files))
}

/// `--locked`: the listing's selected files must be exactly the locked ones, unchanged.
pub fn compare_with_lock(
    name: &str,
    repo: &str,
    commit: &str,
    files: &[FileTask],
    locked: &[LockedFile],
) -> Result<()> {
    let want: BTreeMap<&str, &LockedFile> = locked.iter().map(|f| (f.path.as_str(), f)).collect();
    let have: BTreeMap<&str, &FileTask> = files.iter().map(|f| (f.path.as_str(), f)).collect();
    let mut diffs = Vec::new();
    for (p, f) in &want {
        match have.get(p) {
            None => diffs.push(format!("{p} is locked but no longer listed")),
            Some(t) => {
                let same = t.size == f.size
                    && match (&t.lfs_sha256, &f.git_oid) {
                        (Some(sha), _) => *sha == f.sha256,
                        (None, Some(oid)) => *oid == t.git_oid,
                        (None, None) => false,
                    };
                if !same {
                    diffs.push(format!(
                        "{p} changed (locked size {} sha256 {}, listed size {} oid {})",
                        f.size,
                        f.sha256,
                        t.size,
                        t.lfs_sha256.as_deref().unwrap_or(&t.git_oid)
                    ));
                }
            }
        }
    }
    for p in have.keys() {
        if !want.contains_key(p) {
            diffs.push(format!("{p} is listed but not locked"));
        }
    }
    if !diffs.is_empty() {
        bail!(
            "--locked: the Hub's listing of {}@{commit} for {:?} no longer matches the lock: {}",
            repo,
            name,
            diffs.join("; ")
        );
    }
    Ok(())
}

/// Whether an error is worth a retry at the plan level (used by callers for messages).
pub fn is_transient(e: &anyhow::Error) -> bool {
    as_transient(e).is_some()
}
