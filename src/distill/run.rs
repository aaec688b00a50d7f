//! The `distill` command's driver, as named steps: [`setup`] (teacher, sampler settings, limits)
//! → [`encode_prompts`] → [`plan_units`] (continuous-batching windows, or fixed batches with
//! `--no-early-exit`) → [`open_output`] (part file, resume state) → per unit [`decode_unit`] →
//! [`answer_unit`] → [`unit_records`] → commit → [`finish`] (summary, finalisation). Resumable
//! and shardable by unit (see [`super::output`] for the part layout).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use super::fingerprint::{fingerprint, gen_json};
use super::host_loop::{generate_row, generate_traced};
use super::limits::{self, ForwardShape};
use super::mcq::{answer_batch, Answer, ANSWER_TEMPLATE};
use super::output::{self, PartWriter};
use super::prompts::{read_prompts, PromptItem};
use super::record::{record, TrajectoryFields};
use super::settings::{Device, DistillSettings, GpuResidual};
use super::{plan, rng};
use crate::sampling::early_exit::{ExitStats, RowOut, RowSchedule};
use crate::sampling::finite::NonFiniteLogit;
use crate::sampling::trajectory::RowTrace;
use crate::sampling::GenParams;
use crate::teacher::{GenJob, Teacher, TeacherBackend};

/// The backend for the resolved device; `residual` is the GPU residual stream's precision.
pub fn backend(
    device: Device,
    teacher: &Teacher,
    residual: GpuResidual,
    gemm_plans: Option<&Path>,
) -> Result<Box<dyn TeacherBackend>> {
    if device == Device::Cpu {
        return Ok(Box::new(teacher.cpu()?));
    }
    #[cfg(feature = "cuda")]
    {
        let r = crate::gpu::engine::Residual::parse(residual.as_str())
            .map_err(|e| crate::error::usage(e.to_string()))?;
        crate::gpu::backend::open(device.ordinal(), teacher, r, gemm_plans)
    }
    #[cfg(not(feature = "cuda"))]
    {
        let _ = (residual, gemm_plans);
        Err(crate::error::usage(format!(
            "--device {device}: this binary was built without the `cuda` feature \
             (cargo build --release --features cuda), or use --device cpu"
        )))
    }
}

/// A bar on a terminal (hidden otherwise: [`crate::progress::Ticker`] writes the log lines).
fn progress_bar(total: u64, done: u64) -> indicatif::ProgressBar {
    if !crate::progress::bars() {
        return indicatif::ProgressBar::hidden();
    }
    let pb = indicatif::ProgressBar::new(total);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:30}] {pos}/{len} prompts  {per_sec}  {msg}  ETA {eta}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    pb.set_position(done);
    pb
}

/// What [`setup`] opens before any prompt is read.
struct Setup {
    /// This worker's exclusive lock ([`output::claim`]), released when the run ends.
    _lock: crate::lock::OutputLock,
    teacher: Teacher,
}

/// The output claimed and the teacher opened; `st` completed with what only the teacher knows
/// ([`DistillSettings::bind_teacher`]). Every flag was checked by [`DistillSettings::resolve`] before.
fn setup(st: &mut DistillSettings) -> Result<Setup> {
    // One writer per worker part, never an input overwritten; held for the whole run.
    let lock = output::claim(&st.out, st.worker, &st.prompts, &st.teacher)?;
    let teacher = Teacher::open(&st.given.teacher, &st.teacher_options)?;
    st.bind_teacher(&teacher)?;
    let p = &st.gen;
    if p.approximate() {
        tracing::warn!(
            "APPROXIMATE sampling (threshold {:?}, cache {}): outputs differ from LLaDA's exact \
             sampler; recorded in every record's gen",
            p.threshold,
            p.cache.as_str()
        );
    }
    Ok(Setup {
        _lock: lock,
        teacher,
    })
}

/// The prompts to run, encoded: items and their ids (too-long ones dropped or refused), the
/// answer template's ids, and how many were skipped.
struct Encoded {
    items: Vec<PromptItem>,
    ids: Vec<Vec<u32>>,
    template_ids: Vec<u32>,
    letter_ids: Vec<u32>,
    mcq: bool,
    skipped: usize,
    /// Prompts holding added-token text (`--special-tokens-in-text`), per source and token.
    added: crate::added_text::AddedTextCounts,
}

