//! `dlm-data decontam`: an n-gram index over benchmark eval sets, scanned against shards or
//! prompts; every overlap reported, `--drop` writes a filtered copy.
//!
//! - [`ngram`]: normalisation and rolling word n-gram hashes;
//! - [`index`]: the compact open-addressing index of benchmark n-grams;
//! - [`reference`](mod@reference) + [`rows`]: benchmark sets from files or eval-reference manifests;
//! - [`targets`]: prompts.jsonl / shard directories decoded back into documents;
//! - [`scan`]: the parallel scan and word-for-word verification of hits;
//! - [`report`]: `decontam.json` (read by `audit`) and the human summary; [`drop`](mod@drop): the copy
//!   (parquet filtered in place, MDS and Megatron re-encoded by [`rewrite`]).

pub mod bucket_input;
pub mod drop;
pub mod index;
pub mod ngram;
pub mod reference;
pub mod report;
pub mod rewrite;
pub mod rows;
pub mod scan;
pub mod settings;
pub mod targets;
pub mod time;
pub mod uptodate;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct DecontamArgs {
    /// Benchmark eval sets: local parquet/jsonl files or manifests with role = "eval-reference".
    #[arg(long, required = true, num_args = 1..)]
    pub against: Vec<PathBuf>,
    /// A shard directory (index.json) to scan.
    #[arg(long, conflicts_with = "prompts", required_unless_present = "prompts")]
    pub shards: Option<PathBuf>,
    /// A prompts.jsonl to scan.
    #[arg(long)]
    pub prompts: Option<PathBuf>,
    /// Word n-gram size, 8 to 13.
    #[arg(long, default_value_t = 13)]
    pub ngram: usize,
    /// Write a copy without the contaminated documents (a file for --prompts, a directory
    /// for --shards), with its own report.
    #[arg(long)]
    pub drop: Option<PathBuf>,
    /// With --drop: replace dlm-data's own files there (index.json, shards, prompts.jsonl,
    /// decontam.json) that no journal accounts for, instead of refusing; never an input.
    #[arg(long, requires = "drop")]
    pub force: bool,
    /// Print the report as JSON on stdout.
    /// Set from the global `--json` by the CLI (not a flag of its own).
    #[arg(skip)]
    pub json: bool,
    #[command(flatten)]
    pub threads: crate::tuning::ThreadsArg,
    // The cache root holds `eval-reference/`.
    #[command(flatten)]
    pub cache: crate::hub::cache::CacheArg,
    /// Tokenizer to decode shards with, when the path in index.json is not reachable here.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Report file (default: DIR/decontam.json, or <stem>.decontam.json beside --prompts).
    #[arg(long)]
    pub report: Option<PathBuf>,
    #[command(flatten)]
    pub worker: crate::worker::WorkerArgs,
}

/// The run, step by step: flags, the `--drop` claim, the up-to-date check, the benchmark
/// index, the scan, the report (and the `--drop` copy with its own report).
pub fn run(args: DecontamArgs) -> Result<()> {
    let t0 = Instant::now();
    let mut st = settings::DecontamSettings::resolve(&args)?;
    // A bucket --shards/--prompts: scanned from a local copy, the report put back beside it.
    let report_back = bucket_input::localize(&mut st)?;
    run_resolved(st, t0)?;
    match report_back {
        Some(b) => b.send(),
        None => Ok(()),
    }
}

fn run_resolved(st: settings::DecontamSettings, t0: Instant) -> Result<()> {
    let Some(url) = st.drop_url.clone() else {
        return run_with(st, t0);
    };
    let is_shards = st.scanned.is_shards();
    let staged = |drop: PathBuf| settings::DecontamSettings {
        drop: Some(drop),
        ..st
    };
    if is_shards {
        // A shard directory: its shards as they are written, the report, index.json last.
        let shape = crate::storage::output::Shape {
            index_dir: Some(""),
            files: &[crate::shards::outdir::DECONTAM_REPORT],
        };
        let whole = crate::worker::WorkerSlice::WHOLE;
        crate::storage::output::run_shaped(&url, whole, "decontam --drop", shape, |dir| {
            run_with(staged(dir), t0)
        })?;
        return Ok(());
    }
    // A prompts file: its report beside it first, the file (the commit marker) last.
    let (_, name) = crate::storage::file_output::split(&url, "--drop")?;
    let lease = format!(".{name}.dlm-data.lease");
    let fo =
        crate::storage::file_output::FileOutput::open(&url, "--drop", &lease, "decontam --drop")?;
    let local = fo.local();
    let report = report::default_path(&local, false);
    let report_name = report
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ran = run_with(staged(local), t0).and_then(|()| fo.commit(&[report_name, name]));
    let ok = ran.is_ok();
    let finished = fo.finish(ok);
    ran?;
    finished
}

