//! One step of a night. Against the journal's record it is:
//! - *complete* (same command lines, same bytes read, outputs as left): skipped;
//! - *changed* (a setting or an input's bytes differ) with an output in place: rebuilt beside
//!   the old output and swapped in when complete ([`super::swap`]), the old one readable
//!   until then — also what drives `pack` past its "written by a different pack command"
//!   refusal, with no flag;
//! - *damaged* (same settings and inputs, but an output gone or altered since: sizes every
//!   night, digests with `--hash`): rebuilt beside it the same way (the command alone could
//!   take what is left for complete); a step without an output directory runs in place;
//! - otherwise (first night, no record, or complete but `--rerun`): run in place, where the
//!   command resumes or finds its output complete on its own.
//!
//! The steps downstream of a change see their inputs' bytes change and follow the same rule.

use std::path::Path;

use anyhow::{Context, Result};

use super::state::{self, Rebuild, RunState, StepRecord};
use super::steps::{self, Step};
use super::{quote, swap, Exec, Job};

/// Finish the swaps a killed night left half-done (the staged output was complete).
pub fn recover(st: &mut RunState, state_path: &Path) -> Result<()> {
    let done: Vec<String> = st
        .rebuilds
        .iter()
        .filter(|(_, r)| !r.swap.is_empty())
        .map(|(k, _)| k.clone())
        .collect();
    for name in done {
        let r = st.rebuilds[&name].clone();
        crate::progress::note(&format!(
            "run: {name}: finishing the swap of its rebuilt output (a night was stopped there)"
        ));
        swap::finish(&r.staging, &r.swap)?;
        st.rebuilds.remove(&name);
        st.save(state_path)?;
    }
    Ok(())
}

/// How a night treats complete steps: `--rerun` runs them anyway; `--hash` reads every
/// input and output instead of trusting size and time (and checks shards by digest).
#[derive(Debug, Clone, Copy)]
pub struct Night {
    pub rerun: bool,
    pub hash: bool,
}

/// Run `step` as the journal says (module doc); its status for the report.
pub fn step(
    job: &Job,
    st: &mut RunState,
    step: &Step,
    night: Night,
    exec: Exec,
) -> Result<&'static str> {
    let prev = st.steps.get(step.name).cloned();
    // `--hash`: no size-and-time pre-check; every file is read.
    let known = |r: &StepRecord, outputs: bool| match (night.hash, outputs) {
        (true, _) => Default::default(),
        (false, true) => r.outputs.clone(),
        (false, false) => r.inputs.clone(),
    };
    let prev_in = prev.as_ref().map(|r| known(r, false)).unwrap_or_default();
    let inputs = state::sigs(&step.reads, &prev_in)?;
    let pending = st.rebuilds.get(step.name).cloned();
    let mut rebuild = false;
    if let Some(rec) = &prev {
        let settings = steps::settings(&rec.commands) == steps::settings(&step.commands);
        let read_same = state::same(&rec.inputs, &inputs);
        if settings && read_same && pending.is_none() {
            let outputs = state::out_sigs(&step.writes, &known(rec, true), night.hash)?;
            let damaged = state::changed_outputs(&rec.outputs, &outputs);
            if damaged.is_empty() {
                if !night.rerun {
                    crate::progress::note(&format!(
                        "run: {}: complete (since {}, inputs, settings and outputs unchanged); skipped",
                        step.name, rec.completed
                    ));
                    refresh(st, job, step, inputs, outputs)?;
                    return Ok("skipped");
                }
            } else {
                // An output gone or altered since the step completed: the command itself may
                // take what is left for complete, so the output is built again beside it.
                crate::progress::note(&format!(
                    "run: {}: its output is missing or changed since it completed: {}",
                    step.name,
                    damaged.join(", ")
                ));
                rebuild = step.out.as_ref().is_some_and(|o| o.exists());
            }
        } else {
            let why = if !settings {
                format!(
                    "settings changed: {}",
                    steps::describe_change(&rec.commands, &step.commands)
                )
            } else if !read_same {
                format!(
                    "changed: {}",
                    state::changed(&rec.inputs, &inputs).join(", ")
                )
            } else {
                "a rebuild was under way".to_string()
            };
            crate::progress::note(&format!("run: {}: {why}", step.name));
            // Changed, with an output in place (`--rerun` or not): built beside it.
            rebuild = step.out.as_ref().is_some_and(|o| o.exists());
        }
    }
    rebuild |= pending.is_some();
    let t = std::time::Instant::now();
    // The step's record goes before it runs: a step that fails is not complete.
    if st.steps.remove(step.name).is_some() {
        st.save(&job.state_path)?;
    }
    let status = if rebuild {
        rebuild_beside(job, st, step, &inputs, exec)?;
        "rebuilt"
    } else {
        in_place(job, step, &step.commands, exec)?;
        "ran"
    };
    let outputs = state::out_sigs(&step.writes, &Default::default(), night.hash)?;
    st.steps.insert(
        step.name.to_string(),
        StepRecord {
            commands: step.commands.clone(),
            inputs,
            outputs,
            completed: crate::util::now_rfc3339(),
            seconds: t.elapsed().as_secs_f64(),
        },
    );
    st.save(&job.state_path)?;
    Ok(status)
}