fn encode_prompts(st: &DistillSettings, s: &Setup) -> Result<Encoded> {
    let mut items = read_prompts(&st.given.prompts)?;
    if let Some(n) = st.limit {
        items.truncate(n);
    }
    let use_template = st.chat_template;
    let tok = &s.teacher.tokenizer;
    let (ids, added) = super::encode::encode_prompts(
        &s.teacher,
        &items,
        use_template,
        st.special_tokens_in_text,
        &st.given.prompts,
    )?;
    if let Some((it, _)) = items.iter().zip(&ids).find(|(_, x)| x.is_empty()) {
        anyhow::bail!(
            "{}:{}: prompt {:?} encodes to no tokens",
            st.given.prompts.display(),
            it.line,
            it.id
        );
    }
    let template_ids = tok.encode(ANSWER_TEMPLATE)?;
    let shape = st.shape(&s.teacher);
    let (items, ids, skipped) = drop_too_long(
        items,
        ids,
        st,
        &shape,
        st.budget(),
        st.gen.gen_length,
        template_ids.len() + 1,
    )?;
    let mcq = items.iter().any(|i| i.options.is_some());
    let letter_ids = if mcq {
        tok.letter_ids(ANSWER_TEMPLATE, 10)
            .context("answer letters A–J")?
    } else {
        vec![]
    };
    Ok(Encoded {
        items,
        ids,
        template_ids,
        letter_ids,
        mcq,
        skipped,
        added,
    })
}

/// Positions a unit's longest prompt needs beyond itself (the MCQ answer slot when any).
fn extra_positions(p: &GenParams, e: &Encoded) -> usize {
    p.gen_length
        .saturating_add(if e.mcq { e.template_ids.len() + 1 } else { 0 })
}

/// The units of work (each committed whole): continuous-batching windows, or with
/// `--no-early-exit` the fixed batches.
fn plan_units(st: &DistillSettings, s: &Setup, e: &Encoded) -> Vec<Vec<usize>> {
    let lengths: Vec<usize> = e.ids.iter().map(Vec::len).collect();
    if st.early_exit {
        return plan::windows(&lengths, st.window_prompts);
    }
    plan::plan_within(&lengths, st.batch_size, |rows, longest| {
        fits(st, s, e, rows, longest)
    })
}

/// Whether `rows` prompts whose longest is `longest` tokens fit one forward's memory budget,
/// with their generation (and the MCQ answer slot when any prompt is MCQ).
fn fits(st: &DistillSettings, s: &Setup, e: &Encoded, rows: usize, longest: usize) -> bool {
    let shape = st.shape(&s.teacher);
    let need = longest.saturating_add(extra_positions(&st.gen, e));
    limits::fits(&shape, rows, need, st.budget())
}

/// This worker's part file, opened or resumed, and the units still to do.
struct Output {
    writer: PartWriter,
    discard: output::DiscardIfEmpty,
    mine: Vec<usize>,
    todo: Vec<usize>,
}

fn open_output(
    st: &DistillSettings,
    s: &Setup,
    e: &Encoded,
    units: &[Vec<usize>],
) -> Result<Output> {
    let prompts_sha256 = crate::util::sha256_file(&st.given.prompts)?;
    let fp = fingerprint(st, &s.teacher, &prompts_sha256, e.items.len());
    let hdr = output::header(st.worker, units.len(), e.items.len(), &fp);
    let own = output::part_path(&st.out, st.worker);
    let writer = PartWriter::open(&own, &hdr)?;
    let discard = output::DiscardIfEmpty::new(&writer);
    let mut skip = writer.done.clone();
    if st.worker.is_whole() {
        skip.extend(output::committed_elsewhere(
            &output::parts_dir(&st.out),
            &hdr,
            &own,
        )?);
    }
    let mine: Vec<usize> = (0..units.len()).filter(|&k| st.worker.owns(k)).collect();
    let todo: Vec<usize> = mine.iter().copied().filter(|k| !skip.contains(k)).collect();
    Ok(Output {
        writer,
        discard,
        mine,
        todo,
    })
}

