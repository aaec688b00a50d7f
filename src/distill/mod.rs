//! `dlm-data distill`: the masked-diffusion teacher answers prompts with LLaDA's block-wise
//! sampler; results go to a resumable distilled.json.

pub mod rng;

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use crate::worker::WorkerSlice;

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remasking {
    LowConfidence,
    Random,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutFormat {
    Json,
    Jsonl,
}

#[derive(Args, Debug, Clone)]
pub struct DistillArgs {
    #[arg(long)]
    pub teacher: PathBuf,
    #[arg(long)]
    pub prompts: PathBuf,
    #[arg(long)]
    pub out: PathBuf,
    /// cpu, cuda or cuda:N
    #[arg(long, default_value = "cpu")]
    pub device: String,
    #[arg(long, default_value_t = 256)]
    pub gen_length: usize,
    #[arg(long, default_value_t = 32)]
    pub block_length: usize,
    #[arg(long, default_value_t = 256)]
    pub steps: usize,
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    #[arg(long, value_enum, default_value = "low-confidence")]
    pub remasking: Remasking,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[arg(long, default_value_t = 8)]
    pub batch_size: usize,
    #[arg(long)]
    pub mask_id: Option<u32>,
    #[arg(long)]
    pub logits_shift: Option<u8>,
    #[arg(long, value_enum, default_value = "json")]
    pub format: OutFormat,
    #[arg(long)]
    pub limit: Option<usize>,
    #[arg(long)]
    pub shard: Option<WorkerSlice>,
    #[arg(long)]
    pub num_shards: Option<usize>,
    /// Do not render the tokenizer_config.json chat template.
    #[arg(long)]
    pub no_chat_template: bool,
    /// Accept a config that says causal and run it bidirectionally anyway.
    #[arg(long)]
    pub bidirectional: bool,
}

pub fn run(_args: DistillArgs) -> Result<()> {
    anyhow::bail!("distill: not implemented yet")
}
