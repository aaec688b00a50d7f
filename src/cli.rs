//! The command line: one subcommand per stage, each stage owning its own `Args`.

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(
    name = "dlm-data",
    version = crate::build_info::LONG_VERSION,
    about = "Training data for AR → masked-diffusion LLM conversion"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Warnings and errors only: no progress, no info lines.
    #[arg(long, global = true)]
    pub quiet: bool,
    /// When stderr is not a terminal (cron, Slurm, a log file): seconds between plain progress
    /// lines (done/total, rate, ETA).
    #[arg(long, global = true, default_value_t = 30, value_name = "SECS",
          value_parser = crate::sizes::usize_in(1, 86_400))]
    pub progress_interval: usize,
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
    /// Show an output as a trainer sees it: decoded rows with boundaries, counts per source,
    /// a length histogram (shard directories, shard files, prompts.jsonl, distilled.json).
    Inspect(crate::inspect::InspectArgs),
    /// Record training stages in lineage.json (`lineage add`), for `audit --lineage`.
    Lineage(crate::model::lineage::LineageArgs),
    /// Serve fixture repos through the Hub's HTTP API (tests and `make demo`).
    HubEmulator(crate::hub::emulator::EmulatorArgs),
    /// Generate the project's fixtures: datasets, tokenizer, tiny teacher.
    Fixtures(crate::fixtures::FixturesArgs),
    /// Run the whole pipeline of a TOML file (fetch → pack → mcq → decontam → distill →
    /// audit), skipping complete steps, ending with the audit verdict.
    Run(crate::run::RunArgs),
}

/// Parse arguments and run. Exit codes are chosen by the caller from the error.
pub fn main() -> Result<()> {
    let names = subcommand_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    crate::cron::init(crate::cron::mode_of(
        // args_os: a non-UTF-8 argument is refused by the parser (named), not a panic here.
        &std::env::args_os()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>(),
        &names,
    ));
    let argv: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            // --help / --version print and exit 0; real parse errors exit 2 (and owe the
            // `--json` line).
            if e.use_stderr() {
                crate::cron::usage_line(&e.to_string());
            }
            e.exit();
        }
    };
    let out = crate::progress::init(cli.quiet, cli.progress_interval as u64);
    init_logging(out);
    // A URL where the command takes only local paths: refused by name (crate::storage).
    crate::storage::guard::check(&argv, &names)?;
    // SIGTERM/SIGINT/SIGHUP: commands that write outputs stop at their next safe point (the
    // watchdog ends them 4 s later if none came); read-only ones (a decontam scan without
    // --drop writes only its report, atomically) end at once. Either way exit 128+N, with the
    // `--json` line.
    let writes = matches!(
        cli.command,
        Command::Fetch(_)
            | Command::Pack(_)
            | Command::Mcq(_)
            | Command::Distill(_)
            | Command::Merge(_)
            | Command::Run(_)
    ) || matches!(&cli.command, Command::Decontam(a) if a.drop.is_some());
    let grace = std::time::Duration::from_secs(if writes { 4 } else { 0 });
    crate::signals::install_with_deadline(grace, stop_now);
    dispatch(cli.command)
}

/// The stop watchdog's end ([`crate::signals::install_with_deadline`]): the error line, the
/// `--json` line, exit 128+N without unwinding the command still running.
fn stop_now(sig: i32) {
    use std::io::Write;
    let e = anyhow::Error::new(crate::error::Interrupted(sig));
    eprintln!("error: {e:#}");
    crate::cron::failure_line(&e, 128 + sig);
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: _exit ends the process without running destructors on other threads' data.
    unsafe { libc::_exit(128 + sig) };
}

