//! `dlm-data audit`: walks the provenance chain — manifest → lock → download.log → shards /
//! prompts / distilled — and names the first broken link.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct AuditArgs {
    #[arg(long)]
    pub manifest: PathBuf,
    #[arg(long)]
    pub cache: Option<PathBuf>,
    #[arg(long)]
    pub log: Option<PathBuf>,
    #[arg(long)]
    pub shards: Vec<PathBuf>,
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    #[arg(long)]
    pub distilled: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: AuditArgs) -> Result<()> {
    anyhow::bail!("audit: not implemented yet")
}
