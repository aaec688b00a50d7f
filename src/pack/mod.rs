//! `dlm-data pack`: stream sources, tokenize in parallel, pack fixed-length rows, write shards.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::worker::WorkerSlice;

/// Output shard format.
#[derive(
    clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ShardFormat {
    Parquet,
    Mds,
    Megatron,
}

/// `dlm-data pack (--manifest FILE | --input FILE.parquet [--text-column NAME]) --tokenizer PATH --out DIR ...`
#[derive(Args, Debug, Clone)]
pub struct PackArgs {
    #[arg(long, conflicts_with = "input", required_unless_present = "input")]
    pub manifest: Option<PathBuf>,
    /// A single local parquet file instead of a manifest.
    #[arg(long)]
    pub input: Option<PathBuf>,
    #[arg(long, default_value = "text")]
    pub text_column: String,
    /// tokenizer.json, or a directory holding it (and tokenizer_config.json).
    #[arg(long)]
    pub tokenizer: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 2048)]
    pub seq_len: usize,
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ShardFormat,
    /// EOS token (default: the tokenizer's own).
    #[arg(long)]
    pub eos_token: Option<String>,
    /// Shuffle rows with this seed (bounded memory). Off by default.
    #[arg(long)]
    pub shuffle_seed: Option<u64>,
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    #[arg(long)]
    pub num_shards: Option<usize>,
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Read straight from the Hub by HTTP Range instead of the cache.
    #[arg(long)]
    pub stream: bool,
}

pub fn run(_args: PackArgs) -> Result<()> {
    anyhow::bail!("pack: not implemented yet")
}
