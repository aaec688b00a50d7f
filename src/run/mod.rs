//! `dlm-data run PIPELINE.toml`: the whole job from one file, for cron and for people — fetch →
//! pack → mcq → decontam → distill → audit, each step the ordinary command (parsed from the
//! command line it would be typed as, run in this process), checked whole before any work,
//! a step skipped when the run journal says it is complete against unchanged bytes and
//! settings, rebuilt beside its old output when they changed, one lock so an overlapping start
//! exits at once (75, naming the holder), and the audit verdict at the end.
//!
//! - [`config`]: the pipeline file's typed form (docs/commands/run.md);
//! - [`steps`]: the file turned into command lines and the files each step reads and writes;
//! - [`preflight`]: every command parsed, every input found, no write onto a read;
//! - [`state`]: the run journal and file signatures;
//! - [`swap`]: a rebuilt output exchanged for the old one;
//! - [`night`]: one step of a night: skip, run in place, or rebuild and swap.

pub mod config;
mod night;
pub mod preflight;
pub mod state;
pub mod steps;
pub mod swap;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser};

/// Suffix of the staging directories a rebuilt output is built in ([`swap`]); the journal's
/// directory walks ([`state`]) skip them.
pub const STAGING: &str = ".run-next";

#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The pipeline file (TOML; docs/commands/run.md). Relative paths in it are relative to
    /// its directory.
    pub pipeline: PathBuf,
    /// Run only this step (fetch, pack, mcq, decontam, distill, audit).
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(steps::STEPS), conflicts_with = "from")]
    pub only: Option<String>,
    /// Start at this step and run the ones after it.
    #[arg(long, value_parser = clap::builder::PossibleValuesParser::new(steps::STEPS))]
    pub from: Option<String>,
    /// Run the selected steps even when the run journal says they are complete (each command
    /// still resumes or no-ops on its own).
    #[arg(long)]
    pub rerun: bool,
    /// Print one line of JSON on stdout at the end (steps, their status and time, the verdict).
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    /// Check the pipeline and exit: every step's command line parsed, every input that must
    /// exist readable, no step writing what another reads (exit 2 naming every problem).
    #[arg(long)]
    pub check: bool,
    /// `pack --strict`: the warnings a nightly job wants fatal (an input contributing 0
    /// documents, rows skipped, a short mixture) fail the pack step, before its output is
    /// marked complete. Not a setting: adding or dropping it re-runs nothing.
    #[arg(long)]
    pub strict: bool,
    /// Read every input and output in full instead of trusting an unchanged size and
    /// modification time (an edit whose time was restored), and check every shard of a
    /// complete output by its sha256 (without it: by its size). Slower: reads everything.
    #[arg(long)]
    pub hash: bool,
}

/// What happened to one step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepOutcome {
    pub step: &'static str,
    /// `ran`, `rebuilt` (inputs or settings changed: built beside the old output, swapped in),
    /// `skipped` (complete; the journal's record matched) or `not-selected`.
    pub status: &'static str,
    pub seconds: f64,
    /// The command lines of the step, as they would be typed.
    pub commands: Vec<String>,
}

impl StepOutcome {
    fn new(step: &'static str, status: &'static str, seconds: f64, commands: Vec<String>) -> Self {
        StepOutcome {
            step,
            status,
            seconds,
            commands,
        }
    }
}

/// Steps' stdout goes to stderr while they run: the run's own stdout carries only its result
/// (the audit report, or the one `--json` line).
struct StdoutToStderr {
    saved: i32,
}

impl StdoutToStderr {
    fn new() -> Option<StdoutToStderr> {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: plain descriptor calls on the process's own stdio.
        let saved = unsafe { libc::dup(1) };
        if saved < 0 || unsafe { libc::dup2(2, 1) } < 0 {
            return None;
        }
        Some(StdoutToStderr { saved })
    }
}

impl Drop for StdoutToStderr {
    fn drop(&mut self) {
        use std::io::Write;
        let _ = std::io::stdout().flush();
        // SAFETY: restores the descriptor saved in `new`.
        unsafe {
            libc::dup2(self.saved, 1);
            libc::close(self.saved);
        }
    }
}

pub(crate) fn quote(argv: &[String]) -> String {
    std::iter::once("dlm-data".to_string())
        .chain(argv.iter().map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
                format!("'{}'", a.replace('\'', r"'\''"))
            } else {
                a.clone()
            }
        }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs one command line (without the program name) as `dlm-data` would: given by the CLI,
/// which owns the command table.
pub type Exec<'a> = &'a dyn Fn(&[String]) -> Result<()>;

/// What `run` needs of the CLI: run a step's command line, or only parse it.
pub struct Cli<'a> {
    pub exec: Exec<'a>,
    pub parse: Exec<'a>,
}

/// The pipeline file loaded, its steps planned and checked: what a night works from.
pub struct Job {
    pub pipeline: PathBuf,
    pub plan: Vec<steps::Step>,
    pub state_path: PathBuf,
}