/// Run one parsed command (also how `dlm-data run` runs its steps).
pub fn dispatch(command: Command) -> Result<()> {
    match command {
        Command::Fetch(a) => crate::hub::run_fetch(a),
        Command::Pack(a) => crate::pack::run(a),
        Command::Mcq(a) => crate::mcq::run(a),
        Command::Decontam(a) => crate::decontam::run(a),
        Command::Audit(a) => crate::audit::run(a),
        Command::Distill(a) => crate::distill::run(a),
        Command::Merge(a) => crate::merge::run(a),
        Command::Inspect(a) => crate::inspect::run(a),
        Command::Lineage(a) => crate::model::lineage::run(a, crate::hub::log::now_rfc3339()),
        Command::HubEmulator(a) => {
            if a.fixtures {
                std::fs::create_dir_all(&a.root)?;
                crate::fixtures::datasets::write_hub_fixtures_with(
                    &a.root,
                    &crate::fixtures::datasets::HubFixtureOptions {
                        large_mb: a.large_mb,
                    },
                )?;
            }
            crate::hub::emulator::run(a)
        }
        Command::Fixtures(a) => crate::fixtures::run(a),
        Command::Run(a) => crate::run::run(
            a,
            crate::run::Cli {
                exec: &run_step,
                parse: &|argv| parse_step(argv).map(|_| ()),
            },
        ),
    }
}

/// The subcommands' names (what [`crate::cron`] looks for in the raw arguments).
fn subcommand_names() -> Vec<String> {
    use clap::CommandFactory;
    Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect()
}

/// One step of `dlm-data run`: its command line parsed and run as if typed (never `run`
/// itself).
fn run_step(argv: &[String]) -> Result<()> {
    let r = dispatch(parse_step(argv)?);
    // A step's own `--json` line went to stderr with its stdout: the run owes its own.
    crate::cron::forget_line();
    r
}

/// A step's command line through the real parser (`run`'s preflight parses every one first).
fn parse_step(argv: &[String]) -> Result<Command> {
    let cli =
        Cli::try_parse_from(std::iter::once("dlm-data".to_string()).chain(argv.iter().cloned()))
            .map_err(|e| crate::error::usage(e.to_string().trim().to_string()))?;
    let names = subcommand_names();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let line: Vec<String> = std::iter::once("dlm-data".to_string())
        .chain(argv.iter().cloned())
        .collect();
    crate::storage::guard::check(&line, &names)?;
    if matches!(cli.command, Command::Run(_)) {
        return Err(crate::error::usage(
            "a pipeline step cannot be `run` itself",
        ));
    }
    Ok(cli.command)
}