/// Whether rows record a [`RowTrace`] (`--trajectory`, `--top-k`).
fn traced(st: &DistillSettings) -> bool {
    st.trajectory || st.top_k.is_some()
}

/// Generate one unit's rows: each prompt's [`RowOut`] in unit order, and the batch forward
/// passes run; with [`traced`] each row's [`RowTrace`] goes to `traces` (else it stays empty).
fn decode_unit(
    be: &mut dyn TeacherBackend,
    st: &DistillSettings,
    s: &Setup,
    e: &Encoded,
    unit: &[usize],
    stop_ids: &[u32],
    traces: &mut Vec<RowTrace>,
) -> Result<(Vec<RowOut>, usize)> {
    traces.clear();
    if traced(st) {
        let k = st.top_k.unwrap_or(0);
        traces.resize(unit.len(), RowTrace::new(st.gen.gen_length, k));
    }
    let mut tr = traced(st).then_some(traces.as_mut_slice());
    let p = &st.gen;
    let t = &s.teacher;
    let prompts: Vec<&[u32]> = unit.iter().map(|&i| e.ids[i].as_slice()).collect();
    let keys: Vec<u64> = unit
        .iter()
        .map(|&i| rng::prompt_key(&e.items[i].id))
        .collect();
    let named = |err: anyhow::Error| name_prompt(err, unit, &e.items, &st.given.prompts);
    if !st.early_exit {
        let out = generate_traced(be, p, &prompts, &keys, t.pad_id, t.logits_shift, None, tr)
            .map_err(named)?;
        let full = p.block_rule_steps(p.gen_length - 1);
        let rows = out
            .into_iter()
            .map(|gen| RowOut {
                gen,
                steps: full,
                blocks: p.num_blocks(),
                early: false,
                block_rule_steps: None,
            })
            .collect();
        return Ok((rows, full));
    }
    // --logits-eos-inf: EOS is never chosen, so rows never finish early.
    let stop = (!p.logits_eos_inf).then_some(stop_ids);
    let fits = |rows: usize, longest: usize| fits(st, s, e, rows, longest);
    let sched = RowSchedule {
        slots: st.batch_size,
        fits: &fits,
        stop_ids: stop,
    };
    let job = GenJob {
        p,
        prompts: &prompts,
        keys: &keys,
        pad_id: t.pad_id,
        logits_shift: t.logits_shift,
    };
    match tr.as_deref_mut() {
        None => {
            if let Some(r) = be.generate_rows(&job, &sched) {
                return r.map_err(named);
            }
        }
        Some(t) => {
            if let Some(r) = be.generate_rows_traced(&job, &sched, st.top_k.unwrap_or(0)) {
                let (rows, passes, got) = r.map_err(named)?;
                anyhow::ensure!(got.len() == t.len(), "one trace per prompt");
                t.clone_from_slice(&got);
                return Ok((rows, passes));
            }
        }
    }
    let mut rows = Vec::with_capacity(unit.len());
    for (r, q) in prompts.iter().enumerate() {
        let row_trace = tr.as_deref_mut().map(|t| &mut t[r]);
        let out = generate_row(be, p, q, keys[r], t.logits_shift, stop, row_trace)
            .map_err(|err| name_prompt(err, &unit[r..r + 1], &e.items, &st.given.prompts))?;
        rows.push(out);
    }
    let steps = rows.iter().map(|r| r.steps).sum();
    Ok((rows, steps))
}

/// Each row's response: the generated span cut at its first EOS/EoT, and whether it stopped.
fn cut<'a>(rows: &'a [RowOut], stop_ids: &[u32]) -> Vec<(&'a [u32], bool)> {
    rows.iter()
        .map(|r| match r.gen.iter().position(|t| stop_ids.contains(t)) {
            Some(e) => (&r.gen[..e], true),
            None => (&r.gen[..], false),
        })
        .collect()
}

