//! `dlm-data fetch`: the declared corpora from the Hugging Face Hub at pinned commits,
//! evaluation splits refused before a byte is downloaded, every file checksummed into a
//! huggingface_hub-compatible cache, logged in `download.log` and pinned in the lock.
//!
//! The run, in order: load the manifest (and the lock for `--locked` / `HF_HUB_OFFLINE=1`);
//! plan every source ([`plan`]: commit, listing, config/split → files); refuse the whole run
//! (exit 2) if any training source touches eval data; download this worker's slice of the
//! files ([`download`]) with `--jobs` parallel transfers; append one log line per file
//! ([`log`]); write the lock only when this process is the whole job and every file is good.
//!
//! Sharded runs (`--shard I/N` or a Slurm/Kubernetes array): files are numbered in manifest
//! order, then path order; worker I takes every file k with k % N == I. Each worker writes its
//! own log `<log>.part-0000I-of-0000N` and never the lock; run one unsharded `fetch` afterwards
//! (everything is then cached, so it only re-verifies) to write the lock and a complete log.
//!
//! `[[model]]` entries ([`models`]) go through the same download, log and lock steps (model
//! API, `models--owner--name` in the cache); a whole-job run then writes `architecture.json`
//! beside the lock and, with `--local-dir`, copies the model's files there.

pub mod cache;
pub mod client;
pub mod configs;
pub mod download;
pub mod emulator;
pub mod log;
pub mod models;
pub mod names;
pub mod plan;
pub mod progress;
pub mod retry;
pub mod stall;
pub mod stream;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::manifest::{Lock, LockedFile, LockedModel, LockedSource, Manifest, ModelLock};
use crate::worker::WorkerSlice;
use cache::Cache;
use client::HubClient;
use download::{Downloader, FileTask, Outcome};
use log::{DownloadLog, LogRecord};
use models::ModelPlan;
use names::RepoKind;
use plan::SourcePlan;

/// `dlm-data fetch --manifest FILE [--cache DIR] [--log FILE] [--jobs N] [--locked]`
#[derive(Args, Debug, Clone)]
pub struct FetchArgs {
    /// Manifest of declared sources (e.g. manifests/stage1.toml).
    #[arg(long)]
    pub manifest: PathBuf,
    /// Cache root (default: HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// JSON-lines download log (default: <cache>/download.log).
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Parallel downloads (files and ranged chunks).
    #[arg(long, default_value_t = 4, value_parser = crate::sizes::usize_in(1, crate::sizes::MAX_JOBS))]
    pub jobs: usize,
    /// Fetch exactly the commits and files of the lock; fail if the Hub's listing differs.
    #[arg(long)]
    pub locked: bool,
    /// This worker's slice of the files, I/N (default: Slurm/Kubernetes array env, else all).
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    /// With JOB_COMPLETION_INDEX (Kubernetes Indexed Job): the number of workers.
    #[arg(long, value_parser = crate::sizes::workers())]
    pub num_shards: Option<usize>,
    /// Failed attempts tolerated per request/file before giving up.
    #[arg(long, default_value_t = 8, value_parser = crate::sizes::u32_in(0, crate::sizes::MAX_RETRIES))]
    pub retries: u32,
    /// First retry backoff in milliseconds (doubles each retry, with jitter; capped at
    /// --retry-max-ms).
    #[arg(long, default_value_t = 500, value_parser = crate::sizes::u64_in(0, crate::sizes::MAX_RETRY_BASE_MS))]
    pub retry_base_ms: u64,
    /// Longest wait before one retry, in milliseconds: caps the backoff and any wait a server
    /// asks for (`Retry-After`, `RateLimit: ...;t=`), however large.
    #[arg(long, default_value_t = 60_000)]
    pub retry_max_ms: u64,
    /// Files at least twice this size (MiB) are fetched as parallel ranged chunks.
    #[arg(long, default_value_t = 16, value_parser = crate::sizes::u64_in(1, crate::sizes::MAX_CHUNK_MB))]
    pub chunk_mb: u64,
    /// Also copy the manifest's `[[model]]` files here as real files (several models:
    /// `DIR/<name>/`), as `hf download --local-dir` does.
    #[arg(long)]
    pub local_dir: Option<PathBuf>,
    /// A transfer delivering less than --min-rate over this many seconds is a stall: retried
    /// (within --retries), then an error naming the file.
    #[arg(long, default_value_t = 30, value_parser = crate::sizes::u64_in(1, 86_400))]
    pub stall_secs: u64,
    /// Minimum transfer rate in bytes per second over --stall-secs.
    #[arg(long, default_value_t = 1024, value_parser = crate::sizes::u64_in(1, 1 << 40))]
    pub min_rate: u64,
    /// Print a one-line JSON summary on stdout at the end (files, cached, bytes, commits, lock).
    #[arg(long)]
    pub json: bool,
}