/// A skipped step whose files were touched (same bytes, new times): the record takes the new
/// times, so the next night's pre-check passes without re-reading them. Unchanged records are
/// not rewritten.
fn refresh(
    st: &mut RunState,
    job: &Job,
    step: &Step,
    inputs: std::collections::BTreeMap<String, state::Sig>,
    outputs: std::collections::BTreeMap<String, state::Sig>,
) -> Result<()> {
    let rec = st
        .steps
        .get_mut(step.name)
        .expect("a skipped step has a record");
    if rec.inputs != inputs || rec.outputs != outputs {
        rec.inputs = inputs;
        rec.outputs = outputs;
        st.save(&job.state_path)?;
    }
    Ok(())
}

/// Run command lines as typed, each logged.
fn in_place(job: &Job, step: &Step, commands: &[Vec<String>], exec: Exec) -> Result<()> {
    for argv in commands {
        let line = quote(argv);
        crate::progress::note(&format!("run: {}: {line}", step.name));
        // Typed context: `--json`'s failure line names the step and its command line.
        exec(argv).map_err(|e| {
            e.context(crate::cron::StepFailed {
                step: step.name.to_string(),
                command_line: line.clone(),
                pipeline: job.pipeline.display().to_string(),
            })
        })?;
        crate::signals::check()?;
    }
    Ok(())
}

/// Build the step's output in its staging directory (resuming one a killed night left, when
/// its inputs and settings are still those), then swap it in.
fn rebuild_beside(
    job: &Job,
    st: &mut RunState,
    step: &Step,
    inputs: &std::collections::BTreeMap<String, state::Sig>,
    exec: Exec,
) -> Result<()> {
    let out = step
        .out
        .as_ref()
        .expect("only steps with an output are rebuilt");
    let staging = swap::staging_dir(out);
    let staged = swap::staged(out);
    let resumable = st.rebuilds.get(step.name).is_some_and(|r| {
        steps::settings(&r.commands) == steps::settings(&step.commands)
            && state::same(&r.inputs, inputs)
            && r.swap.is_empty()
    });
    if !resumable {
        // A staging directory of other inputs or settings (or a stray one): ours; start again.
        swap::remove_staging(&staging)?;
        st.rebuilds.insert(
            step.name.to_string(),
            Rebuild {
                staging: staging.clone(),
                inputs: inputs.clone(),
                commands: step.commands.clone(),
                swap: vec![],
            },
        );
        st.save(&job.state_path)?;
    } else {
        crate::progress::note(&format!(
            "run: {}: resuming its rebuild in {}",
            step.name,
            staging.display()
        ));
    }
    std::fs::create_dir_all(&staging).with_context(|| format!("creating {}", staging.display()))?;
    crate::progress::note(&format!(
        "run: {}: building the new output in {} (the old one stays in place until it is complete)",
        step.name,
        staging.display()
    ));
    in_place(job, step, &step.commands_into(&staged), exec)?;
    let mut pairs = Vec::new();
    for (new, live) in step.swap_pairs(&staged) {
        let m = swap::marker(&new)?;
        pairs.push((new, live, m));
    }
    let r = st.rebuilds.get_mut(step.name).expect("recorded above");
    r.swap = pairs.clone();
    st.save(&job.state_path)?;
    crate::signals::pause_point("run-swap");
    swap::finish(&staging, &pairs)?;
    st.rebuilds.remove(step.name);
    st.save(&job.state_path)?;
    crate::progress::note(&format!(
        "run: {}: the new output replaced the old one",
        step.name
    ));
    Ok(())
}
