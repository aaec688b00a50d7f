//! `dlm-data run PIPELINE.toml`: the whole job from one file, for cron and for people — fetch →
//! pack → mcq → decontam → distill → audit, each step the ordinary command (parsed from the
//! command line it would be typed as, run in this process), a step skipped when the run
//! journal says it is complete against unchanged files, one lock so an overlapping start
//! exits at once (75, naming the holder), and the audit verdict at the end.
//!
//! - [`config`]: the pipeline file's typed form (docs/commands/run.md);
//! - [`steps`]: the file turned into command lines and the files each step is complete against;
//! - [`state`]: the run journal and its digests.

pub mod config;
pub mod state;
pub mod steps;

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::{Args, Parser};

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
    #[arg(long)]
    pub json: bool,
}

/// What happened to one step.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepOutcome {
    pub step: &'static str,
    /// `ran`, `skipped` (complete; the journal's record matched) or `not-selected`.
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

fn quote(argv: &[String]) -> String {
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

/// The audit step's command line, parsed as the CLI parses it (the run reads its report).
#[derive(clap::Parser, Debug)]
#[command(name = "dlm-data")]
enum AuditLine {
    Audit(crate::audit::AuditArgs),
}

/// Runs one command line (without the program name) as `dlm-data` would: given by the CLI,
/// which owns the command table.
pub type Exec<'a> = &'a dyn Fn(&[String]) -> Result<()>;

/// Run the pipeline; `exec` runs one step's command line in this process.
pub fn run(args: RunArgs, exec: Exec) -> Result<()> {
    let t0 = Instant::now();
    crate::lock::require_utf8("PIPELINE", &args.pipeline)?;
    let p = config::Pipeline::load(&args.pipeline)?;
    let plan = steps::plan(&p);
    for sel in [&args.only, &args.from].into_iter().flatten() {
        if !plan.iter().any(|s| s.name == sel) {
            return Err(crate::error::usage(format!(
                "--only/--from {sel}: pipeline file {} has no such step (it has: {})",
                args.pipeline.display(),
                plan.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    // One run of a pipeline at a time: an overlapping cron start exits 75 naming the holder.
    let _lock = crate::lock::OutputLock::beside(&args.pipeline, "run")?;
    let state_path = p
        .state
        .clone()
        .unwrap_or_else(|| state::default_path(&args.pipeline));
    let mut st = state::RunState::load(&state_path)?;
    let mut outcomes = Vec::new();
    let mut started = args.from.is_none();
    let mut report = None;
    {
        let _redirect = StdoutToStderr::new();
        for step in &plan {
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
            if step.name == "audit" {
                let argv =
                    std::iter::once("dlm-data".to_string()).chain(step.commands[0].iter().cloned());
                let AuditLine::Audit(a) = AuditLine::try_parse_from(argv).map_err(|e| {
                    crate::error::usage(format!(
                        "pipeline file {}: step audit: `{}`: {}",
                        args.pipeline.display(),
                        commands[0],
                        e.to_string().trim()
                    ))
                })?;
                crate::report::note(&format!("run: audit: {}", commands[0]));
                report = Some(crate::audit::audit(&a).context("run: step audit")?);
                outcomes.push(StepOutcome::new(
                    step.name,
                    "ran",
                    ts.elapsed().as_secs_f64(),
                    commands,
                ));
                continue;
            }
            if !args.rerun {
                if let Some(rec) = st.steps.get(step.name) {
                    if rec.commands == step.commands && rec.digest == state::digest(&step.watch)? {
                        crate::report::note(&format!(
                            "run: {}: complete (since {}, inputs and outputs unchanged); skipped",
                            step.name, rec.completed
                        ));
                        outcomes.push(StepOutcome::new(
                            step.name,
                            "skipped",
                            ts.elapsed().as_secs_f64(),
                            commands,
                        ));
                        continue;
                    }
                }
            }
            // The step's record goes before it runs: a step that fails is not complete.
            if st.steps.remove(step.name).is_some() {
                st.save(&state_path)?;
            }
            for (argv, line) in step.commands.iter().zip(&commands) {
                crate::report::note(&format!("run: {}: {line}", step.name));
                // Typed context: `--json`'s failure line names the step and its command line.
                exec(argv).map_err(|e| {
                    e.context(crate::cron::StepFailed {
                        step: step.name.to_string(),
                        command_line: line.clone(),
                        pipeline: args.pipeline.display().to_string(),
                    })
                })?;
                crate::signals::check()?;
            }
            let seconds = ts.elapsed().as_secs_f64();
            st.steps.insert(
                step.name.to_string(),
                state::StepRecord {
                    commands: step.commands.clone(),
                    digest: state::digest(&step.watch)?,
                    completed: crate::util::now_rfc3339(),
                    seconds,
                },
            );
            st.save(&state_path)?;
            outcomes.push(StepOutcome::new(step.name, "ran", seconds, commands));
        }
    }
    let ok = report.as_ref().map(|r| r.ok);
    let failed: Vec<String> = report
        .as_ref()
        .map(|r| r.failed().into_iter().map(String::from).collect())
        .unwrap_or_default();
    if args.json {
        crate::cron::json_line(serde_json::json!({
            "pipeline": args.pipeline.display().to_string(),
            "state": state_path.display().to_string(),
            "steps": outcomes,
            "verdict": match ok { Some(true) => "pass", Some(false) => "broken", None => "not-audited" },
            "failed": failed,
            "seconds": t0.elapsed().as_secs_f64(),
        }));
    } else {
        let ran = outcomes.iter().filter(|o| o.status == "ran").count();
        let skipped = outcomes.iter().filter(|o| o.status == "skipped").count();
        crate::report::note(&format!(
            "run: {}: {ran} step(s) ran, {skipped} complete and skipped, in {:.1} s",
            args.pipeline.display(),
            t0.elapsed().as_secs_f64()
        ));
        if let Some(r) = report
            .as_ref()
            .filter(|r| !(r.ok && crate::report::settings().quiet))
        {
            print!("{}", crate::audit::report::human(r));
        }
    }
    if ok == Some(false) {
        anyhow::bail!("run: audit: broken link(s): {}", failed.join(", "));
    }
    Ok(())
}