/// `HF_HUB_OFFLINE` set to a true value.
pub fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE")
        .map(|v| {
            matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "1" | "true" | "yes" | "on"
            )
        })
        .unwrap_or(false)
}

pub fn run_fetch(args: FetchArgs) -> Result<()> {
    if args.jobs == 0 {
        return Err(crate::error::usage("--jobs must be at least 1"));
    }
    let paths = [
        ("--manifest", Some(args.manifest.as_path())),
        ("--cache", args.cache.as_deref()),
        ("--log", args.log.as_deref()),
    ];
    crate::lock::require_utf8_all(paths.iter().filter_map(|(f, p)| p.map(|p| (*f, p))))?;
    let manifest = Manifest::load(&args.manifest)?;
    if args.local_dir.is_some() && manifest.models.is_empty() {
        return Err(crate::error::usage(format!(
            "--local-dir: manifest {} declares no [[model]]",
            args.manifest.display()
        )));
    }
    let slice = WorkerSlice::resolve(args.shard, args.num_shards)?;
    let cache = Cache::resolve(args.cache.as_deref());
    let mut log_path = args.log.clone().unwrap_or_else(|| cache.default_log());
    if !slice.is_whole() {
        log_path = log::part_path(&log_path, slice.index, slice.count);
    }
    let lock_path = manifest.lock_path();
    let offline = offline();
    let lock = if args.locked || offline {
        if !lock_path.exists() {
            let why = if offline {
                "HF_HUB_OFFLINE=1"
            } else {
                "--locked"
            };
            return Err(crate::error::usage(format!(
                "{why} needs the lock {} (run `dlm-data fetch --manifest {}` online first)",
                lock_path.display(),
                args.manifest.display()
            )));
        }
        Some((Lock::load(&lock_path)?, ModelLock::load(&lock_path)?))
    } else {
        None
    };
    // One writer: a whole run writes the lock (unless --locked/offline) and architecture.json
    // (models) beside the manifest; a second such run on the manifest exits 75 naming this one.
    let _writer = if slice.is_whole() && (lock.is_none() || !manifest.models.is_empty()) {
        Some(crate::lock::OutputLock::beside(&lock_path, "fetch")?)
    } else {
        None
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // A stop signal ends the run at once wherever it waits (a listing, a backoff): every write
    // is synchronous and atomic, so dropping the work between awaits leaves the cache, the
    // partial downloads (resume state) and the log consistent.
    let r = rt.block_on(async {
        tokio::select! {
            r = fetch(args, manifest, slice, cache, log_path, lock_path, lock, offline) => r,
            i = crate::signals::stopped() => Err(anyhow::Error::new(i)),
        }
    });
    // A blocking task still waiting (a cache entry's flock another fetch holds) must not keep
    // a stopped run alive.
    rt.shutdown_timeout(Duration::from_secs(2));
    r
}

#[allow(clippy::too_many_arguments)]
async fn fetch(
    args: FetchArgs,
    manifest: Manifest,
    slice: WorkerSlice,
    cache: Cache,
    log_path: PathBuf,
    lock_path: PathBuf,
    locks: Option<(Lock, ModelLock)>,
    offline: bool,
) -> Result<()> {
    let (lock, model_lock) = match locks {
        Some((l, m)) => (Some(l), Some(m)),
        None => (None, None),
    };
    let t0 = Instant::now();
    let retry = retry::RetryPolicy {
        retries: args.retries,
        base: Duration::from_millis(args.retry_base_ms.max(1)),
        max: Duration::from_millis(args.retry_max_ms),
    };
    let mut client = HubClient::from_env(retry)?;
    client.stall = stall::StallPolicy {
        window: Duration::from_secs(args.stall_secs),
        min_bytes_per_sec: args.min_rate,
    };
    let client = Arc::new(client);
    let lock_name = lock_path.display().to_string();

    // 1. Plan every source concurrently (no data downloaded yet).
    // (Local sources are hashed below, never planned on the Hub.)
    let hub: Vec<&crate::manifest::Source> =
        manifest.sources.iter().filter(|s| !s.is_local()).collect();
    let planned = futures::future::join_all(hub.into_iter().map(|s| {
        let (client, lock, lock_name) = (&client, &lock, &lock_name);
        async move {
            let locked = match lock {
                Some(l) => {
                    let ls = locked_source(l, &s.name, lock_name)?;
                    plan::check_lock_matches(s, ls, lock_name)?;
                    Some(ls)
                }
                None => None,
            };
            let p = match (offline, locked) {
                (true, Some(l)) => SourcePlan {
                    source: s.clone(),
                    commit: l.commit.clone(),
                    files: plan::tasks_from_lock(s, l, lock_name)?,
                },
                _ => plan::plan_source(client, s, locked).await?,
            };
            tracing::info!(
                "{}: {}@{} → {} files, {} bytes",
                s.name,
                s.repo,
                short(&p.commit),
                p.files.len(),
                p.files.iter().map(|f| f.size).sum::<u64>()
            );
            Ok::<_, anyhow::Error>(p)
        }
    }))
    .await;
    // Policy refusals first (exit 2), then any other planning error.
    let mut plans: Vec<SourcePlan> = Vec::new();
    let mut first_err = None;
    for r in planned {
        match r {
            Ok(p) => plans.push(p),
            Err(e)
                if crate::error::exit_code(&e) == 2
                    && first_err
                        .as_ref()
                        .is_none_or(|f| crate::error::exit_code(f) != 2) =>
            {
                first_err = Some(e)
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }

    // 1a. Local sources (`path = …`): hashed now; under --locked / offline they must match
    // the lock exactly.
    let mut locals = Vec::new();
    for s in manifest.sources.iter().filter(|s| s.is_local()) {
        match &lock {
            Some(l) => {
                let ls = locked_source(l, &s.name, &lock_name)?;
                let problems = crate::sources::local::verify(&manifest, s, ls);
                if !problems.is_empty() {
                    anyhow::bail!(
                        "lock {lock_name}: local source {:?} differs from its lock:\n  {}",
                        s.name,
                        problems.join("\n  ")
                    );
                }
            }
            None => {
                let ls = crate::sources::local::lock_source(&manifest, s)?;
                tracing::info!(
                    "{}: local {} → {} files, {} bytes",
                    s.name,
                    s.path.as_deref().unwrap_or_default(),
                    ls.files.len(),
                    ls.files.iter().map(|f| f.size).sum::<u64>()
                );
                locals.push(ls);
            }
        }
    }

    // 1b. Models, the same way (their own API; no split policy: a model is not data).
    let model_client = client.with_kind(RepoKind::Model);
    let mut model_plans: Vec<ModelPlan> = Vec::new();
    for m in &manifest.models {
        let locked = match &model_lock {
            Some(l) => {
                let lm = l.model(&m.name).ok_or_else(|| {
                    anyhow::anyhow!(
                        "lock {lock_name} has no model {:?} (run fetch without --locked)",
                        m.name
                    )
                })?;
                models::check_lock_matches(m, lm, &lock_name)?;
                Some(lm)
            }
            None => None,
        };
        let p = match (offline, locked) {
            (true, Some(l)) => ModelPlan {
                model: m.clone(),
                commit: l.commit.clone(),
                files: models::tasks_from_lock(m, l, &lock_name)?,
            },
            _ => models::plan_model(&model_client, m, locked).await?,
        };
        tracing::info!(
            "{}: model {}@{} → {} files, {} bytes",
            m.name,
            m.repo,
            short(&p.commit),
            p.files.len(),
            p.files.iter().map(|f| f.size).sum::<u64>()
        );
        model_plans.push(p);
    }

    // 2. The split policy, on every training source, before any download.
    let refusals: Vec<anyhow::Error> = plans
        .iter()
        .filter_map(|p| {
            let names: Vec<String> = p.files.iter().map(|f| f.path.clone()).collect();
            plan::policy_check(&p.source, &names)
        })
        .collect();
    if !refusals.is_empty() {
        let msg = refusals
            .iter()
            .map(|e| format!("{e}"))
            .collect::<Vec<_>>()
            .join("\n  ");
        return Err(crate::error::refused(
            msg.trim_start_matches("refused: ")
                .replace("\n  refused: ", "\n  "),
        ));
    }

    // 3. This worker's files, in a global deterministic order.
    let all: Vec<(usize, FileTask)> = plans
        .iter()
        .map(|p| &p.files)
        .chain(model_plans.iter().map(|p| &p.files))
        .enumerate()
        .flat_map(|(i, files)| files.iter().map(move |f| (i, f.clone())))
        .collect();
    let mine: Vec<(usize, usize, FileTask)> = all
        .into_iter()
        .enumerate()
        .filter(|(k, _)| slice.owns(*k))
        .map(|(k, (i, f))| (k, i, f))
        .collect();
    let dlog = Arc::new(DownloadLog::open(&log_path)?);
    let dl = Arc::new(
        Downloader::new(
            client.clone(),
            cache.clone(),
            args.jobs,
            args.chunk_mb.max(1) << 20,
        )
        .expect_bytes(mine.iter().map(|(_, _, t)| t.size).sum()),
    );
    let file_sem = Arc::new(tokio::sync::Semaphore::new(args.jobs));
    let mut handles = Vec::new();
    for (k, i, t) in mine {
        let (dl, dlog, file_sem) = (dl.clone(), dlog.clone(), file_sem.clone());
        handles.push(tokio::spawn(async move {
            let _p = file_sem.acquire_owned().await?;
            let r = if offline {
                offline_file(&dl.cache, &t).await
            } else {
                dl.fetch(&t).await
            };
            let url = dl
                .client_for(t.kind)
                .resolve_url(&t.repo, &t.commit, &t.path);
            let rec = record(&t, &url, &r);
            dlog.append_new(&rec)?;
            match &r {
                Ok(o) => {
                    // Bytes not streamed now: a cached file, a resumed file's earlier part.
                    dl.progress.add_done(t.size.saturating_sub(o.downloaded));
                    // One line per file is progress: `--quiet` keeps failures only.
                    if !crate::report::settings().quiet {
                        dl.progress.println(&file_line(&t, o))
                    }
                }
                Err(e) => dl.progress.println(&format!(
                    "FAILED {}@{} {}: {e:#}",
                    t.repo,
                    short(&t.commit),
                    t.path
                )),
            }
            Ok::<_, anyhow::Error>((k, i, t, r))
        }));
    }
    let mut results: Vec<(usize, usize, FileTask, Result<Outcome>)> = Vec::new();
    for h in handles {
        results.push(h.await.context("download task panicked")??);
    }
    dl.progress.finish();
    results.sort_by_key(|r| r.0);
    let failures: Vec<String> = results
        .iter()
        .filter_map(|(_, _, t, r)| {
            r.as_ref()
                .err()
                .map(|e| format!("{}/{}: {e:#}", t.repo, t.path))
        })
        .collect();
    let downloaded: u64 = results
        .iter()
        .filter_map(|r| r.3.as_ref().ok())
        .map(|o| o.downloaded)
        .sum();
    let cached = results
        .iter()
        .filter(|r| r.3.as_ref().is_ok_and(|o| o.cached))
        .count();
    if !failures.is_empty() {
        anyhow::bail!(
            "{} of {} files failed (see {}); no lock written:\n  {}",
            failures.len(),
            results.len(),
            log_path.display(),
            failures.join("\n  ")
        );
    }

    // 4. Refs, then the lock (whole job only; unchanged under --locked/offline).
    if !offline {
        for p in &plans {
            if p.source.revision != p.commit {
                let r = cache
                    .ref_path(p.source.role, &p.source.repo, &p.source.revision)
                    .with_context(|| format!("source {:?}", p.source.name))?;
                crate::util::write_if_changed(&r, p.commit.as_bytes())?;
            }
        }
    }
    let wrote_lock = slice.is_whole() && lock.is_none();
    if wrote_lock {
        write_lock(&lock_path, &plans, &locals, &model_plans, &results)?;
    }
    let mut architecture = None;
    if slice.is_whole() && !model_plans.is_empty() {
        let a = models::write_architecture(&cache, &lock_path, &model_plans)?;
        crate::report::note(&format!("fetch: architecture {}", a.display()));
        architecture = Some(a.display().to_string());
        if let Some(dir) = &args.local_dir {
            let shas = verified_shas(&results);
            models::materialise(&cache, dir, &model_plans, &|t| {
                shas.get(&(t.repo.clone(), t.path.clone()))
                    .cloned()
                    .unwrap_or_default()
            })?;
        }
    } else if args.local_dir.is_some() {
        crate::report::note(&format!(
            "fetch: --local-dir is left to the unsharded run (this is worker {}/{})",
            slice.index, slice.count
        ));
    }
    crate::report::note(&format!(
        "fetch: {} files ({} cached), {:.1} MB downloaded in {:.1}s; log {}{}",
        results.len(),
        cached,
        downloaded as f64 / 1e6,
        t0.elapsed().as_secs_f64(),
        log_path.display(),
        if wrote_lock {
            format!("; lock {}", lock_path.display())
        } else {
            String::new()
        }
    ));
    if args.json {
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
        let models: Vec<serde_json::Value> = model_plans
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
        let secs = t0.elapsed().as_secs_f64();
        crate::cron::json_line(serde_json::json!({
            "manifest": args.manifest.display().to_string(),
            "worker": slice.to_string(),
            "offline": offline,
            "files": results.len(),
            "cached": cached,
            "fetched": results.len() - cached,
            "downloaded_bytes": downloaded,
            "seconds": (secs * 1000.0).round() / 1000.0,
            "log": log_path.display().to_string(),
            "lock": wrote_lock.then(|| lock_path.display().to_string()),
            "lock_unchanged": (slice.is_whole() && lock.is_some()).then(|| lock_path.display().to_string()),
            "architecture": architecture,
            "sources": sources,
            "models": models,
        }));
    }
    Ok(())
}

fn short(c: &str) -> &str {
    &c[..8.min(c.len())]
}

fn file_line(t: &FileTask, o: &Outcome) -> String {
    if o.cached {
        format!(
            "cached  {}@{} {} ({} B, verified)",
            t.repo,
            short(&t.commit),
            t.path,
            t.size
        )
    } else {
        format!(
            "fetched {}@{} {} ({} B, {:.1} MB/s, {} attempt{})",
            t.repo,
            short(&t.commit),
            t.path,
            t.size,
            o.downloaded as f64 / 1e6 / o.seconds.max(1e-6),
            o.attempts,
            if o.attempts == 1 { "" } else { "s" }
        )
    }
}

fn record(t: &FileTask, url: &str, r: &Result<Outcome>) -> LogRecord {
    let (sha256, verified, cached, attempts, seconds, downloaded, error) = match r {
        Ok(o) => (
            o.sha256.clone(),
            true,
            o.cached,
            o.attempts,
            o.seconds,
            o.downloaded,
            None,
        ),
        Err(e) => (
            t.lfs_sha256.clone().unwrap_or_default(),
            false,
            false,
            0,
            0.0,
            0,
            Some(format!("{e:#}")),
        ),
    };
    LogRecord {
        time: log::now_rfc3339(),
        source: t.source.clone(),
        role: t.role,
        repo: t.repo.clone(),
        revision: t.revision.clone(),
        commit: t.commit.clone(),
        path: t.path.clone(),
        url: url.to_string(),
        bytes: t.size,
        sha256,
        verified,
        cached,
        attempts,
        seconds,
        downloaded,
        error,
    }
}

async fn offline_file(cache: &Cache, t: &FileTask) -> Result<Outcome> {
    let t0 = Instant::now();
    let blob = cache.blob_path(t.area(), &t.repo, t.etag())?;
    if !blob.is_file() {
        anyhow::bail!(
            "HF_HUB_OFFLINE=1 and {}@{} {} is not in the cache ({})",
            t.repo,
            short(&t.commit),
            t.path,
            blob.display()
        );
    }
    let (t2, b2) = (t.clone(), blob.clone());
    let sha = tokio::task::spawn_blocking(move || download::verify_file(&t2, &b2)).await??;
    download::link_snapshot(cache, t, &blob)?;
    Ok(Outcome {
        sha256: sha,
        downloaded: 0,
        attempts: 0,
        cached: true,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// `(repo, path) → verified sha256` of every good result.
fn verified_shas(
    results: &[(usize, usize, FileTask, Result<Outcome>)],
) -> std::collections::HashMap<(String, String), String> {
    results
        .iter()
        .filter_map(|(_, _, t, r)| {
            let o = r.as_ref().ok()?;
            Some(((t.repo.clone(), t.path.clone()), o.sha256.clone()))
        })
        .collect()
}

/// Source `name` of the lock being honoured (`--locked` / offline), or an error saying to
/// fetch without `--locked`.
fn locked_source<'a>(lock: &'a Lock, name: &str, lock_name: &str) -> Result<&'a LockedSource> {
    lock.source(name).ok_or_else(|| {
        anyhow::anyhow!("lock {lock_name} has no source {name:?} (run fetch without --locked)")
    })
}

fn write_lock(
    path: &Path,
    plans: &[SourcePlan],
    locals: &[LockedSource],
    model_plans: &[ModelPlan],
    results: &[(usize, usize, FileTask, Result<Outcome>)],
) -> Result<()> {
    let mut lock = Lock {
        version: 1,
        sources: Vec::new(),
    };
    for (i, p) in plans.iter().enumerate() {
        let mut files: Vec<LockedFile> = results
            .iter()
            .filter(|r| r.1 == i)
            .map(|(_, _, t, r)| LockedFile {
                path: t.path.clone(),
                size: t.size,
                sha256: r.as_ref().map(|o| o.sha256.clone()).unwrap_or_default(),
                git_oid: t.lfs_sha256.is_none().then(|| t.git_oid.clone()),
            })
            .collect();
        files.sort_by(|a, b| a.path.cmp(&b.path));
        lock.sources.push(LockedSource {
            name: p.source.name.clone(),
            repo: p.source.repo.clone(),
            revision: p.source.revision.clone(),
            commit: p.commit.clone(),
            config: p.source.config.clone(),
            split: p.source.split.clone(),
            role: p.source.role,
            files,
        });
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
