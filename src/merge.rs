//! `dlm-data merge OUT`: combine worker outputs (`OUT/parts/IIIII-of-NNNNN/`) into exactly the
//! layout and bytes one process would have written to `OUT`.
//!
//! What `OUT` is decides the merge:
//! - a directory with `parts/` (pack workers): [`crate::pack::merge`] re-cuts the segments;
//!   mcq workers' parts (each with a prompts.jsonl): [`crate::mcq::merge`] interleaves the
//!   items and re-cuts the SFT shards;
//! - a file path with `OUT.parts/` beside it (distill workers): [`crate::distill::output::finalize`];
//! - a manifest (`*.toml`) with `<log>.part-*` download logs beside it (fetch workers): the
//!   parts are joined in worker order into the log ([`join_fetch_logs`]).
//!
//! Missing or incomplete parts are refused with their names; nothing partial is written.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Args;

use crate::distill::{output, OutFormat};
use crate::worker::{check_worker_set, MergeSummary, PartSet, PartsKind};

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The shared output (a pack/mcq directory, or a distill --out file with parts beside it).
    pub out: PathBuf,
    /// Print a one-line JSON summary on stdout at the end.
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    #[command(flatten)]
    pub threads: crate::tuning::ThreadsArg,
    /// distill only: the output format (default: jsonl when OUT ends in .jsonl, else json).
    #[arg(long, value_enum)]
    pub format: Option<OutFormat>,
    // fetch only: the download log and the cache root given to the workers.
    #[command(flatten)]
    pub log: crate::hub::cache::LogArg,
    #[command(flatten)]
    pub cache: crate::hub::cache::CacheArg,
    /// pack / mcq only: replace dlm-data's own files in OUT (index.json, shards, prompts.jsonl)
    /// that no earlier merge's journal lists, instead of refusing; never `parts/`, never any
    /// other file.
    #[arg(long)]
    pub force: bool,
}

/// The counts of a distill merge.
#[derive(serde::Serialize)]
struct DistillCounts {
    parts: usize,
    records: usize,
    batches: usize,
    sha256: String,
}

pub fn run(args: MergeArgs) -> Result<()> {
    if let crate::storage::Location::Object(url) =
        crate::storage::Location::of_path(&args.out, "merge OUT")?
    {
        if crate::distill::bucket::names_a_file(&url) {
            return run_distill_in_bucket(args, &url);
        }
        return run_in_bucket(args, &url);
    }
    let out = &args.out;
    crate::lock::require_utf8("merge OUT", out)?;
    // One writer: OUT, and every worker part read (a worker still running holds its part).
    let _locks = take_locks(out, args.log.file.as_deref(), args.cache.dir.as_deref())?;
    let summary = if out.is_dir() {
        if !crate::worker::parts_root(out).is_dir() {
            return Err(crate::error::usage(format!(
                "{}: no parts/ directory: nothing to merge (pack workers write OUT/parts/IIIII-of-NNNNN/)",
                out.display()
            )));
        }
        let tuning = crate::tuning::Tuning::resolve(args.threads)?;
        merge_parts_dir(out, args.force, tuning.row_groups)?
    } else if output::parts_dir(out).is_dir() {
        merge_distill(out, args.format)?
    } else if out.extension().is_some_and(|e| e == "toml") && out.is_file() {
        join_fetch_logs(out, args.log.file.as_deref(), args.cache.dir.as_deref())?
    } else {
        return Err(crate::error::usage(format!(
            "{}: not a pack output with parts/, a distill output with {} beside it, or a manifest",
            out.display(),
            output::parts_dir(out).display()
        )));
    };
    if args.json {
        crate::cron::json_line(summary);
    }
    Ok(())
}

/// `OUT/parts/*`: mcq parts (each with a prompts.jsonl) or pack parts.
fn merge_parts_dir(
    out: &Path,
    force: bool,
    row_groups: crate::shards::parquet::RowGroups,
) -> Result<serde_json::Value> {
    let set = PartSet::open(out)?;
    match set.kind() {
        PartsKind::Mcq => crate::mcq::merge::merge_dir(out, &set, force, row_groups),
        PartsKind::Pack => crate::pack::merge::merge_dir(out, &set, force, row_groups),
    }
}

/// The locks a merge holds ([`crate::lock`]): pack — `OUT` and each `OUT/parts/*` worker
/// directory; distill — each worker part's lock in `OUT.parts/`; fetch — the log.
fn take_locks(
    out: &Path,
    log: Option<&Path>,
    cache: Option<&Path>,
) -> Result<Vec<crate::lock::OutputLock>> {
    use crate::lock::OutputLock;
    let mut locks = Vec::new();
    if out.is_dir() {
        let parts = crate::worker::parts_root(out);
        if !parts.is_dir() {
            return Ok(locks);
        }
        locks.push(OutputLock::dir(out, "merge")?);
        for name in crate::worker::part_dirs(&parts)? {
            locks.push(OutputLock::dir(&parts.join(name), "worker")?);
        }
    } else if output::parts_dir(out).is_dir() {
        locks.push(OutputLock::beside(out, "merge")?);
        for p in output::list_parts(&output::parts_dir(out))? {
            locks.push(OutputLock::file(
                &p.with_extension("lock"),
                "distill worker",
                out,
            )?);
        }
    } else if out.extension().is_some_and(|e| e == "toml") && out.is_file() {
        let log = crate::hub::cache::Cache::resolve(cache).log_path(log);
        locks.push(OutputLock::beside(&log, "merge")?);
    }
    Ok(locks)
}

