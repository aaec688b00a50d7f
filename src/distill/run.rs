//! The `distill` command's driver: teacher + prompts + plan → committed batches → finalised
//! output, resumable and shardable (see [`super::output`] for the part layout).

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use rayon::prelude::*;
use serde_json::{json, Map, Value};

use super::limits::{self, ForwardShape};
use super::mcq::{answer_batch, Answer, ANSWER_TEMPLATE};
use super::output::{self, PartWriter};
use super::prompts::{read_prompts, PromptItem, PROVENANCE_FIELDS};
use super::sampler::generate;
use super::{plan, rng, DistillArgs};
use crate::sampling::finite::NonFiniteLogit;
use crate::sampling::GenParams;
use crate::teacher::{Teacher, TeacherBackend, TeacherOptions};
use crate::worker::WorkerSlice;

/// `cpu`, `cuda` or `cuda:N`, checked before any work.
pub fn check_device(device: &str) -> Result<()> {
    let ok = device == "cpu"
        || device == "cuda"
        || device
            .strip_prefix("cuda:")
            .is_some_and(|n| n.parse::<usize>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(crate::error::usage(format!(
            "--device {device:?}: expected cpu, cuda or cuda:N"
        )))
    }
}

/// The backend for `--device`.
/// `residual` (bf16 | f32) is the GPU residual stream's precision.
pub fn backend(
    device: &str,
    teacher: &Teacher,
    residual: &str,
    gemm_plans: Option<&Path>,
) -> Result<Box<dyn TeacherBackend>> {
    match device {
        "cpu" => Ok(Box::new(teacher.cpu()?)),
        d if d == "cuda" || d.starts_with("cuda:") => {
            cuda_backend(d, teacher, residual, gemm_plans)
        }
        other => Err(crate::error::usage(format!(
            "--device {other:?}: expected cpu, cuda or cuda:N"
        ))),
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda_backend(
    device: &str,
    _teacher: &Teacher,
    _residual: &str,
    _gemm_plans: Option<&Path>,
) -> Result<Box<dyn TeacherBackend>> {
    Err(crate::error::usage(format!(
        "--device {device}: this binary was built without the `cuda` feature \
         (cargo build --release --features cuda), or use --device cpu"
    )))
}

#[cfg(feature = "cuda")]
fn cuda_backend(
    device: &str,
    teacher: &Teacher,
    residual: &str,
    gemm_plans: Option<&Path>,
) -> Result<Box<dyn TeacherBackend>> {
    let r = crate::gpu::engine::Residual::parse(residual)
        .map_err(|e| crate::error::usage(e.to_string()))?;
    crate::gpu::backend::open(device, teacher, r, gemm_plans)
}

/// Environment switches of the GPU engine (src/gpu/engine) that change its numerics.
const GPU_ENV_SWITCHES: &[&str] = &[
    "DLM_ATTN",
    "DLM_GEMM_TUNE",
    "DLM_TAIL_ROWS",
    "DLM_FOLD_NORM",
];

/// The GPU-only fingerprint fields: the residual precision, the kernels' source identity,
/// `--gemm-tune` (when on), and the engine's debugging/experimental switches that change its
/// numerics (only those set, from `env`).
fn gpu_fields(
    fp: &mut Value,
    residual: &str,
    kernels: Option<String>,
    gemm_tune: bool,
    env: impl Fn(&str) -> Option<String>,
) {
    fp["gpu_residual"] = json!(residual);
    if let Some(id) = kernels {
        fp["gpu_kernels"] = json!(id);
    }
    if gemm_tune {
        fp["gemm_tune"] = json!(true);
    }
    let set: serde_json::Map<String, Value> = GPU_ENV_SWITCHES
        .iter()
        .filter_map(|k| env(k).map(|v| (k.to_string(), json!(v))))
        .collect();
    if !set.is_empty() {
        fp["gpu_env"] = Value::Object(set);
    }
}

/// The GPU kernels' source identity (none in a build without the `cuda` feature, which
/// refuses `--device cuda` before any fingerprint).
#[cfg(feature = "cuda")]
fn kernels_id() -> Option<String> {
    Some(crate::gpu::nvrtc::kernels_id())
}
#[cfg(not(feature = "cuda"))]
fn kernels_id() -> Option<String> {
    None
}

/// Everything that determines the output bytes; a resume must match it exactly.
fn fingerprint(
    args: &DistillArgs,
    teacher: &Teacher,
    params: &GenParams,
    prompts_sha256: &str,
    n_prompts: usize,
) -> Value {
    let mut fp = json!({
        "tool": format!("dlm-data {}", env!("CARGO_PKG_VERSION")),
        "prompts_sha256": prompts_sha256,
        "limit": args.limit,
        "prompts": n_prompts,
        "teacher_weights_sha256": teacher.identity.weights_sha256,
        "teacher_config_sha256": teacher.identity.config_sha256,
        "tokenizer_sha256": crate::util::sha256_file(&teacher.dir.join("tokenizer.json")).ok(),
        "gen": gen_json(params),
        "batch_size": args.batch_size(),
        "mask_id": params.mask_id,
        "pad_id": teacher.pad_id,
        "logits_shift": teacher.logits_shift,
        "chat_template": teacher.tokenizer.chat_template.is_some() && !args.no_chat_template,
        "logits_eos_inf": params.logits_eos_inf,
        "confidence_eos_eot_inf": params.confidence_eos_eot_inf,
        "eos_ids": params.eos_ids,
        "eot_ids": params.eot_ids,
        "answer_template": ANSWER_TEMPLATE,
        // cpu and cuda round differently: one output is never resumed on the other.
        "backend": if args.device == "cpu" { "cpu" } else { "cuda" },
    });
    // Fields that change which prompts run or how they batch; recorded only when set, so
    // runs without them keep their fingerprint (and stay resumable).
    if args.skip_too_long {
        fp["skip_too_long"] = json!(true);
    }
    if let Some(g) = args.max_batch_memory {
        fp["max_batch_memory_gib"] = json!(g);
    }
    if args.device != "cpu" {
        gpu_fields(
            &mut fp,
            &args.gpu_residual,
            kernels_id(),
            args.gemm_tune,
            |k| std::env::var(k).ok(),
        );
    }
    fp
}

fn gen_json(p: &GenParams) -> Value {
    let mut g = json!({
        "gen_length": p.gen_length,
        "block_length": p.block_length,
        "steps": p.steps,
        "temperature": p.temperature,
        "remasking": p.remasking.as_str(),
        "seed": p.seed,
    });
    // Approximate modes are recorded where they apply (exact records keep their old shape).
    if p.approximate() {
        g["approximate"] = json!({
            "threshold": p.threshold,
            "cache": p.cache.as_str(),
        });
        if let Some(k) = p.cache_refresh {
            g["approximate"]["cache_refresh"] = json!(k);
        }
    }
    g
}

fn letters_map(v: &[(String, f64)]) -> Value {
    Value::Object(v.iter().map(|(k, p)| (k.clone(), json!(p))).collect())
}

/// The distilled.json record of one prompt (contract item 6, plus `stop`).
#[allow(clippy::too_many_arguments)]
fn record(
    item: &PromptItem,
    response: String,
    response_ids: &[u32],
    stopped: bool,
    answer: Option<&Answer>,
    gen: &Value,
    teacher: &Value,
) -> Result<String> {
    let mut r = Map::new();
    r.insert("id".into(), json!(item.id));
    for (k, v) in PROVENANCE_FIELDS.iter().zip(&item.provenance) {
        r.insert((*k).into(), v.clone());
    }
    r.insert("prompt".into(), json!(item.prompt));
    r.insert("response".into(), json!(response));
    r.insert("response_ids".into(), json!(response_ids));
    r.insert("stop".into(), json!(if stopped { "eos" } else { "length" }));
    r.insert("answer".into(), json!(answer.map(|a| &a.letter)));
    r.insert(
        "answer_probs".into(),
        answer.map_or(Value::Null, |a| letters_map(&a.probs)),
    );
    r.insert(
        "answer_logprobs".into(),
        answer.map_or(Value::Null, |a| letters_map(&a.logprobs)),
    );
    r.insert("gold".into(), json!(item.gold));
    r.insert(
        "correct".into(),
        match (answer, &item.gold) {
            (Some(a), Some(g)) => json!(&a.letter == g),
            _ => Value::Null,
        },
    );
    r.insert("gen".into(), gen.clone());
    r.insert("teacher".into(), teacher.clone());
    Ok(serde_json::to_string(&Value::Object(r))?)
}

fn progress_bar(total: u64, done: u64) -> indicatif::ProgressBar {
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

pub fn run(args: DistillArgs) -> Result<()> {
    let slice = WorkerSlice::resolve(args.shard, args.num_shards)?;
    if args.batch_size() == 0 {
        return Err(crate::error::usage("--batch-size must be > 0"));
    }
    check_device(&args.device)?;
    if args.out.is_dir() {
        return Err(crate::error::usage(format!(
            "--out {}: is a directory; distill writes one file (and OUT.parts beside it)",
            args.out.display()
        )));
    }
    let budget = args.batch_memory_bytes()?;
    let teacher = Teacher::open(
        &args.teacher,
        &TeacherOptions {
            mask_id: args.mask_id,
            logits_shift: args.logits_shift,
            bidirectional: args.bidirectional,
        },
    )?;
    let params = GenParams {
        gen_length: args.gen_length,
        block_length: args.block_length,
        steps: args.steps,
        temperature: args.temperature,
        remasking: args.remasking,
        seed: args.seed,
        mask_id: teacher.mask_id,
        logits_eos_inf: args.logits_eos_inf,
        confidence_eos_eot_inf: args.confidence_eos_eot_inf,
        eos_ids: teacher.eos_ids.clone(),
        eot_ids: args.eot_ids.clone(),
        threshold: args.threshold,
        cache: args.cache,
        cache_refresh: args.cache_refresh,
    };
    params.validate()?;
    if params.cache != super::Cache::None && args.device == "cpu" {
        return Err(crate::error::usage(format!(
            "--cache {} runs on the GPU only (--device cuda); the CPU sampler is exact",
            params.cache.as_str()
        )));
    }
    if args.gemm_tune && args.device == "cpu" {
        return Err(crate::error::usage(
            "--gemm-tune tunes the GPU's cuBLASLt GEMMs: it needs --device cuda".to_string(),
        ));
    }
    if params.approximate() {
        tracing::warn!(
            "APPROXIMATE sampling (threshold {:?}, cache {}): outputs differ from LLaDA's exact \
             sampler; recorded in every record's gen",
            params.threshold,
            params.cache.as_str()
        );
    }
    let shape = ForwardShape {
        cfg: &teacher.config,
        cpu: args.device == "cpu",
        block_length: params.block_length,
        steps_per_block: params.steps_per_block(),
    };
    // The settings alone, with a one-token prompt: an absurd --gen-length/--steps is a usage
    // error before any prompt is read.
    if let Some(why) = limits::too_long(&shape, params.gen_length.checked_add(1), budget) {
        return Err(crate::error::usage(format!(
            "--gen-length {} --steps {}: even a one-token prompt {why}",
            params.gen_length, params.steps
        )));
    }
    let v = teacher.config.vocab_size;
    if let Some(bad) = args.eot_ids.iter().find(|&&e| e as usize >= v) {
        return Err(crate::error::usage(format!(
            "--eot-id {bad} is out of range for vocab_size {v}"
        )));
    }

    let mut items = read_prompts(&args.prompts)?;
    if let Some(n) = args.limit {
        items.truncate(n);
    }
    let use_template = !args.no_chat_template;
    let tok = &teacher.tokenizer;
    let ids: Vec<Vec<u32>> = items
        .par_iter()
        .map(|it| {
            let text = tok.render(&it.prompt, use_template)?;
            tok.encode(&text)
        })
        .collect::<Vec<Result<_>>>()
        .into_iter()
        .zip(&items)
        .map(|(r, it)| r.with_context(|| format!("{}:{}", args.prompts.display(), it.line)))
        .collect::<Result<_>>()?;
    if let Some((it, _)) = items.iter().zip(&ids).find(|(_, x)| x.is_empty()) {
        anyhow::bail!(
            "{}:{}: prompt {:?} encodes to no tokens",
            args.prompts.display(),
            it.line,
            it.id
        );
    }
    let template_ids = tok.encode(ANSWER_TEMPLATE)?;
    let (items, ids, skipped) = drop_too_long(
        items,
        ids,
        &args,
        &shape,
        budget,
        params.gen_length,
        template_ids.len() + 1,
    )?;
    let mcq = items.iter().any(|i| i.options.is_some());
    let letter_ids = if mcq {
        tok.letter_ids(ANSWER_TEMPLATE, 10)
            .context("answer letters A–J")?
    } else {
        vec![]
    };
    let lengths: Vec<usize> = ids.iter().map(Vec::len).collect();
    // Positions a batch's longest prompt needs (the MCQ answer slot included when any).
    let extra = params
        .gen_length
        .saturating_add(if mcq { template_ids.len() + 1 } else { 0 });
    let batches = plan::plan_within(&lengths, args.batch_size(), |rows, longest| {
        limits::fits(&shape, rows, longest.saturating_add(extra), budget)
    });

    let prompts_sha256 = crate::util::sha256_file(&args.prompts)?;
    let fp = fingerprint(&args, &teacher, &params, &prompts_sha256, items.len());
    let hdr = output::header(slice, batches.len(), items.len(), &fp);
    let own = output::part_path(&args.out, slice);
    let mut writer = PartWriter::open(&own, &hdr)?;
    let mut discard = output::DiscardIfEmpty::new(&writer);
    let mut skip = writer.done.clone();
    if slice.is_whole() {
        skip.extend(output::committed_elsewhere(
            &output::parts_dir(&args.out),
            &hdr,
            &own,
        )?);
    }
    let mine: Vec<usize> = (0..batches.len()).filter(|&k| slice.owns(k)).collect();
    let todo: Vec<usize> = mine.iter().copied().filter(|k| !skip.contains(k)).collect();
    let owned_prompts: usize = mine.iter().map(|&k| batches[k].len()).sum();
    let todo_prompts: usize = todo.iter().map(|&k| batches[k].len()).sum();
    tracing::info!(
        "distill {}: {} prompts ({} MCQ) in {} batches; worker {slice} owns {} batches, {} to do \
         (padding {} tokens); teacher {} (weights sha256 {})",
        args.prompts.display(),
        items.len(),
        items.iter().filter(|i| i.options.is_some()).count(),
        batches.len(),
        mine.len(),
        todo.len(),
        plan::padding(&lengths, &batches),
        teacher.dir.display(),
        &teacher.identity.weights_sha256[..12],
    );

    let gen = gen_json(&params);
    let teacher_json = serde_json::to_value(&teacher.identity)?;
    let stop_ids: Vec<u32> = params
        .eos_ids
        .iter()
        .chain(&params.eot_ids)
        .copied()
        .collect();
    let pb = progress_bar(owned_prompts as u64, (owned_prompts - todo_prompts) as u64);
    let start = Instant::now();
    let mut backend = if todo.is_empty() {
        None
    } else {
        // --gemm-tune: the tuned GEMM choices live beside this worker's part, so its resume
        // reuses them.
        let plans = args
            .gemm_tune
            .then(|| output::gemm_plans_path(&args.out, slice));
        Some(backend(
            &args.device,
            &teacher,
            &args.gpu_residual,
            plans.as_deref(),
        )?)
    };
    let mut generated = 0usize;
    let mut correct = (0usize, 0usize);
    for &k in &todo {
        let be = backend.as_mut().expect("backend for work").as_mut();
        let batch = &batches[k];
        let prompts: Vec<&[u32]> = batch.iter().map(|&i| ids[i].as_slice()).collect();
        let keys: Vec<u64> = batch
            .iter()
            .map(|&i| rng::prompt_key(&items[i].id))
            .collect();
        let out = generate(
            be,
            &params,
            &prompts,
            &keys,
            teacher.pad_id,
            teacher.logits_shift,
            None,
        )
        .map_err(|e| name_prompt(e, batch, &items, &args.prompts))
        .with_context(|| format!("batch {k}"))?;
        // Responses end at the first EOS/EoT.
        let cut: Vec<(&[u32], bool)> = out
            .iter()
            .map(|g| match g.iter().position(|t| stop_ids.contains(t)) {
                Some(e) => (&g[..e], true),
                None => (&g[..], false),
            })
            .collect();
        let mcq_rows: Vec<usize> = (0..batch.len())
            .filter(|&r| items[batch[r]].options.is_some())
            .collect();
        let contexts: Vec<Vec<u32>> = mcq_rows
            .iter()
            .map(|&r| [prompts[r], cut[r].0, &template_ids].concat())
            .collect();
        let n_opts: Vec<usize> = mcq_rows
            .iter()
            .map(|&r| items[batch[r]].options.as_ref().map_or(0, Vec::len))
            .collect();
        let answers = answer_batch(
            be,
            &contexts,
            &n_opts,
            &letter_ids,
            teacher.mask_id,
            teacher.pad_id,
            teacher.logits_shift,
        )
        .map_err(|e| {
            let rows: Vec<usize> = mcq_rows.iter().map(|&r| batch[r]).collect();
            name_prompt(e, &rows, &items, &args.prompts)
        })
        .with_context(|| format!("batch {k}: MCQ answers"))?;
        let mut answer_of: Vec<Option<&Answer>> = vec![None; batch.len()];
        for (r, a) in mcq_rows.iter().zip(&answers) {
            answer_of[*r] = Some(a);
        }
        let mut records = Vec::with_capacity(batch.len());
        for (r, &i) in batch.iter().enumerate() {
            let (resp, stopped) = cut[r];
            let text = tok.decode(resp)?;
            if let (Some(a), Some(g)) = (answer_of[r], &items[i].gold) {
                correct.1 += 1;
                correct.0 += usize::from(&a.letter == g);
            }
            records.push(record(
                &items[i],
                text,
                resp,
                stopped,
                answer_of[r],
                &gen,
                &teacher_json,
            )?);
        }
        writer.append(k, batch, &records)?;
        generated = generated.saturating_add(batch.len().saturating_mul(params.gen_length));
        pb.inc(batch.len() as u64);
        pb.set_message(format!(
            "{:.1} tok/s",
            generated as f64 / start.elapsed().as_secs_f64().max(1e-9)
        ));
        tracing::debug!("batch {k} committed ({} prompts)", batch.len());
    }
    pb.finish_and_clear();
    discard.disarm();
    let secs = start.elapsed().as_secs_f64();
    tracing::info!(
        "worker {slice}: {} prompts generated in {secs:.1}s ({:.2} prompts/s, {:.1} tok/s){}{}",
        todo_prompts,
        todo_prompts as f64 / secs.max(1e-9),
        generated as f64 / secs.max(1e-9),
        if correct.1 > 0 {
            format!(", MCQ accuracy vs gold {}/{}", correct.0, correct.1)
        } else {
            String::new()
        },
        if skipped > 0 {
            format!(", {skipped} prompts skipped as too long")
        } else {
            String::new()
        }
    );
    if slice.is_whole() {
        finalize_run(&args.out, args.format)?;
        if skipped > 0 {
            eprintln!("skipped {skipped} prompts too long for the teacher (--skip-too-long)");
        }
    } else {
        eprintln!(
            "worker {slice} done: {}; run `dlm-data merge {}` once all {} workers are done",
            own.display(),
            args.out.display(),
            slice.count
        );
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
    args: &DistillArgs,
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
        args.prompts.display(),
        it.line,
        it.id,
        ids[*first].len()
    );
    if !args.skip_too_long {
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
pub fn finalize_run(out: &Path, format: super::OutFormat) -> Result<()> {
    let parts = output::list_parts(&output::parts_dir(out))?;
    let f = output::finalize(&parts, out, format)?;
    eprintln!(
        "distilled {} records ({} batches, {} part files) → {}",
        f.records,
        f.batches,
        f.parts,
        out.display()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpu_fingerprint_records_residual_and_only_the_switches_set() {
        let mut fp = json!({"backend": "cuda"});
        gpu_fields(&mut fp, "bf16", Some("0123abcd".into()), false, |_| None);
        assert_eq!(fp["gpu_residual"], "bf16");
        assert_eq!(fp["gpu_kernels"], "0123abcd");
        assert!(fp.get("gpu_env").is_none());
        assert!(fp.get("gemm_tune").is_none());
        let mut fp = json!({"backend": "cuda"});
        gpu_fields(&mut fp, "f32", None, true, |k| {
            (k == "DLM_ATTN").then(|| "m2".to_string())
        });
        assert_eq!(fp["gpu_residual"], "f32");
        assert_eq!(fp["gemm_tune"], true);
        assert_eq!(fp["gpu_env"], json!({"DLM_ATTN": "m2"}));
    }
}