/// The run on local paths (a bucket `--drop` already replaced by its staging copy).
fn run_with(mut st: settings::DecontamSettings, t0: Instant) -> Result<()> {
    // --drop: before any work, no input as the output and one writer.
    let _lock = match &st.drop {
        Some(out) => Some(claim_drop(&st, out)?),
        None => None,
    };
    st.digest()?;
    if up_to_date(&st)? {
        return Ok(());
    }
    // One writer of the report (audit reads it): a second scan writing it exits 75.
    let _report_lock = crate::lock::OutputLock::beside(&st.report, "decontam")?;
    let (benches, items) = reference::load(&st.against, &st.cache)?;
    let idx = index::NgramIndex::build(st.ngram, items);
    tracing::info!(
        "index: {} n-grams from {} items ({} MB table)",
        idx.len(),
        idx.items.len(),
        idx.table_bytes() / 1_000_000
    );
    let target = match &st.scanned {
        settings::Scanned::Shards(d) => targets::load_shards(d, st.tokenizer.as_deref())?,
        settings::Scanned::Prompts(p) => targets::load_prompts(p)?,
    };
    let t_scan = Instant::now();
    let hits = scan::scan(&idx, &target.texts);
    let scan_seconds = t_scan.elapsed().as_secs_f64();
    let bad: HashSet<usize> = hits.iter().map(|h| h.doc).collect();
    let text_bytes: u64 = target.texts.iter().map(|t| t.len() as u64).sum();
    let mb_per_s = if scan_seconds > 0.0 {
        text_bytes as f64 / 1e6 / scan_seconds
    } else {
        0.0
    };
    let mut rep = report::DecontamReport {
        version: 1,
        tool: crate::shards::index::Index::tool_name(),
        time: time::now_rfc3339(),
        ngram: st.ngram,
        scanned: report::Scanned {
            kind: target.kind_name().into(),
            path: st.scanned_name(),
            sha256: target.sha256.clone(),
            documents: target.texts.len() as u64,
            bytes: text_bytes,
        },
        against: benches.clone(),
        index_ngrams: idx.len() as u64,
        index_items: idx.items.len() as u64,
        index_items_too_short: idx.too_short.len() as u64,
        hits: hit_records(&idx, &benches, &target, &hits),
        contaminated_documents: bad.len() as u64,
        dropped_copy: st.drop_shown(),
        filtered_from: None,
        seconds: 0.0,
        scan_seconds,
        mb_per_s,
        args: Some(st.recorded.clone()),
    };
    if let Some(out) = &st.drop {
        write_drop(&st, out, &target, &bad, &rep, t0)?;
    }
    rep.seconds = t0.elapsed().as_secs_f64();
    report::save(&st.report, &rep)?;
    print_report(&st, &rep, &st.report)
}

/// The recorded report still describes the scanned data with these settings: printed again,
/// nothing else done (`true`).
fn up_to_date(st: &settings::DecontamSettings) -> Result<bool> {
    let scanned = st.scanned.path();
    let shown = st.scanned_name();
    match uptodate::check(
        &st.report,
        scanned,
        &shown,
        st.scanned.is_shards(),
        &st.recorded,
    ) {
        Ok(rep) => {
            tracing::info!(
                "up to date: {} describes {} as it is now, with the same arguments; nothing to do",
                st.report.display(),
                scanned.display()
            );
            print_report(st, &rep, &st.report)?;
            Ok(true)
        }
        Err(why) => {
            tracing::debug!("{}: not up to date: {why}", st.report.display());
            Ok(false)
        }
    }
}

