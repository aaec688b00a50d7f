//! `dlm-data audit`: walks the provenance chain — the pinned base model → teacher →
//! distilled.json → checkpoints → shipped model, and manifest → lock → download.log → shards /
//! prompts / distilled — and names every broken link.
//!
//! - [`model`]: `base-pinned`, `teacher-architecture`, `teacher-weights`;
//! - [`checkpoints`]: `checkpoints` (lineage.json), `shipped-model`;
//! - [`context`]: manifests, locks, cache, download log, known eval-reference files;
//! - [`fetched`]: `manifest-pinned`, `download-log`, `cache`;
//! - [`shards`]: `shards` ([`local`]: the `--input` files an index records; with `--deep`,
//!   every shard decoded by [`deep`]); [`prompts`]: `prompts`, `distilled`; [`decontam`]: `decontam`;
//! - [`policy`]: `split-policy`, `eval-reference-isolation` over every use found above;
//! - [`report`]: the human report and its JSON form.
//!
//! Exit 0 when every link holds, 1 when one breaks (the report names it), 2 for bad usage.

pub mod checkpoints;
pub mod context;
pub mod decontam;
pub mod deep;
pub mod fetched;
pub mod local;
pub mod model;
pub mod policy;
pub mod prompts;
pub mod report;
pub mod shards;
pub mod topk;

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use report::AuditReport;

#[derive(Args, Debug, Clone)]
pub struct AuditArgs {
    /// Manifest(s) whose locks the outputs were built from (repeatable; none when every
    /// output was packed from local `--input` files).
    #[arg(long, num_args = 1..)]
    pub manifest: Vec<PathBuf>,
    #[command(flatten)]
    pub cache: crate::hub::cache::CacheArg,
    #[command(flatten)]
    pub log: crate::hub::cache::LogArg,
    /// Shard directories (index.json) to audit (repeatable).
    #[arg(long)]
    pub shards: Vec<PathBuf>,
    /// The stage-3 prompts.jsonl to check against its MCQ sources.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// The distilled.json to check against its prompts and teacher.
    #[arg(long)]
    pub distilled: Option<PathBuf>,
    /// Print the report as JSON on stdout.
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    /// Re-hash every cached locked file (default: sizes only; shards are always re-hashed).
    #[arg(long)]
    pub hash: bool,
    /// Also decode every shard and check it against its format's contract (row lengths,
    /// doc_offsets, ids below the vocabulary, no nulls, Megatron/MDS bounds) and the decoded
    /// totals against index.json.
    #[arg(long)]
    pub deep: bool,
    /// The base among the manifests' `[[model]]`s (default: the only one declared).
    #[arg(long)]
    pub base: Option<String>,
    /// The teacher checkpoint directory (config.json, safetensors, tokenizer) that wrote
    /// --distilled.
    #[arg(long)]
    pub teacher: Option<PathBuf>,
    /// lineage.json of the training stages (`dlm-data lineage add`).
    #[arg(long)]
    pub lineage: Option<PathBuf>,
    /// The shipped model directory: must equal the last checkpoint, file for file.
    #[arg(long)]
    pub shipped: Option<PathBuf>,
}

