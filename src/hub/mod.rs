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
//! `[[model]]` entries ([`models`](plan::models)) go through the same download, log and lock steps (model
//! API, `models--owner--name` in the cache); a whole-job run then writes `architecture.json`
//! beside the lock and, with `--local-dir`, copies the model's files there.

pub mod cache;
pub mod client;
pub mod configs;
pub mod download;
pub mod emulator;
mod finish;
mod local_dir;
pub mod log;
pub mod names;
pub mod plan;
pub mod progress;
pub mod retry;
pub mod settings;
pub mod stall;
pub mod stream;
mod transfers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;

use crate::manifest::{Lock, ModelLock};
use client::HubClient;

/// `dlm-data fetch --manifest FILE [--cache DIR] [--log FILE] [--jobs N] [--locked]`
#[derive(Args, Debug, Clone)]
pub struct FetchArgs {
    /// Manifest of declared sources (e.g. manifests/stage1.toml).
    #[arg(long)]
    pub manifest: PathBuf,
    #[command(flatten)]
    pub cache: cache::CacheArg,
    #[command(flatten)]
    pub log: cache::LogArg,
    /// Parallel downloads (files and ranged chunks).
    #[arg(long, default_value_t = 4, value_parser = crate::sizes::usize_in(1, crate::sizes::MAX_JOBS))]
    pub jobs: usize,
    /// Fetch exactly the commits and files of the lock; fail if the Hub's listing differs.
    #[arg(long)]
    pub locked: bool,
    #[command(flatten)]
    pub worker: crate::worker::WorkerArgs,
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
    /// With --local-dir: replace files there that dlm-data did not write (a `config.json` of
    /// your own). Without it such a file is never replaced: exit 2 naming it.
    #[arg(long, requires = "local_dir")]
    pub overwrite: bool,
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
    let mut st = settings::FetchSettings::resolve(&args)?;
    let locks = st.locks.take();
    // One writer: a whole run writes the lock (unless --locked/offline) and architecture.json
    // (models) beside the manifest; a second such run on the manifest exits 75 naming this one.
    let _writer = if st.slice.is_whole() && (locks.is_none() || !st.manifest.models.is_empty()) {
        Some(crate::lock::OutputLock::beside(&st.lock_path, "fetch")?)
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
            r = fetch(&st, locks) => r,
            i = crate::signals::stopped() => Err(anyhow::Error::new(i)),
        }
    });
    // A blocking task still waiting (a cache entry's flock another fetch holds) must not keep
    // a stopped run alive.
    rt.shutdown_timeout(Duration::from_secs(2));
    r
}

/// The run, step by step (each step a function of [`plan::steps`], [`transfers`], [`finish`]).
async fn fetch(st: &settings::FetchSettings, locks: Option<(Lock, ModelLock)>) -> Result<()> {
    let (lock, model_lock) = match locks {
        Some((l, m)) => (Some(l), Some(m)),
        None => (None, None),
    };
    let (manifest, slice, cache, offline) = (&st.manifest, st.slice, &st.cache, st.offline);
    let t0 = Instant::now();
    let client = Arc::new(client(st)?);
    let lock_name = st.lock_path.display().to_string();
    let honoured = plan::steps::Honoured {
        lock: lock.as_ref(),
        model_lock: model_lock.as_ref(),
        name: &lock_name,
        offline,
    };
    // 1. Plan every source concurrently (no data downloaded yet); local sources hashed;
    //    models planned the same way.
    let plans = plan::steps::sources(&client, manifest, &honoured).await?;
    let locals = plan::steps::local_sources(manifest, &honoured)?;
    let model_plans = plan::steps::models(&client, manifest, &honoured).await?;
    // 2. The split policy, on every training source, before any download.
    plan::steps::refuse_eval_splits(&plans)?;
    // 3. This worker's files, in a global deterministic order.
    let results = transfers::download_all(st, &client, &plans, &model_plans).await?;
    // 4. Refs, then the lock (whole job only; unchanged under --locked/offline), the
    //    architecture and --local-dir, the summary.
    if !offline {
        finish::write_refs(cache, &plans)?;
    }
    let wrote_lock = slice.is_whole() && lock.is_none();
    if wrote_lock {
        finish::write_lock(&st.lock_path, &plans, &locals, &model_plans, &results)?;
    }
    let architecture = finish::architecture(st, &model_plans, &results)?;
    finish::Summary {
        st,
        t0,
        wrote_lock,
        lock_unchanged: slice.is_whole() && lock.is_some(),
        architecture,
        plans: &plans,
        model_plans: &model_plans,
        results: &results,
    }
    .print();
    Ok(())
}

/// The Hub client with `--retries`, `--retry-base-ms`, `--retry-max-ms` and the stall rule.
fn client(st: &settings::FetchSettings) -> Result<HubClient> {
    let mut client = HubClient::from_env(st.retry)?;
    client.stall = st.stall;
    Ok(client)
}

fn short(c: &str) -> &str {
    &c[..8.min(c.len())]
}