/// Every hit as the report records it: the benchmark row and file, the shared n-gram, and
/// where the document came from.
fn hit_records(
    idx: &index::NgramIndex,
    benches: &[reference::Benchmark],
    target: &targets::Target,
    hits: &[scan::Hit],
) -> Vec<report::HitRecord> {
    hits.iter()
        .map(|h| {
            let it = &idx.items[h.item as usize];
            let b = &benches[it.benchmark as usize];
            report::HitRecord {
                benchmark: b.benchmark.clone(),
                benchmark_file: b
                    .files
                    .get(it.file as usize)
                    .map(|f| f.path.clone())
                    .unwrap_or_default(),
                benchmark_row: it.row,
                ngram: ngram::words(&target.texts[h.doc][h.start..h.end]).join(" "),
                document: target.origins[h.doc].clone(),
            }
        })
        .collect()
}

/// `--drop OUT`: the copy without the contaminated documents, and the copy's own report (same
/// benchmarks, no hits, where it came from).
fn write_drop(
    st: &settings::DecontamSettings,
    out: &std::path::Path,
    target: &targets::Target,
    bad: &HashSet<usize>,
    rep: &report::DecontamReport,
    t0: Instant,
) -> Result<()> {
    let is_shards = st.scanned.is_shards();
    let d = drop::write(target, bad, out, st.force)?;
    let copy_sha = if is_shards {
        crate::util::sha256_file(&out.join("index.json"))?
    } else {
        crate::util::sha256_file(out)?
    };
    let mut copy = rep.clone();
    copy.scanned.path = st.drop_shown().unwrap_or_else(|| out.display().to_string());
    copy.scanned.sha256 = copy_sha;
    copy.scanned.documents -= d.documents;
    copy.scanned.bytes = copy
        .scanned
        .bytes
        .saturating_sub(bad.iter().map(|i| target.texts[*i].len() as u64).sum());
    copy.hits.clear();
    copy.contaminated_documents = 0;
    copy.dropped_copy = None;
    copy.filtered_from = Some(report::FilteredFrom {
        path: target.path.display().to_string(),
        sha256: target.sha256.clone(),
        dropped_documents: d.documents,
        dropped_rows: d.rows,
    });
    copy.seconds = t0.elapsed().as_secs_f64();
    report::save(&report::default_path(out, is_shards), &copy)
}

/// The report on stdout: one line of JSON with `--json`, else the human summary.
fn print_report(
    st: &settings::DecontamSettings,
    rep: &report::DecontamReport,
    rpath: &std::path::Path,
) -> Result<()> {
    if st.json {
        crate::cron::json_line(serde_json::to_string(rep)?);
    } else if !crate::progress::settings().quiet || rep.contaminated_documents > 0 {
        // --quiet: the report file is written; printed only when something overlapped.
        print!("{}", report::human(rep));
        println!("  report: {}", rpath.display());
    }
    Ok(())
}

/// `--drop OUT`: UTF-8 paths, never one of the inputs (the scanned shards or prompts, the
/// benchmark files, the tokenizer), then the exclusive lock (in the directory for --shards,
/// beside the file for --prompts).
fn claim_drop(
    st: &settings::DecontamSettings,
    out: &std::path::Path,
) -> Result<crate::lock::OutputLock> {
    let mut inputs: Vec<(&str, &std::path::Path)> = Vec::new();
    match &st.scanned {
        settings::Scanned::Shards(d) => inputs.push(("--shards", d)),
        settings::Scanned::Prompts(p) => inputs.push(("--prompts", p)),
    }
    if let Some(t) = &st.tokenizer {
        inputs.push(("--tokenizer", t));
    }
    for a in &st.against {
        inputs.push(("--against", a));
    }
    crate::lock::require_utf8_all(
        inputs
            .iter()
            .copied()
            .chain(std::iter::once(("--drop", out))),
    )?;
    crate::lock::refuse_inputs("--drop", out, &inputs)?;
    if st.scanned.is_shards() {
        crate::lock::OutputLock::dir(out, "decontam --drop")
    } else {
        crate::lock::OutputLock::beside(out, "decontam --drop")
    }
}