/// Run every check and build the report.
pub fn audit(args: &AuditArgs) -> Result<AuditReport> {
    if args.manifest.is_empty() && args.shards.is_empty() {
        return Err(crate::error::usage(
            "give --manifest (the locks the outputs were built from) or --shards",
        ));
    }
    if args.distilled.is_some() && args.prompts.is_none() {
        return Err(crate::error::usage(
            "--distilled needs --prompts (records are traced through their prompts)",
        ));
    }
    let ctx = context::Ctx::load(
        &args.manifest,
        args.cache.dir.as_deref(),
        args.log.file.as_deref(),
    )?;
    let base = model::find_base(&ctx, args.base.as_deref())?;
    // The model chain is reported when a model is in scope: a declared base, or a model flag.
    let models_in_scope = base.is_some()
        || args.teacher.is_some()
        || args.lineage.is_some()
        || args.shipped.is_some();
    let teacher = args.teacher.as_deref().map(model::Teacher::open);
    let mut checks = Vec::new();
    let mut chain = Vec::new();
    if models_in_scope {
        let audited = checkpoints::audited_outputs(&args.shards, args.distilled.as_deref());
        let (ck, lineage) = checkpoints::check(
            args.lineage.as_deref(),
            base.as_ref(),
            teacher.as_ref(),
            &audited,
        );
        checks.push(model::base_pinned(&ctx, base.as_ref(), args.hash));
        checks.push(model::teacher_architecture(
            &ctx,
            base.as_ref(),
            teacher.as_ref(),
        ));
        checks.push(model::teacher_weights(
            teacher.as_ref(),
            args.distilled.as_deref(),
        ));
        checks.push(ck);
        checks.push(checkpoints::shipped(
            args.shipped.as_deref(),
            lineage.as_ref(),
        ));
        chain = checkpoints::chain(
            base.as_ref(),
            teacher.as_ref(),
            lineage.as_ref(),
            args.shipped.as_deref(),
        );
    }
    let mut uses = Vec::new();
    checks.extend([
        fetched::manifest_pinned(&ctx),
        fetched::download_log(&ctx),
        fetched::cache(&ctx, args.hash),
        fetched::local_sources(&ctx),
    ]);
    checks.push(shards::check(
        &ctx,
        &args.shards,
        args.hash,
        args.deep,
        &mut uses,
    ));
    let (pc, recs) = prompts::check_prompts(&ctx, args.prompts.as_deref(), &mut uses);
    checks.push(pc);
    checks.push(prompts::check_distilled(
        args.distilled.as_deref(),
        recs.as_deref(),
        &mut uses,
    ));
    checks.push(policy::splits(&ctx, &uses));
    checks.push(policy::eval_isolation(&ctx, &uses));
    checks.push(decontam::check(&args.shards, args.prompts.as_deref()));
    let ok = checks.iter().all(|c| c.status != report::Status::Fail);
    Ok(AuditReport {
        ok,
        tool: crate::shards::index::Index::tool_name(),
        time: crate::decontam::time::now_rfc3339(),
        manifests: args
            .manifest
            .iter()
            .map(|m| m.display().to_string())
            .collect(),
        chain,
        checks,
    })
}

pub fn run(mut args: AuditArgs) -> Result<()> {
    // A committed bucket output is audited through a local copy of exactly its objects.
    for s in &mut args.shards {
        *s = crate::storage::materialize::local_copy(s, "--shards")?;
    }
    // Single files in a bucket: read from a local copy (distilled.json with its top-k sidecar).
    use crate::storage::materialize::local_file;
    for (flag, p, siblings) in [
        ("--prompts", &mut args.prompts, &[][..]),
        ("--distilled", &mut args.distilled, &[".topk.parquet"][..]),
        ("--lineage", &mut args.lineage, &[][..]),
    ] {
        if let Some(p) = p {
            let given = p.clone();
            *p = local_file(&given, flag, siblings)?;
            if flag == "--prompts" {
                // decontam's report on these prompts sits beside them (`<stem>.decontam.json`).
                let rep = crate::decontam::report::default_path(p, false);
                if let Some(name) = rep.file_name() {
                    crate::storage::materialize::beside(&given, flag, &name.to_string_lossy())?;
                }
            }
        }
    }
    let r = audit(&args)?;
    if args.json {
        crate::cron::json_line(serde_json::to_string(&r)?);
    } else if !(r.ok && crate::progress::settings().quiet) {
        // --quiet: the report only when a link is broken (the exit code says pass).
        print!("{}", report::human(&r));
    }
    if r.ok {
        Ok(())
    } else {
        anyhow::bail!("audit: broken link(s): {}", r.failed().join(", "))
    }
}