/// The MCQ answers of a unit's rows (None for free-text prompts): the letter slot after each
/// response, in batches of at most `--batch-size` rows in unit order.
fn answer_unit(
    be: &mut dyn TeacherBackend,
    st: &DistillSettings,
    s: &Setup,
    e: &Encoded,
    unit: &[usize],
    cuts: &[(&[u32], bool)],
) -> Result<Vec<Option<Answer>>> {
    let t = &s.teacher;
    let mcq_rows: Vec<usize> = (0..unit.len())
        .filter(|&r| e.items[unit[r]].options.is_some())
        .collect();
    let mut answer_of: Vec<Option<Answer>> = vec![None; unit.len()];
    for chunk in mcq_rows.chunks(st.batch_size.get()) {
        let contexts: Vec<Vec<u32>> = chunk
            .iter()
            .map(|&r| [e.ids[unit[r]].as_slice(), cuts[r].0, &e.template_ids].concat())
            .collect();
        let n_opts: Vec<usize> = chunk
            .iter()
            .map(|&r| e.items[unit[r]].options.as_ref().map_or(0, Vec::len))
            .collect();
        let answers = answer_batch(
            be,
            &contexts,
            &n_opts,
            &e.letter_ids,
            t.mask_id,
            t.pad_id,
            t.logits_shift,
        )
        .map_err(|err| {
            let rows: Vec<usize> = chunk.iter().map(|&r| unit[r]).collect();
            name_prompt(err, &rows, &e.items, &st.given.prompts)
        })
        .context("MCQ answers")?;
        for (&r, a) in chunk.iter().zip(answers) {
            answer_of[r] = Some(a);
        }
    }
    Ok(answer_of)
}

/// The unit's records in unit order, and (correct, with gold) MCQ counts.
#[allow(clippy::too_many_arguments)]
fn unit_records(
    s: &Setup,
    e: &Encoded,
    unit: &[usize],
    rows: &[RowOut],
    cuts: &[(&[u32], bool)],
    answers: &[Option<Answer>],
    gen: &Value,
    teacher_json: &Value,
    trajectories: Option<&[RowTrace]>,
) -> Result<(Vec<String>, (usize, usize))> {
    let mut correct = (0usize, 0usize);
    let mut records = Vec::with_capacity(unit.len());
    for (r, &i) in unit.iter().enumerate() {
        let (resp, stopped) = cuts[r];
        let text = s.teacher.tokenizer.decode(resp)?;
        if let (Some(a), Some(g)) = (&answers[r], &e.items[i].gold) {
            correct.1 += 1;
            correct.0 += usize::from(&a.letter == g);
        }
        let traj = trajectories.map(|t| {
            let (n, steps) = (resp.len(), &t[r].commit_step);
            TrajectoryFields {
                prompt_ids: &e.ids[i],
                commit_step: &steps[..n],
                tail_ids: rows[r].gen[n..]
                    .iter()
                    .zip(&steps[n..])
                    .map(|(&id, &c)| (c >= 0).then_some(id))
                    .collect(),
                tail_commit_step: &steps[n..],
            }
        });
        records.push(record(
            &e.items[i],
            text,
            resp,
            stopped,
            answers[r].as_ref(),
            gen,
            teacher_json,
            traj.as_ref(),
        )?);
    }
    Ok((records, correct))
}

/// Every record's `gen`: the sampler's settings, plus with `--top-k` its K and with
/// `--trajectory` the sha256 of the chat template rendered (null when none was).
fn record_gen(st: &DistillSettings, s: &Setup) -> Value {
    let mut gen = gen_json(&st.gen);
    if let Some(k) = st.top_k {
        gen["top_k"] = json!(k);
    }
    if st.trajectory {
        let t = s.teacher.tokenizer.chat_template.as_ref();
        gen["chat_template_sha256"] = json!(t
            .filter(|_| st.chat_template)
            .map(|t| crate::util::sha256_hex(t.as_bytes())));
    }
    // Each record names the build that wrote it (not in the fingerprint: a newer build
    // resumes an older one's parts).
    gen["tool_build"] = json!(crate::build_info::ToolBuild::current());
    gen
}

/// What this worker did (the summary line and `--json`).
#[derive(Default)]
struct Tally {
    prompts: usize,
    correct: (usize, usize),
    exit: ExitStats,
}