/// Load, plan and preflight (nothing written): every problem at once, as one usage error.
fn prepare(args: &RunArgs, cli: &Cli) -> Result<Job> {
    crate::lock::require_utf8("PIPELINE", &args.pipeline)?;
    let p = config::Pipeline::load(&args.pipeline)?;
    let pipeline = std::fs::canonicalize(&args.pipeline)
        .with_context(|| format!("reading {}", args.pipeline.display()))?;
    let mut plan = steps::plan(&p);
    if args.strict {
        for c in plan
            .iter_mut()
            .filter(|s| s.name == "pack")
            .flat_map(|s| s.commands.iter_mut())
        {
            c.push(steps::STRICT.to_string());
        }
    }
    for sel in [&args.only, &args.from].into_iter().flatten() {
        if !plan.iter().any(|s| s.name == sel) {
            return Err(crate::error::usage(format!(
                "--only/--from {sel}: pipeline file {} has no such step (it has: {})",
                args.pipeline.display(),
                plan.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    let state_path = p
        .state
        .clone()
        .unwrap_or_else(|| state::default_path(&pipeline));
    let problems = preflight::check(&p, &pipeline, &state_path, &plan, cli.parse);
    if !problems.is_empty() {
        return Err(crate::error::usage(format!(
            "pipeline file {}: {} problem(s), nothing was run:\n  {}",
            args.pipeline.display(),
            problems.len(),
            problems.join("\n  ")
        )));
    }
    Ok(Job {
        pipeline,
        plan,
        state_path,
    })
}

/// Run the pipeline; `cli` runs (or parses) one step's command line in this process.
pub fn run(args: RunArgs, cli: Cli) -> Result<()> {
    let t0 = Instant::now();
    let job = prepare(&args, &cli)?;
    if args.check {
        crate::progress::note(&format!(
            "run: {}: {} step(s) checked: every command parses, every input is there, no \
             step writes what another reads",
            args.pipeline.display(),
            job.plan.len()
        ));
        return Ok(());
    }
    // One run of a pipeline at a time: an overlapping cron start exits 75 naming the holder.
    let _lock = crate::lock::OutputLock::beside(&job.pipeline, "run")?;
    let mut st = state::RunState::load(&job.state_path, &job.pipeline)?;
    night::recover(&mut st, &job.state_path)?;
    let mut outcomes = Vec::new();
    let mut started = args.from.is_none();
    let mut report = None;
    {
        let _redirect = StdoutToStderr::new();
        for step in &job.plan {
            if args.from.as_deref() == Some(step.name) {
                started = true;
            }
            let selected = match &args.only {
                Some(o) => o == step.name,
                None => started,
            };
            let commands: Vec<String> = step.commands.iter().map(|c| quote(c)).collect();
            if !selected {
                outcomes.push(StepOutcome::new(step.name, "not-selected", 0.0, commands));
                continue;
            }
            crate::signals::check()?;
            let ts = Instant::now();
            let status = if step.name == "audit" {
                report = Some(audit(&job, step, &commands[0])?);
                "ran"
            } else {
                let night = night::Night {
                    rerun: args.rerun,
                    hash: args.hash,
                };
                night::step(&job, &mut st, step, night, cli.exec)?
            };
            let secs = ts.elapsed().as_secs_f64();
            outcomes.push(StepOutcome::new(step.name, status, secs, commands));
        }
    }
    finish(&args, &job, outcomes, report, t0)
}

/// The audit step's command line, parsed as the CLI parses it (the run reads its report).
#[derive(clap::Parser, Debug)]
#[command(name = "dlm-data")]
enum AuditLine {
    Audit(crate::audit::AuditArgs),
}

fn audit(job: &Job, step: &steps::Step, line: &str) -> Result<crate::audit::report::AuditReport> {
    // Typed context, as every other step's: `--json`'s failure line names the step.
    let failed = |e: anyhow::Error| {
        e.context(crate::cron::StepFailed {
            step: step.name.to_string(),
            command_line: line.to_string(),
            pipeline: job.pipeline.display().to_string(),
        })
    };
    let argv = std::iter::once("dlm-data".to_string()).chain(step.commands[0].iter().cloned());
    let AuditLine::Audit(a) = AuditLine::try_parse_from(argv)
        .map_err(|e| {
            crate::error::usage(format!(
                "pipeline file {}: step audit: `{line}`: {}",
                job.pipeline.display(),
                e.to_string().trim()
            ))
        })
        .map_err(failed)?;
    crate::progress::note(&format!("run: audit: {line}"));
    crate::audit::audit(&a).map_err(failed)
}

/// The run's result: the `--json` line or the summary and audit report; exit 1 when broken.
fn finish(
    args: &RunArgs,
    job: &Job,
    outcomes: Vec<StepOutcome>,
    report: Option<crate::audit::report::AuditReport>,
    t0: Instant,
) -> Result<()> {
    let ok = report.as_ref().map(|r| r.ok);
    let failed: Vec<String> = report
        .as_ref()
        .map(|r| r.failed().into_iter().map(String::from).collect())
        .unwrap_or_default();
    if args.json {
        crate::cron::json_line(serde_json::json!({
            "pipeline": args.pipeline.display().to_string(),
            "state": job.state_path.display().to_string(),
            "steps": outcomes,
            "verdict": match ok { Some(true) => "pass", Some(false) => "broken", None => "not-audited" },
            "failed": failed,
            "seconds": t0.elapsed().as_secs_f64(),
        }));
    } else {
        let ran = outcomes
            .iter()
            .filter(|o| o.status == "ran" || o.status == "rebuilt")
            .count();
        let skipped = outcomes.iter().filter(|o| o.status == "skipped").count();
        crate::progress::note(&format!(
            "run: {}: {ran} step(s) ran, {skipped} complete and skipped, in {:.1} s",
            args.pipeline.display(),
            t0.elapsed().as_secs_f64()
        ));
        if let Some(r) = report
            .as_ref()
            .filter(|r| !(r.ok && crate::progress::settings().quiet))
        {
            print!("{}", crate::audit::report::human(r));
        }
    }
    if ok == Some(false) {
        anyhow::bail!("run: audit: broken link(s): {}", failed.join(", "));
    }
    Ok(())
}
