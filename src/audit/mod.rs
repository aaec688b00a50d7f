//! `dlm-data audit`: walks the provenance chain — manifest → lock → download.log → shards /
//! prompts / distilled — and names every broken link.
//!
//! - [`context`]: manifests, locks, cache, download log, known eval-reference files;
//! - [`fetched`]: `manifest-pinned`, `download-log`, `cache`;
//! - [`shards`]: `shards`; [`prompts`]: `prompts`, `distilled`; [`decontam`]: `decontam`;
//! - [`policy`]: `split-policy`, `eval-reference-isolation` over every use found above;
//! - [`report`]: the human report and its JSON form.
//!
//! Exit 0 when every link holds, 1 when one breaks (the report names it), 2 for bad usage.

pub mod context;
pub mod decontam;
pub mod fetched;
pub mod policy;
pub mod prompts;
pub mod report;
pub mod shards;

use std::path::PathBuf;

use anyhow::Result;
use clap::Args;

use report::AuditReport;

#[derive(Args, Debug, Clone)]
pub struct AuditArgs {
    /// Manifest(s) whose locks the outputs were built from (repeatable).
    #[arg(long, required = true, num_args = 1..)]
    pub manifest: Vec<PathBuf>,
    /// Cache root (default as in `fetch`).
    #[arg(long)]
    pub cache: Option<PathBuf>,
    /// Download log (default: <cache>/download.log).
    #[arg(long)]
    pub log: Option<PathBuf>,
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
    #[arg(long)]
    pub json: bool,
    /// Re-hash every cached locked file (default: sizes only; shards are always re-hashed).
    #[arg(long)]
    pub hash: bool,
}

/// Run every check and build the report.
pub fn audit(args: &AuditArgs) -> Result<AuditReport> {
    if args.distilled.is_some() && args.prompts.is_none() {
        return Err(crate::error::usage(
            "--distilled needs --prompts (records are traced through their prompts)",
        ));
    }
    let ctx = context::Ctx::load(&args.manifest, args.cache.as_deref(), args.log.as_deref())?;
    let mut uses = Vec::new();
    let mut checks = vec![
        fetched::manifest_pinned(&ctx),
        fetched::download_log(&ctx),
        fetched::cache(&ctx, args.hash),
    ];
    checks.push(shards::check(&ctx, &args.shards, &mut uses));
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
        checks,
    })
}

pub fn run(args: AuditArgs) -> Result<()> {
    let r = audit(&args)?;
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print!("{}", report::human(&r));
    }
    if r.ok {
        Ok(())
    } else {
        anyhow::bail!("audit: broken link(s): {}", r.failed().join(", "))
    }
}