/// One distill run, from its resolved settings.
pub fn run(mut st: DistillSettings) -> Result<()> {
    let s = setup(&mut st)?;
    let st = st;
    let e = encode_prompts(&st, &s)?;
    let units = plan_units(&st, &s, &e);
    let mut o = open_output(&st, &s, &e, &units)?;
    let owned_prompts: usize = o.mine.iter().map(|&k| units[k].len()).sum();
    let todo_prompts: usize = o.todo.iter().map(|&k| units[k].len()).sum();
    let lengths: Vec<usize> = e.ids.iter().map(Vec::len).collect();
    tracing::info!(
        "distill {}: {} prompts ({} MCQ) in {} {}; worker {} owns {}, {} to do{}; teacher {} \
         (weights sha256 {})",
        st.given.prompts.display(),
        e.items.len(),
        e.items.iter().filter(|i| i.options.is_some()).count(),
        units.len(),
        if !st.early_exit {
            "fixed batches"
        } else {
            "windows (continuous batching, early exit at EOS)"
        },
        st.worker,
        o.mine.len(),
        o.todo.len(),
        if !st.early_exit {
            format!(" (padding {} tokens)", plan::padding(&lengths, &units))
        } else {
            String::new()
        },
        s.teacher.dir.display(),
        &s.teacher.identity.weights_sha256[..12],
    );
    let gen = record_gen(&st, &s);
    let teacher_json = serde_json::to_value(&s.teacher.identity)?;
    let stop_ids: Vec<u32> = st
        .gen
        .eos_ids
        .iter()
        .chain(&st.gen.eot_ids)
        .copied()
        .collect();
    let done_before = (owned_prompts - todo_prompts) as u64;
    let pb = progress_bar(owned_prompts as u64, done_before);
    let full_steps = st.gen.block_rule_steps(st.gen.gen_length - 1);
    let progress = super::watch::ForwardProgress::new(
        &format!("distill worker {}", st.worker),
        forward_estimate(&st, &e, &units, &o.todo, full_steps),
        owned_prompts as u64,
        done_before,
    );
    let mut backend = if o.todo.is_empty() {
        None
    } else {
        // --gemm-tune: the tuned GEMM choices live beside this worker's part, so its resume
        // reuses them.
        let plans = st
            .gemm_tune
            .then(|| output::gemm_plans_path(&st.out, st.worker));
        Some(backend(
            st.device,
            &s.teacher,
            st.gpu_residual,
            plans.as_deref(),
        )?)
    };
    // Timed from here: the decoding, not the teacher's load (the summary's prompts/s).
    let start = Instant::now();
    let mut tally = Tally::default();
    let mut traces: Vec<RowTrace> = Vec::new();
    for &k in &o.todo.clone() {
        output::safe_point()?;
        // A stop signal is honoured before every forward pass: the unit in flight is dropped.
        let be = &mut super::watch::Watched {
            inner: backend.as_mut().expect("backend for work").as_mut(),
            progress: &progress,
        };
        let unit = &units[k];
        let (rows, forwards) = decode_unit(be, &st, &s, &e, unit, &stop_ids, &mut traces)
            .with_context(|| format!("unit {k}"))?;
        let cuts = cut(&rows, &stop_ids);
        let answers =
            answer_unit(be, &st, &s, &e, unit, &cuts).with_context(|| format!("unit {k}"))?;
        let trajectories = st.trajectory.then_some(traces.as_slice());
        let (records, c) = unit_records(
            &s,
            &e,
            unit,
            &rows,
            &cuts,
            &answers,
            &gen,
            &teacher_json,
            trajectories,
        )?;
        commit_unit(&st, &e, &mut o, k, unit, &records, &traces)?;
        tally.prompts += unit.len();
        tally.correct.0 += c.0;
        tally.correct.1 += c.1;
        for r in &rows {
            tally.exit.add(r, full_steps);
        }
        tally.exit.batch_forwards += forwards;
        pb.inc(unit.len() as u64);
        progress.committed(done_before + tally.prompts as u64);
        pb.set_message(format!(
            "{:.2} prompts/s",
            tally.prompts as f64 / start.elapsed().as_secs_f64().max(1e-9)
        ));
        tracing::debug!("unit {k} committed ({} prompts)", unit.len());
    }
    pb.finish_and_clear();
    progress.finish();
    o.discard.disarm();
    finish(&st, &e, &tally, start.elapsed().as_secs_f64())
}

