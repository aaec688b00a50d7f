//! The worker executor, kept apart from the steps it runs (as datatrove keeps its local and
//! Slurm executors): which slice of the work this process owns — `--shard I/N` ([`WorkerArgs`],
//! flattened into every command that shards: fetch, pack, mcq, decontam, distill), else the
//! Slurm array or a Kubernetes Indexed Job environment, else the whole job (0/1) — where a
//! worker writes (`OUT/parts/IIIII-of-NNNNN`, [`WorkerSlice::out_dir`], [`parts_root`]), and
//! whether a set of parts is complete ([`check_worker_set`]). A directory output's parts are
//! one [`PartSet`]: listed, checked, told apart (pack or mcq, [`PartsKind`], which
//! `crate::merge` dispatches on), refused by name when a part is incomplete, and removed once
//! merged — the pack and mcq merges read the parts through it and nothing else touches
//! `parts/`.
//!
//! Slices are deterministic and disjoint: item `k` of an ordered work list belongs to worker
//! `k % N`. Every long command takes the same [`WorkerSlice`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use anyhow::Result;

/// The worker flags every command that shards takes (flattened into its arguments): `--shard
/// I/N`, else the Slurm array or Kubernetes Indexed Job environment ([`WorkerSlice::resolve`]).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct WorkerArgs {
    /// This worker's share I/N of the work (default: the Slurm / Kubernetes array environment, else all).
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    /// With JOB_COMPLETION_INDEX (Kubernetes indexed jobs): the number of workers.
    #[arg(long, value_parser = crate::sizes::workers())]
    pub num_shards: Option<usize>,
}

impl WorkerArgs {
    /// This process's slice: the flag, else the array environment, else the whole job.
    pub fn resolve(&self) -> Result<WorkerSlice> {
        WorkerSlice::resolve(self.shard, self.num_shards)
    }
}

/// Worker `index` of `count` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkerSlice {
    pub index: usize,
    pub count: usize,
}

impl WorkerSlice {
    pub const WHOLE: WorkerSlice = WorkerSlice { index: 0, count: 1 };

    pub fn is_whole(&self) -> bool {
        self.count == 1
    }

    /// Does work item `k` (in a deterministic global order) belong to this worker?
    pub fn owns(&self, k: usize) -> bool {
        k % self.count == self.index
    }

    /// `parts/00003-of-00004` — the directory a worker writes inside a shared `--out`.
    pub fn part_dir_name(&self) -> String {
        format!("{:05}-of-{:05}", self.index, self.count)
    }

    /// Where this worker writes a directory output `out` (pack, mcq): `out` itself for the
    /// whole job, else `out/parts/IIIII-of-NNNNN`.
    pub fn out_dir(&self, out: &Path) -> PathBuf {
        if self.is_whole() {
            out.to_path_buf()
        } else {
            parts_root(out).join(self.part_dir_name())
        }
    }

    /// Resolve from an explicit flag, else the environment (Slurm array, then Kubernetes).
    pub fn resolve(flag: Option<WorkerSlice>, num_shards: Option<usize>) -> Result<WorkerSlice> {
        if let Some(s) = flag {
            return Ok(s);
        }
        Self::from_env(|k| std::env::var(k).ok(), num_shards)
    }

    /// The environment lookup behind [`resolve`](Self::resolve), testable with a fake env.
    pub fn from_env(
        env: impl Fn(&str) -> Option<String>,
        num_shards: Option<usize>,
    ) -> Result<WorkerSlice> {
        let num = |k: &str| -> Result<Option<usize>> {
            match env(k) {
                None => Ok(None),
                Some(v) => v.trim().parse::<usize>().map(Some).map_err(|_| {
                    crate::error::usage(format!("environment {k}={v:?} is not a number"))
                }),
            }
        };
        if let Some(id) = num("SLURM_ARRAY_TASK_ID")? {
            let min = num("SLURM_ARRAY_TASK_MIN")?.unwrap_or(0);
            let count = match num("SLURM_ARRAY_TASK_COUNT")? {
                Some(c) => c,
                None => match num("SLURM_ARRAY_TASK_MAX")? {
                    Some(max) => max - min + 1,
                    None => {
                        return Err(crate::error::usage(
                            "SLURM_ARRAY_TASK_ID set without SLURM_ARRAY_TASK_COUNT",
                        ))
                    }
                },
            };
            if id < min {
                return Err(crate::error::usage(format!(
                    "SLURM_ARRAY_TASK_ID {id} < SLURM_ARRAY_TASK_MIN {min}"
                )));
            }
            return Self::new(id - min, count);
        }
        if let Some(idx) = num("JOB_COMPLETION_INDEX")? {
            let count = num_shards.ok_or_else(|| {
                crate::error::usage("JOB_COMPLETION_INDEX is set: pass --num-shards N with it")
            })?;
            return Self::new(idx, count);
        }
        Ok(Self::WHOLE)
    }