fn merge_distill(out: &Path, format: Option<OutFormat>) -> Result<serde_json::Value> {
    let dir = output::parts_dir(out);
    let parts = output::list_parts(&dir)?;
    let stems: Vec<String> = parts
        .iter()
        .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .collect();
    let workers = check_worker_set(&dir, &stems)?;
    let format = format.unwrap_or(if out.extension().is_some_and(|e| e == "jsonl") {
        OutFormat::Jsonl
    } else {
        OutFormat::Json
    });
    let f = output::finalize(&parts, out, format)?;
    crate::progress::note(&format!(
        "merge: {} records from {} parts → {}",
        f.records,
        f.parts,
        out.display()
    ));
    MergeSummary {
        kind: "distill",
        out: out.display().to_string(),
        workers,
        counts: DistillCounts {
            parts: f.parts,
            records: f.records,
            batches: f.batches,
            sha256: crate::util::sha256_file(out)?,
        },
    }
    .value()
}

/// fetch workers append to `<log>.part-0000I-of-0000N`; join them in worker order into the
/// log (appending, as one fetch run would have), then remove the parts. The lock is written by
/// the unsharded `fetch` afterwards (it verifies the cache and downloads nothing).
pub fn join_fetch_logs(
    manifest: &Path,
    log: Option<&Path>,
    cache: Option<&Path>,
) -> Result<serde_json::Value> {
    let log = crate::hub::cache::Cache::resolve(cache).log_path(log);
    let dir = log.parent().unwrap_or(Path::new(".")).to_path_buf();
    let prefix = format!(
        "{}.part-",
        log.file_name().context("log path")?.to_string_lossy()
    );
    let mut parts: Vec<(String, PathBuf)> = std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)
                .map(|s| (s.to_string(), e.path()))
        })
        .collect();
    parts.sort();
    let stems: Vec<String> = parts.iter().map(|(s, _)| s.clone()).collect();
    let workers = check_worker_set(&log, &stems)?;
    let mut joined = std::fs::read(&log).unwrap_or_default();
    let mut lines = 0usize;
    for (_, p) in &parts {
        let b = std::fs::read(p).with_context(|| format!("reading {}", p.display()))?;
        for (k, l) in b.split(|&c| c == b'\n').enumerate() {
            if l.is_empty() {
                continue;
            }
            serde_json::from_slice::<serde_json::Value>(l)
                .with_context(|| format!("{}:{}: not a JSON line", p.display(), k + 1))?;
            lines += 1;
        }
        if !joined.is_empty() && !joined.ends_with(b"\n") {
            joined.push(b'\n');
        }
        joined.extend_from_slice(&b);
    }
    crate::util::atomic_write(&log, &joined)?;
    for (_, p) in &parts {
        std::fs::remove_file(p).with_context(|| format!("removing {}", p.display()))?;
    }
    crate::progress::note(&format!(
        "merge: joined {lines} log lines from {workers} workers into {}; now run the unsharded `dlm-data fetch --manifest {}` to write the lock (it re-verifies the cache and downloads nothing)",
        log.display(),
        manifest.display()
    ));
    Ok(serde_json::json!({
        "kind": "fetch",
        "log": log.display().to_string(),
        "workers": workers,
        "lines": lines,
    }))
}

/// `merge s3://…/distilled.json`: the distill workers' parts copied from the bucket, merged on
/// the staging copy, the result committed (the sidecar first, the output last;
/// [`crate::distill::bucket::merge`]).
fn run_distill_in_bucket(args: MergeArgs, url: &crate::storage::ObjectUrl) -> Result<()> {
    let mut summary = crate::distill::bucket::merge(url, |local| {
        let _locks = take_locks(local, None, None)?;
        merge_distill(local, args.format)
    })?;
    summary["out"] = url.to_string().into();
    if args.json {
        crate::cron::json_line(summary);
    }
    Ok(())
}

/// `merge s3://OUT`: the workers' parts copied from the bucket into the staging directory, the
/// local merge run there, the result committed with `index.json` last
/// ([`crate::storage::output`]). The parts stay on the bucket.
fn run_in_bucket(args: MergeArgs, url: &crate::storage::ObjectUrl) -> Result<()> {
    let json = args.json;
    let whole = crate::worker::WorkerSlice::WHOLE;
    let c = crate::storage::output::run(url, whole, "merge", |staging| {
        let bucket = crate::storage::Bucket::open(url)?;
        let n = crate::storage::materialize::parts(&bucket, &staging)?;
        if n == 0 && !crate::shards::index::index_path(&staging).is_file() {
            return Err(crate::error::usage(format!(
                "{url}: no parts/ under it: nothing to merge (pack workers write OUT/parts/IIIII-of-NNNNN/)"
            )));
        }
        run(MergeArgs {
            out: staging,
            json: false,
            ..args
        })
    })?;
    if json {
        crate::cron::json_line(serde_json::json!({
            "out": c.url.to_string(),
            "format": c.index.format,
            "shards": c.index.shards.len(),
            "rows": c.index.totals.rows,
            "tokens": c.index.totals.tokens,
            "already_complete": c.already,
        }));
    }
    Ok(())
}