/// Commit unit `k`: with `--top-k` its sidecar rows first (a committed unit always has them;
/// their sha256 goes into the commit line), then its records and commit line.
fn commit_unit(
    st: &DistillSettings,
    e: &Encoded,
    o: &mut Output,
    k: usize,
    unit: &[usize],
    records: &[String],
    traces: &[RowTrace],
) -> Result<()> {
    let mut topk_sha = None;
    if st.top_k.is_some() {
        let named: Vec<(&str, &RowTrace)> = unit
            .iter()
            .zip(traces)
            .map(|(&i, t)| (e.items[i].id.as_str(), t))
            .collect();
        topk_sha = Some(super::topk_sidecar::write_unit(
            &super::topk_sidecar::unit_path(&o.writer.path, k),
            &named,
        )?);
    }
    o.writer.append_with(k, unit, records, topk_sha.as_deref())
}

/// Forward passes the units `todo` take at most: every row its full steps with early exit
/// (rows run one by one on the host), every batch its full steps without; one more per
/// `--batch-size` MCQ rows for the answers.
fn forward_estimate(
    st: &DistillSettings,
    e: &Encoded,
    units: &[Vec<usize>],
    todo: &[usize],
    full_steps: usize,
) -> u64 {
    let mut n = 0u64;
    for &k in todo {
        let unit = &units[k];
        let rows = if st.early_exit { unit.len() } else { 1 };
        let mcq = unit
            .iter()
            .filter(|&&i| e.items[i].options.is_some())
            .count();
        n += (rows * full_steps + mcq.div_ceil(st.batch_size.get())) as u64;
    }
    n
}

/// The summary (log line, `--json`) and, for a single process, the finalised output.
fn finish(st: &DistillSettings, e: &Encoded, t: &Tally, secs: f64) -> Result<()> {
    let x = &t.exit;
    let tok_equiv = t.prompts.saturating_mul(st.gen.gen_length);
    tracing::info!(
        "worker {}: {} prompts generated in {secs:.1}s ({:.2} prompts/s, {:.1} tok/s at \
         gen_length {}){}; {}{}",
        st.worker,
        t.prompts,
        t.prompts as f64 / secs.max(1e-9),
        tok_equiv as f64 / secs.max(1e-9),
        st.gen.gen_length,
        if t.correct.1 > 0 {
            format!(", MCQ accuracy vs gold {}/{}", t.correct.0, t.correct.1)
        } else {
            String::new()
        },
        if !st.early_exit {
            "early exit off (--no-early-exit; on a GPU without --early-exit)".to_string()
        } else {
            format!(
                "early exit: {} of {} rows finished early, {:.2} blocks decoded per row, {} of \
                 {} row forward passes run ({} saved; {} at block granularity), {} batch \
                 forward passes",
                x.finished_early,
                x.rows,
                x.mean_blocks(),
                x.row_steps,
                x.row_steps_full,
                x.saved(),
                x.row_steps_full.saturating_sub(x.row_steps_block_rule),
                x.batch_forwards
            )
        },
        if e.skipped > 0 {
            format!(", {} prompts skipped as too long", e.skipped)
        } else {
            String::new()
        },
    );
    let mut summary = json!({
        "command": "distill",
        "out": st.out_url.as_ref().map_or_else(|| st.given.out.display().to_string(), |u| u.to_string()),
        "worker": st.worker.to_string(),
        "prompts": e.items.len(),
        "generated": t.prompts,
        "skipped_too_long": e.skipped,
        "seconds": secs,
        "prompts_per_s": t.prompts as f64 / secs.max(1e-9),
        "early_exit": st.early_exit,
        "rows_finished_early": x.finished_early,
        "mean_blocks_decoded": x.mean_blocks(),
        "row_forward_passes": x.row_steps,
        "row_forward_passes_full": x.row_steps_full,
        "forward_passes_saved": x.saved(),
        "row_forward_passes_block_rule": x.row_steps_block_rule,
        "batch_forward_passes": x.batch_forwards,
        "mcq_correct": t.correct.0,
        "mcq_with_gold": t.correct.1,
        "added_token_text": e.added,
    });
    if st.worker.is_whole() {
        let f = finalize_run(&st.given.out, st.format)?;
        summary["records"] = json!(f.records);
        if e.skipped > 0 {
            crate::progress::note(&format!(
                "skipped {} prompts too long for the teacher (--skip-too-long)",
                e.skipped
            ));
        }
    } else {
        crate::progress::note(&format!(
            "worker {} done: {}; run `dlm-data merge {}` once all {} workers are done",
            st.worker,
            output::part_path(&st.given.out, st.worker).display(),
            st.out_url
                .as_ref()
                .map_or_else(|| st.given.out.display().to_string(), |u| u.to_string()),
            st.worker.count
        ));
    }
    if st.json {
        crate::cron::json_line(serde_json::to_string(&summary)?);
    }
    Ok(())
}

