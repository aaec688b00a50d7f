//! `fetch`'s flags resolved once into [`FetchSettings`]: paths checked, the worker slice, the
//! cache and log, the lock (when `--locked` or offline), the retry and stall policies. The
//! step files ([`super::transfers`], [`super::finish`]) read this value, never the clap struct.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::cache::Cache;
use super::retry::RetryPolicy;
use super::stall::StallPolicy;
use super::FetchArgs;
use crate::manifest::{Lock, Manifest, ModelLock};
use crate::worker::WorkerSlice;

/// One `fetch` run, resolved.
pub struct FetchSettings {
    /// The manifest, loaded (`manifest.path` is `--manifest` as given).
    pub manifest: Manifest,
    pub slice: WorkerSlice,
    pub cache: Cache,
    /// download.log, or this worker's part of it.
    pub log_path: PathBuf,
    /// The lock beside the manifest.
    pub lock_path: PathBuf,
    /// `HF_HUB_OFFLINE` set to a true value.
    pub offline: bool,
    /// The lock and its models, loaded under `--locked` or offline (then honoured, not written).
    pub locks: Option<(Lock, ModelLock)>,
    pub jobs: usize,
    /// Files at least twice this size are fetched as parallel ranged chunks.
    pub chunk_bytes: u64,
    pub retry: RetryPolicy,
    pub stall: StallPolicy,
    pub local_dir: Option<PathBuf>,
    pub overwrite: bool,
    pub json: bool,
}

impl FetchSettings {
    /// Every flag checked and read once; usage errors (exit 2) before any file is written.
    pub fn resolve(args: &FetchArgs) -> Result<FetchSettings> {
        if args.jobs == 0 {
            return Err(crate::error::usage("--jobs must be at least 1"));
        }
        let paths = [
            ("--manifest", Some(args.manifest.as_path())),
            ("--cache", args.cache.dir.as_deref()),
            ("--log", args.log.file.as_deref()),
        ];
        crate::lock::require_utf8_all(paths.iter().filter_map(|(f, p)| p.map(|p| (*f, p))))?;
        let manifest = Manifest::load(&args.manifest)?;
        if args.local_dir.is_some() && manifest.models.is_empty() {
            return Err(crate::error::usage(format!(
                "--local-dir: manifest {} declares no [[model]]",
                args.manifest.display()
            )));
        }
        let slice = args.worker.resolve()?;
        let cache = args.cache.resolve();
        let mut log_path = cache.log_path(args.log.file.as_deref());
        if !slice.is_whole() {
            log_path = super::log::part_path(&log_path, slice.index, slice.count);
        }
        let lock_path = manifest.lock_path();
        let offline = super::offline();
        let locks = if args.locked || offline {
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
        Ok(FetchSettings {
            manifest,
            slice,
            cache,
            log_path,
            lock_path,
            offline,
            locks,
            jobs: args.jobs,
            chunk_bytes: args.chunk_mb.max(1) << 20,
            retry: RetryPolicy {
                retries: args.retries,
                base: Duration::from_millis(args.retry_base_ms.max(1)),
                max: Duration::from_millis(args.retry_max_ms),
            },
            stall: StallPolicy {
                window: Duration::from_secs(args.stall_secs),
                min_bytes_per_sec: args.min_rate,
            },
            local_dir: args.local_dir.clone(),
            overwrite: args.overwrite,
            json: args.json,
        })
    }
}