    pub fn new(index: usize, count: usize) -> Result<WorkerSlice> {
        if count == 0 || index >= count {
            return Err(crate::error::usage(format!(
                "worker slice {index}/{count}: need 0 <= I < N"
            )));
        }
        Ok(WorkerSlice { index, count })
    }
}

impl fmt::Display for WorkerSlice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

impl FromStr for WorkerSlice {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (i, n) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: expected I/N"))?;
        let i: usize = i
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: I is not a number"))?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("{s:?}: N is not a number"))?;
        WorkerSlice::new(i, n).map_err(|e| e.to_string())
    }
}

/// The name of the folder of workers' parts inside a shared directory output.
pub const PARTS_DIR: &str = "parts";

/// The folder of workers' parts inside a shared directory output (`OUT/parts/`).
pub fn parts_root(out: &Path) -> PathBuf {
    out.join(PARTS_DIR)
}

/// Which command's workers wrote a [`PartSet`] (what `merge` joins them with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartsKind {
    /// Some part holds a prompts.jsonl.
    Mcq,
    Pack,
}

/// The workers' parts of a shared directory output: `OUT/parts/IIIII-of-NNNNN/`, checked to
/// be one complete worker set (all of `0..N` of one `N`).
#[derive(Debug, Clone)]
pub struct PartSet {
    /// `OUT/parts/`.
    pub root: PathBuf,
    /// The part directories' names, sorted (worker order).
    pub names: Vec<String>,
    /// `N`.
    pub workers: usize,
}

impl PartSet {
    /// List and check `out`'s parts.
    pub fn open(out: &Path) -> Result<PartSet> {
        let root = parts_root(out);
        let names = part_dirs(&root)?;
        let workers = check_worker_set(&root, &names)?;
        Ok(PartSet {
            root,
            names,
            workers,
        })
    }

    /// Each part's directory, in worker order.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.names.iter().map(|n| self.root.join(n)).collect()
    }

    pub fn kind(&self) -> PartsKind {
        if self.dirs().iter().any(|d| d.join("prompts.jsonl").exists()) {
            PartsKind::Mcq
        } else {
            PartsKind::Pack
        }
    }

    /// Refused (nothing merged) when any part is incomplete, naming each (`incomplete`: "NAME
    /// (why)" lines); `what` is the parts' kind in the message ("" or "mcq ").
    pub fn refuse_incomplete(&self, what: &str, incomplete: &[String]) -> Result<()> {
        if incomplete.is_empty() {
            return Ok(());
        }
        Err(crate::error::refused(format!(
            "{}: incomplete {what}worker parts: {}; nothing merged",
            self.root.display(),
            incomplete.join(", ")
        )))
    }

    /// Remove `parts/` once its merge is complete.
    pub fn remove(&self) -> Result<()> {
        use anyhow::Context;
        std::fs::remove_dir_all(&self.root)
            .with_context(|| format!("removing {}", self.root.display()))
    }
}