/// Prompts too long for the teacher (see [`limits`]): an error naming the first (file, line,
/// id, why), or with `--skip-too-long` removed, logged and counted. `mcq_extra` is the answer
/// slot's positions (template + mask) that MCQ items need beyond their generation.
#[allow(clippy::type_complexity)]
fn drop_too_long(
    items: Vec<PromptItem>,
    ids: Vec<Vec<u32>>,
    st: &DistillSettings,
    shape: &ForwardShape,
    budget: u64,
    gen_length: usize,
    mcq_extra: usize,
) -> Result<(Vec<PromptItem>, Vec<Vec<u32>>, usize)> {
    let why = |it: &PromptItem, x: &[u32]| {
        let need = x
            .len()
            .checked_add(gen_length)
            .and_then(|n| n.checked_add(if it.options.is_some() { mcq_extra } else { 0 }));
        limits::too_long(shape, need, budget)
    };
    let bad: Vec<(usize, String)> = items
        .iter()
        .zip(&ids)
        .enumerate()
        .filter_map(|(i, (it, x))| why(it, x).map(|w| (i, w)))
        .collect();
    let Some((first, reason)) = bad.first() else {
        return Ok((items, ids, 0));
    };
    let it = &items[*first];
    let named = format!(
        "{}:{}: prompt {:?} ({} tokens) {reason}",
        st.given.prompts.display(),
        it.line,
        it.id,
        ids[*first].len()
    );
    if !st.skip_too_long {
        anyhow::bail!(
            "{named}{}; pass --skip-too-long to skip and count such prompts",
            if bad.len() > 1 {
                format!(" ({} more prompts are too long)", bad.len() - 1)
            } else {
                String::new()
            }
        );
    }
    let shown: Vec<&str> = bad
        .iter()
        .take(5)
        .map(|(i, _)| items[*i].id.as_str())
        .collect();
    tracing::warn!(
        "--skip-too-long: skipping {} of {} prompts (ids {shown:?}{}); first: {named}",
        bad.len(),
        items.len(),
        if bad.len() > 5 { ", ..." } else { "" }
    );
    let drop: std::collections::HashSet<usize> = bad.iter().map(|(i, _)| *i).collect();
    let n = drop.len();
    let (items, ids) = items
        .into_iter()
        .zip(ids)
        .enumerate()
        .filter(|(i, _)| !drop.contains(i))
        .map(|(_, x)| x)
        .unzip();
    Ok((items, ids, n))
}

/// Name the prompt behind a [`NonFiniteLogit`]: its batch row → `rows[row]`, a prompt index.
fn name_prompt(
    e: anyhow::Error,
    rows: &[usize],
    items: &[PromptItem],
    path: &Path,
) -> anyhow::Error {
    let row = e
        .chain()
        .find_map(|c| c.downcast_ref::<NonFiniteLogit>())
        .map(|nf| nf.row);
    match row.and_then(|r| rows.get(r)).and_then(|&i| items.get(i)) {
        Some(it) => e.context(format!(
            "{}:{}: prompt {:?}",
            path.display(),
            it.line,
            it.id
        )),
        None => e,
    }
}

/// Finalise every part beside `out` into `out`.
pub fn finalize_run(out: &Path, format: super::OutFormat) -> Result<output::Finalized> {
    let parts = output::list_parts(&output::parts_dir(out))?;
    let f = output::finalize(&parts, out, format)?;
    crate::progress::note(&format!(
        "distilled {} records ({} units, {} part files) → {}",
        f.records,
        f.batches,
        f.parts,
        out.display()
    ));
    Ok(f)
}
