//! The steps of an mcq run around reading the items ([`super::load`]): open (paths, manifest,
//! one writer, policy, templates, lock, tokenizer), the settings fingerprint a rerun must
//! match, claiming the output directory, prompts.jsonl written (its stale decontam report
//! removed), and the summary.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::item::McqItem;
use super::load::{check_policy, Loaded};
use super::settings::McqSettings;
use super::template::Templates;
use super::tokenizer::{self, LoadedTokenizer};
use super::{claim_sft, prompts, uptodate};
use crate::hub::cache::Cache;
use crate::manifest::{Lock, Manifest};
use crate::shards::outdir::{self, Claim};
use crate::worker::WorkerSlice;

/// What an mcq run reads before any item: everything checked, the output locked.
pub(super) struct Opened {
    pub m: Manifest,
    pub lock_path: PathBuf,
    pub lock: Lock,
    pub templates: Templates,
    pub cache: Cache,
    pub tok: Option<LoadedTokenizer>,
    /// Held to the end of the run: one writer per output.
    pub _guard: crate::lock::OutputLock,
}

/// Before any work: paths recorded exactly, no input as the output, one writer; then the
/// policy, the templates, the lock and the tokenizer.
pub(super) fn open(args: &McqSettings) -> Result<Opened> {
    let given: Vec<(&str, &Path)> = [
        ("--out", Some(args.out.as_path())),
        ("--manifest", Some(args.manifest.as_path())),
        ("--tokenizer", args.tokenizer.as_deref()),
        ("--template", args.template.as_deref()),
        ("--cache", args.cache_flag.as_deref()),
    ]
    .into_iter()
    .filter_map(|(f, p)| p.map(|p| (f, p)))
    .collect();
    let m = Manifest::load_data(&args.manifest)?;
    let lock_file = m.lock_path();
    let mut inputs: Vec<(&str, &Path)> = given[1..].to_vec();
    inputs.push(("lock", lock_file.as_path()));
    crate::lock::refuse_inputs("--out", &args.out, &inputs)?;
    let guard = crate::lock::OutputLock::dir(&args.out_dir(), "mcq")?;
    check_policy(&m)?;
    let templates = Templates::load(args.template.as_deref(), &args.answer_template)?;
    let lock_path = m.lock_path();
    let lock = Lock::load(&lock_path).with_context(|| {
        format!(
            "no usable lock beside the manifest; run `dlm-data fetch --manifest {}` first",
            m.path.display()
        )
    })?;
    let cache = args.cache.clone();
    let tok = match &args.tokenizer {
        Some(p) => Some(tokenizer::load(
            p,
            &args.boundaries,
            args.mask_token.as_deref(),
            args.special_tokens_in_text,
        )?),
        None => None,
    };
    Ok(Opened {
        m,
        lock_path,
        lock,
        templates,
        cache,
        tok,
        _guard: guard,
    })
}

/// The run's settings (the fingerprint a rerun must match to be a no-op); none without a
/// tokenizer (prompts only).
pub(super) fn fingerprint(
    args: &McqSettings,
    o: &Opened,
) -> Result<Option<uptodate::McqFingerprint>> {
    let Some(t) = &o.tok else {
        return Ok(None);
    };
    Ok(Some(uptodate::McqFingerprint {
        manifest_sha256: crate::util::sha256_file(&o.m.path)?,
        lock_sha256: crate::util::sha256_file(&o.lock_path)?,
        seed: args.seed,
        prompt_template: o.templates.prompt_text.clone(),
        answer_template: o.templates.answer_text.clone(),
        max_item_bytes: args.max_item_bytes,
        tokenizer_sha256: t.info.sha256.clone(),
        eos_id: t.info.eos_id,
        bos: t.bos.clone(),
        mask: t.mask.clone(),
        special_tokens_in_text: t.mode,
        seq_len: args.seq_len,
        format: args.format,
        rows_per_shard: args.rows_per_shard,
    }))
}

/// This worker's items: global item k belongs to worker k % N.
pub(super) fn worker_items(items: Vec<McqItem>, slice: WorkerSlice) -> Vec<McqItem> {
    items
        .into_iter()
        .enumerate()
        .filter(|(k, _)| slice.owns(*k))
        .map(|(_, it)| it)
        .collect()
}

