//! `dlm-data merge OUT`: combine worker outputs (`OUT/parts/IIIII-of-NNNNN/`) into exactly the
//! layout and bytes one process would have written to `OUT`.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shared output (a pack/mcq directory, or a distill --out file with parts beside it).
    pub out: PathBuf,
    #[arg(long)]
    pub json: bool,
}

pub fn run(_args: MergeArgs) -> Result<()> {
    anyhow::bail!("merge: not implemented yet")
}
