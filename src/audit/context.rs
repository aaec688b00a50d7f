//! What the audit checks against: the manifests and their locks, the cache, the download log,
//! and the set of eval-reference files (from eval-reference locks and the cache's
//! `eval-reference/` area) that must never appear as training input.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::hub::cache::Cache;
use crate::manifest::{Lock, LockedFile, LockedSource, Manifest, Role};

/// `(repo, commit, path)`
pub type FileKey = (String, String, String);

/// A locked training file and the source it belongs to.
#[derive(Debug, Clone)]
pub struct TrainFile {
    pub source: String,
    pub split: String,
    pub config: String,
    pub sha256: String,
    pub size: u64,
}

pub struct ManifestSet {
    pub manifest: Manifest,
    pub lock_path: PathBuf,
    /// `Err(message)` when the lock is missing or unreadable.
    pub lock: Result<Lock, String>,
    pub lock_sha256: Option<String>,
}

impl ManifestSet {
    /// Every file the lock pins for a source `keep` selects, with its source (none when the
    /// lock is unreadable).
    pub fn locked_files<'a>(
        &'a self,
        keep: impl Fn(&LockedSource) -> bool + 'a,
    ) -> impl Iterator<Item = (&'a LockedSource, &'a LockedFile)> + 'a {
        self.lock
            .iter()
            .flat_map(|l| &l.sources)
            .filter(move |ls| keep(ls))
            .flat_map(|ls| ls.files.iter().map(move |f| (ls, f)))
    }
}

/// One line of download.log (fields of contract 1 the audit uses).
#[derive(Debug, Clone, Deserialize)]
pub struct LogLine {
    #[serde(default)]
    pub source: String,
    #[serde(default)]
    pub role: String,
    pub repo: String,
    #[serde(default)]
    pub commit: String,
    pub path: String,
    #[serde(default)]
    pub sha256: Option<String>,
    #[serde(default)]
    pub verified: bool,
    #[serde(default)]
    pub error: Option<String>,
}

pub struct Ctx {
    pub sets: Vec<ManifestSet>,
    pub cache: Cache,
    pub log_path: PathBuf,
    /// Parsed lines with their 1-based line numbers; `Err` for a missing log.
    pub log: Result<Vec<(usize, LogLine)>, String>,
    /// Lines that are not valid JSON log entries: (line, message).
    pub log_bad: Vec<(usize, String)>,
    pub train_files: HashMap<FileKey, TrainFile>,
    pub eval_files: HashSet<FileKey>,
    pub lock_shas: HashSet<String>,
}

fn load_log(path: &Path) -> (Result<Vec<(usize, LogLine)>, String>, Vec<(usize, String)>) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return (Err(format!("{}: {e}", path.display())), Vec::new()),
    };
    let mut ok = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<LogLine>(line) {
            Ok(l) => ok.push((i + 1, l)),
            Err(e) => bad.push((i + 1, e.to_string())),
        }
    }
    (Ok(ok), bad)
}

/// Files fetched into `<cache>/eval-reference/datasets--o--n/snapshots/<commit>/<path>`.
fn cached_eval_files(cache: &Cache) -> HashSet<FileKey> {
    let mut out = HashSet::new();
    let root = cache.role_root(Role::EvalReference);
    let Ok(repos) = std::fs::read_dir(&root) else {
        return out;
    };
    for r in repos.flatten() {
        let name = r.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("datasets--") else {
            continue;
        };
        let repo = rest.replacen("--", "/", 1);
        let Ok(commits) = std::fs::read_dir(r.path().join("snapshots")) else {
            continue;
        };
        for c in commits.flatten() {
            let commit = c.file_name().to_string_lossy().into_owned();
            let mut stack = vec![c.path()];
            while let Some(d) = stack.pop() {
                let Ok(entries) = std::fs::read_dir(&d) else {
                    continue;
                };
                for e in entries.flatten() {
                    let p = e.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else if let Ok(rel) = p.strip_prefix(c.path()) {
                        out.insert((
                            repo.clone(),
                            commit.clone(),
                            rel.to_string_lossy().into_owned(),
                        ));
                    }
                }
            }
        }
    }
    out
}

impl Ctx {
    pub fn load(
        manifests: &[PathBuf],
        cache: Option<&Path>,
        log: Option<&Path>,
    ) -> anyhow::Result<Ctx> {
        let cache = Cache::resolve(cache);
        let log_path = cache.log_path(log);
        let mut sets = Vec::new();
        for m in manifests {
            let manifest = Manifest::load(m)?;
            let lock_path = manifest.lock_path();
            let lock = Lock::load(&lock_path).map_err(|e| format!("{e:#}"));
            let lock_sha256 = crate::util::sha256_file(&lock_path).ok();
            sets.push(ManifestSet {
                manifest,
                lock_path,
                lock,
                lock_sha256,
            });
        }
        let (log, log_bad) = load_log(&log_path);
        let mut train_files = HashMap::new();
        let mut eval_files = cached_eval_files(&cache);
        let mut lock_shas = HashSet::new();
        for s in &sets {
            if let Some(h) = &s.lock_sha256 {
                lock_shas.insert(h.clone());
            }
            let Ok(lock) = &s.lock else { continue };
            for ls in &lock.sources {
                for f in &ls.files {
                    let key = (ls.repo.clone(), ls.commit.clone(), f.path.clone());
                    match ls.role {
                        Role::EvalReference => {
                            eval_files.insert(key);
                        }
                        Role::Train => {
                            train_files.insert(
                                key,
                                TrainFile {
                                    source: ls.name.clone(),
                                    split: ls.split.clone(),
                                    config: ls.config.clone(),
                                    sha256: f.sha256.clone(),
                                    size: f.size,
                                },
                            );
                        }
                    }
                }
            }
        }
        Ok(Ctx {
            sets,
            cache,
            log_path,
            log,
            log_bad,
            train_files,
            eval_files,
            lock_shas,
        })
    }
}