/// The decontam reports beside the outputs, and what each says it scanned (`None`: no
/// report of this tool's there).
pub(super) struct Reports {
    pub prompts_report: PathBuf,
    pub prompts_scanned: Option<String>,
    pub sft_report: PathBuf,
    pub sft_scanned: Option<String>,
}

/// Claim the output directory (and `sft/` with a tokenizer): replace only what an earlier
/// mcq run wrote there; never an input. decontam's reports are this tool's own files, kept
/// while they may still describe what this run writes.
pub(super) fn claim(
    args: &McqSettings,
    o: &Opened,
    out: &Path,
    prompts_path: &Path,
    sft_dir: &Path,
) -> Result<Reports> {
    let inputs: Vec<&Path> = [
        Some(args.manifest.as_path()),
        Some(o.lock_path.as_path()),
        args.template.as_deref(),
        args.tokenizer.as_deref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut claim = Claim::new("mcq", args.force)
        .keep(["sft"])
        .inputs(inputs.iter().copied());
    if prompts_path.is_file() && prompts::is_own_file(prompts_path) {
        claim = claim.remove(["prompts.jsonl"]);
    }
    // Our card (rewritten only when its bytes change); a user's README.md is refused.
    if super::card::is_card(&super::card::card_path(out)) {
        claim = claim.keep([crate::shards::card::CARD_FILE]);
    }
    // decontam's report on prompts.jsonl, written beside it by the documented pipeline: this
    // tool's own file. Kept while it describes the prompts this run writes, removed (stale)
    // when they change.
    let prompts_report = out.join(outdir::prompts_decontam_report("prompts.jsonl"));
    let prompts_scanned = outdir::own_decontam_report(&prompts_report);
    if prompts_scanned.is_some() {
        claim = claim.keep([outdir::prompts_decontam_report("prompts.jsonl")]);
    }
    claim.apply(out)?;
    // decontam's report on the SFT shards: kept while it describes the index written now.
    let sft_report = sft_dir.join(outdir::DECONTAM_REPORT);
    let sft_scanned = outdir::own_decontam_report(&sft_report);
    if args.tokenizer.is_some() {
        // The decontam report is removed after the write when the shards changed.
        let claim = Claim::new("mcq", args.force).inputs(inputs.iter().copied());
        claim_sft(claim, sft_dir, sft_scanned.is_some()).apply(sft_dir)?;
    }
    Ok(Reports {
        prompts_report,
        prompts_scanned,
        sft_report,
        sft_scanned,
    })
}

/// prompts.jsonl written; the decontam report beside it removed when it describes other
/// prompts.
pub(super) fn write_prompts(
    prompts_path: &Path,
    records: &[prompts::PromptRecord],
    r: &Reports,
) -> Result<()> {
    prompts::write(prompts_path, records)?;
    if let Some(scanned) = &r.prompts_scanned {
        if &crate::util::sha256_file(prompts_path)? != scanned {
            std::fs::remove_file(&r.prompts_report)
                .with_context(|| format!("removing {}", r.prompts_report.display()))?;
            tracing::info!(
                "{}: removed: it describes other prompts than those written now (rerun decontam)",
                r.prompts_report.display()
            );
        }
    }
    crate::progress::note(&format!(
        "prompts: {} items → {}",
        records.len(),
        prompts_path.display()
    ));
    Ok(())
}

/// A worker's note on what to run next; with `--json`, the summary on stdout.
pub(super) fn summary(
    args: &McqSettings,
    slice: WorkerSlice,
    out: &Path,
    prompts_path: &Path,
    items: usize,
    loaded: &Loaded,
    sft: serde_json::Value,
) {
    if !slice.is_whole() {
        crate::progress::note(&format!(
            "mcq worker {slice} done: {}; run `dlm-data merge {}` once all {} workers are done",
            out.display(),
            args.out.display(),
            slice.count
        ));
    }
    if args.json {
        crate::cron::json_line(serde_json::json!({
            "out": args.bucket.as_ref().map_or_else(|| out.display().to_string(), |u| u.to_string()),
            "prompts": prompts_path.display().to_string(),
            "items": items,
            "skipped_empty": loaded.skipped_empty,
            "skipped_oversize": loaded.skipped_oversize,
            "kept_without_blank_options": loaded.kept_without_blank,
            "skipped": loaded.skipped,
            "sft": sft,
        }));
    }
}
