//! `dlm-data mcq`: sciq train / mmlu auxiliary_train → lettered MCQ items, the stage-2 SFT set
//! and the stage-3 prompts.jsonl.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::pack::ShardFormat;
use crate::worker::WorkerSlice;

#[derive(Args, Debug, Clone)]
pub struct McqArgs {
    #[arg(long)]
    pub manifest: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long)]
    pub cache: Option<PathBuf>,
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "parquet")]
    pub format: ShardFormat,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    #[arg(long)]
    pub num_shards: Option<usize>,
}

pub fn run(_args: McqArgs) -> Result<()> {
    anyhow::bail!("mcq: not implemented yet")
}
