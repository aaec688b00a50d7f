//! `dlm-data decontam`: an n-gram index over benchmark eval sets, scanned against shards or
//! prompts; every overlap reported, `--drop` writes a filtered copy.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::worker::WorkerSlice;

#[derive(Args, Debug, Clone)]
pub struct DecontamArgs {
    /// Benchmark eval sets: local parquet/jsonl files or manifests with role = "eval-reference".
    #[arg(long, required = true, num_args = 1..)]
    pub against: Vec<PathBuf>,
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub shards: Option<PathBuf>,
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    #[arg(long, default_value_t = 13)]
    pub ngram: usize,
    #[arg(long)]
    pub drop: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    #[arg(long)]
    pub num_shards: Option<usize>,
}

pub fn run(_args: DecontamArgs) -> Result<()> {
    anyhow::bail!("decontam: not implemented yet")
}