/// Logs to stderr, each event redacted ([`crate::secret`]); `RUST_LOG` filters (default
/// `info`; `--quiet`: `warn` whatever `RUST_LOG` says); ANSI colour only on a terminal without
/// `NO_COLOR`.
fn init_logging(out: crate::progress::Settings) {
    use tracing_subscriber::EnvFilter;
    // --quiet wins over RUST_LOG: the operator asked for warnings and errors only.
    let filter = if out.quiet {
        EnvFilter::new("warn")
    } else {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"))
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(crate::secret::Redacted(std::io::stderr))
        .with_target(false)
        .with_ansi(out.color)
        .try_init();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exit code of parsing `args`, and for distill of resolving its settings too (where
    /// `--batch-size` and `--window-prompts` are bounded by the device: one validation site).
    fn code(args: &[&str]) -> i32 {
        match Cli::try_parse_from(std::iter::once("dlm-data").chain(args.iter().copied())) {
            Ok(Cli {
                command: Command::Distill(a),
                ..
            }) => match crate::distill::settings::DistillSettings::resolve(&a) {
                Ok(_) => 0,
                Err(e) => crate::error::exit_code(&e),
            },
            Ok(_) => 0,
            Err(e) => e.exit_code(),
        }
    }

    /// `--threads` (one flag, `crate::tuning::ThreadsArg`) on every command that runs work on
    /// the pool, and nowhere else.
    #[test]
    fn the_pool_using_commands_take_threads() {
        use clap::CommandFactory;
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let has = sub.get_arguments().any(|a| a.get_long() == Some("threads"));
            let want = ["pack", "mcq", "decontam", "distill", "merge"].contains(&sub.get_name());
            assert_eq!(has, want, "{}", sub.get_name());
        }
    }

    /// The exit code of parsing `args` alone.
    fn parse_code(args: &[&str]) -> i32 {
        match Cli::try_parse_from(std::iter::once("dlm-data").chain(args.iter().copied())) {
            Ok(_) => 0,
            Err(e) => e.exit_code(),
        }
    }

    /// Every size flag refuses absurd values at start (exit 2), for every command: while
    /// parsing, or for distill's device-bounded sizes in `Settings::resolve`.
    #[test]
    fn absurd_sizes_are_usage_errors() {
        let pack = [
            "pack",
            "--input",
            "x.parquet",
            "--tokenizer",
            "t",
            "--out",
            "o",
        ];
        let mcq = ["mcq", "--manifest", "m.toml", "--out", "o"];
        let distill = ["distill", "--teacher", "t", "--prompts", "p", "--out", "o"];
        let fetch = ["fetch", "--manifest", "m.toml"];
        let cases: Vec<(Vec<&str>, &str, &str)> = vec![
            (pack.to_vec(), "--seq-len", "4611686018427387904"),
            (pack.to_vec(), "--seq-len", "4294967296"),
            (pack.to_vec(), "--seq-len", "0"),
            (pack.to_vec(), "--shard-bytes", "1e30"),
            (pack.to_vec(), "--max-doc-bytes", "100000G"),
            (pack.to_vec(), "--num-shards", "0"),
            (pack.to_vec(), "--retries", "99999999999"),
            (mcq.to_vec(), "--seq-len", "4294967296"),
            (mcq.to_vec(), "--rows-per-shard", "0"),
            (mcq.to_vec(), "--rows-per-shard", "1152921504606846976"),
            (distill.to_vec(), "--batch-size", "1152921504606846976"),
            (distill.to_vec(), "--batch-size", "0"),
            (distill.to_vec(), "--gen-length", "1099511627776"),
            (distill.to_vec(), "--block-length", "0"),
            (distill.to_vec(), "--steps", "0"),
            (fetch.to_vec(), "--jobs", "0"),
            (fetch.to_vec(), "--chunk-mb", "1099511627776"),
            (fetch.to_vec(), "--retry-base-ms", "18446744073709551615"),
        ];
        for (base, flag, v) in cases {
            let mut a = base.clone();
            a.extend([flag, v]);
            assert_eq!(code(&a), 2, "{a:?} should be refused");
            // The same command with a sane value parses.
            let mut ok = base.clone();
            ok.extend([flag, "8"]);
            assert_eq!(parse_code(&ok), 0, "{ok:?} should parse");
        }
    }

    /// Every flag of every command says what it does in `--help` (issue #29).
    #[test]
    fn every_flag_has_a_help_line() {
        use clap::CommandFactory;
        let mut missing = vec![];
        let cli = Cli::command();
        let mut todo: Vec<(String, &clap::Command)> = vec![("dlm-data".into(), &cli)];
        while let Some((path, c)) = todo.pop() {
            for a in c.get_arguments() {
                let id = a.get_id().as_str();
                if id == "help" || id == "version" {
                    continue;
                }
                let empty = a.get_help().is_none_or(|h| h.to_string().trim().is_empty());
                if empty {
                    missing.push(format!("{path} --{}", a.get_long().unwrap_or(id)));
                }
            }
            for sc in c.get_subcommands() {
                todo.push((format!("{path} {}", sc.get_name()), sc));
            }
        }
        missing.sort();
        assert!(
            missing.is_empty(),
            "flags without a help line:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn stream_conflicts_with_input() {
        let a = [
            "pack",
            "--input",
            "x.parquet",
            "--stream",
            "--tokenizer",
            "t",
            "--out",
            "o",
        ];
        assert_eq!(code(&a), 2);
    }
}
