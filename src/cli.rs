//! The command line: one subcommand per stage, each stage owning its own `Args`.

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "dlm-data",
    version,
    about = "Training data for AR → masked-diffusion LLM conversion"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Download the manifest's sources at pinned commits (eval splits refused), write the lock.
    Fetch(crate::hub::FetchArgs),
    /// Tokenize and pack sources into fixed-length training shards.
    Pack(crate::pack::PackArgs),
    /// Build the stage-2 MCQ SFT set and the stage-3 prompts.jsonl from sciq / mmlu.
    Mcq(crate::mcq::McqArgs),
    /// Find (and optionally drop) documents overlapping benchmark eval sets.
    Decontam(crate::decontam::DecontamArgs),
    /// Check every link of the provenance chain; exit 1 naming the first broken one.
    Audit(crate::audit::AuditArgs),
    /// Run the masked-diffusion teacher over prompts and write distilled.json.
    Distill(crate::distill::DistillArgs),
    /// Merge worker outputs (`OUT/parts/*`) into what one process would have written.
    Merge(crate::merge::MergeArgs),
    /// Serve fixture repos through the Hub's HTTP API (tests and `make demo`).
    HubEmulator(crate::hub::emulator::EmulatorArgs),
    /// Generate the project's fixtures: datasets, tokenizer, tiny teacher.
    Fixtures(crate::fixtures::FixturesArgs),
}

/// Parse arguments and run. Exit codes are chosen by the caller from the error.
pub fn main() -> Result<()> {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help / --version print and exit 0; real parse errors exit 2.
            e.exit();
        }
    };
    init_logging();
    match cli.command {
        Command::Fetch(a) => crate::hub::run_fetch(a),
        Command::Pack(a) => crate::pack::run(a),
        Command::Mcq(a) => crate::mcq::run(a),
        Command::Decontam(a) => crate::decontam::run(a),
        Command::Audit(a) => crate::audit::run(a),
        Command::Distill(a) => crate::distill::run(a),
        Command::Merge(a) => crate::merge::run(a),
        Command::HubEmulator(a) => crate::hub::emulator::run(a),
        Command::Fixtures(a) => crate::fixtures::run(a),
    }
}

/// Logs to stderr, each event redacted ([`crate::secret`]); `RUST_LOG` filters (default `info`).
fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::secret::Redacted(std::io::stderr))
        .with_target(false)
        .try_init();
}