/// The sub-directories of `parts_root` (workers' part directories), names sorted.
pub fn part_dirs(parts_root: &Path) -> Result<Vec<String>> {
    use anyhow::Context;
    let mut names: Vec<String> = std::fs::read_dir(parts_root)
        .with_context(|| format!("listing {}", parts_root.display()))?
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// Worker part names `IIIII-of-NNNNN` found (given as stems), checked for one `N` and all of
/// `0..N` present. Returns `N`.
pub fn check_worker_set(what: &Path, stems: &[String]) -> Result<usize> {
    let mut seen: Vec<(usize, usize)> = Vec::new();
    for s in stems {
        let parsed = s
            .split_once("-of-")
            .and_then(|(i, n)| Some((i.parse::<usize>().ok()?, n.parse::<usize>().ok()?)));
        match parsed {
            Some(p) => seen.push(p),
            None => {
                return Err(crate::error::refused(format!(
                    "{}: unexpected part {s:?} (expected IIIII-of-NNNNN)",
                    what.display()
                )))
            }
        }
    }
    let Some(&(_, n)) = seen.first() else {
        return Err(crate::error::refused(format!(
            "{}: no worker parts found",
            what.display()
        )));
    };
    if let Some((i, m)) = seen.iter().find(|(_, m)| *m != n) {
        return Err(crate::error::refused(format!(
            "{}: parts of different worker counts ({i}-of-{m} vs -of-{n}); remove the stale ones",
            what.display()
        )));
    }
    let missing: Vec<String> = (0..n)
        .filter(|i| !seen.iter().any(|(j, _)| j == i))
        .map(|i| format!("{i:05}-of-{n:05}"))
        .collect();
    if !missing.is_empty() {
        return Err(crate::error::refused(format!(
            "{}: missing worker parts {} (run those array tasks first)",
            what.display(),
            missing.join(", ")
        )));
    }
    Ok(n)
}

/// `merge --json`'s line for a directory or a distill output: the kind merged, where, from
/// how many workers, then the kind's own counts (flattened: their keys follow, in order).
#[derive(serde::Serialize)]
pub struct MergeSummary<T: serde::Serialize> {
    pub kind: &'static str,
    pub out: String,
    pub workers: usize,
    #[serde(flatten)]
    pub counts: T,
}

impl<T: serde::Serialize> MergeSummary<T> {
    /// The line as a JSON value (keys in field order).
    pub fn value(self) -> Result<serde_json::Value> {
        Ok(serde_json::to_value(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn parse_and_env() {
        assert_eq!(
            "1/4".parse::<WorkerSlice>().unwrap(),
            WorkerSlice { index: 1, count: 4 }
        );
        assert!("4/4".parse::<WorkerSlice>().is_err());
        assert!("x/4".parse::<WorkerSlice>().is_err());
        let s = WorkerSlice::from_env(
            env(&[
                ("SLURM_ARRAY_TASK_ID", "7"),
                ("SLURM_ARRAY_TASK_MIN", "5"),
                ("SLURM_ARRAY_TASK_COUNT", "4"),
            ]),
            None,
        )
        .unwrap();
        assert_eq!(s, WorkerSlice { index: 2, count: 4 });
        let s = WorkerSlice::from_env(env(&[("JOB_COMPLETION_INDEX", "3")]), Some(8)).unwrap();
        assert_eq!(s, WorkerSlice { index: 3, count: 8 });
        assert!(WorkerSlice::from_env(env(&[("JOB_COMPLETION_INDEX", "3")]), None).is_err());
        assert_eq!(
            WorkerSlice::from_env(env(&[]), None).unwrap(),
            WorkerSlice::WHOLE
        );
    }

    #[test]
    fn slices_partition() {
        let n = 4;
        for k in 0..100 {
            let owners: Vec<usize> = (0..n)
                .filter(|i| {
                    WorkerSlice {
                        index: *i,
                        count: n,
                    }
                    .owns(k)
                })
                .collect();
            assert_eq!(owners.len(), 1);
        }
    }

    #[test]
    fn a_part_set_is_listed_checked_told_apart_and_removed() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path();
        assert!(PartSet::open(out).is_err(), "no parts/");
        for n in ["00001-of-00002", "00000-of-00002"] {
            std::fs::create_dir_all(parts_root(out).join(n)).unwrap();
        }
        std::fs::write(parts_root(out).join("stray-file"), "").unwrap();
        let set = PartSet::open(out).unwrap();
        assert_eq!(set.names, ["00000-of-00002", "00001-of-00002"]);
        assert_eq!(set.workers, 2);
        assert_eq!(set.dirs()[1], out.join("parts/00001-of-00002"));
        assert_eq!(set.kind(), PartsKind::Pack);
        std::fs::write(set.dirs()[0].join("prompts.jsonl"), "").unwrap();
        assert_eq!(set.kind(), PartsKind::Mcq);
        set.refuse_incomplete("mcq ", &[]).unwrap();
        let e = set
            .refuse_incomplete("mcq ", &["00001-of-00002 (no prompts.jsonl)".into()])
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "refused: {}: incomplete mcq worker parts: 00001-of-00002 (no prompts.jsonl); nothing merged",
                parts_root(out).display()
            )
        );
        std::fs::create_dir_all(parts_root(out).join("00002-of-00003")).unwrap();
        let e = PartSet::open(out).unwrap_err().to_string();
        assert!(e.contains("different worker counts"), "{e}");
        set.remove().unwrap();
        assert!(!parts_root(out).exists());
    }
}
