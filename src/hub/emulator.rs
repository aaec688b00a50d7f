//! A Hub emulator for tests and `make demo`: serves fixture repos through the real HTTP API
//! (revision info, paginated tree, paths-info, resolve with a redirect to a second "CDN"
//! port), with switchable faults.

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct EmulatorArgs {
    /// Directory of fixture repos (`<root>/<owner>/<name>/...`).
    #[arg(long)]
    pub root: PathBuf,
}

pub fn run(_args: EmulatorArgs) -> Result<()> {
    anyhow::bail!("hub-emulator: not implemented yet")
}
