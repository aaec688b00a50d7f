//! `dlm-data fetch`: the Hub client, the cache, the lock and the download log.

pub mod cache;
pub mod emulator;

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::worker::WorkerSlice;

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
    #[arg(long, default_value_t = 4)]
    pub jobs: usize,
    /// Fetch exactly the commits and files of the lock; fail if the Hub's listing differs.
    #[arg(long)]
    pub locked: bool,
    /// This worker's slice of the files, I/N (default: Slurm/Kubernetes array env, else all).
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    /// With JOB_COMPLETION_INDEX (Kubernetes Indexed Job): the number of workers.
    #[arg(long)]
    pub num_shards: Option<usize>,
}

pub fn run_fetch(_args: FetchArgs) -> Result<()> {
    anyhow::bail!("fetch: not implemented yet")
}
