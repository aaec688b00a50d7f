//! The pack run as a sequence of named steps, each in its own file:
//!
//! 1. [`setup`] — flags, worker slice, the plan of input units, tokenizer, dtype, the output
//!    directory;
//! 2. [`journal`] — `index.json`: fresh, resume at a cursor, or already complete; claim the
//!    directory; save the incomplete index;
//! 3. three stages connected by bounded channels: the reader thread ([`read`]) → batches
//!    screened and tokenized in chunks on the rayon pool ([`chunked`]) and packed in stream
//!    order on the main thread ([`feed`]) → the writer thread ([`write`]), which routes
//!    rows to shard encoders, and its committer, which writes and journals every shard; [`progress`] draws the bar;
//!    [`profile`] the `DLM_PACK_PROFILE` line; the queue and batch sizes and thread counts
//!    come decided in the settings ([`crate::tuning::Tuning`]);
//! 4. the summary (stderr, and one JSON line on stdout with `--json`).

mod chunked;
mod context;
mod feed;
mod journal;
mod profile;
mod progress;
mod read;
pub(in crate::pack) mod settings;
mod setup;
mod write;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{anyhow, Result};

use super::resume::Cursor;
use crate::shards::index::Index;
use crate::shards::ShardFormat;
use crate::worker::WorkerSlice;
use journal::{Journal, Opened};
use read::ReadMsg;
use setup::Setup;
use write::{WriteMsg, WriterStopped};

/// One pack run on a local `--out`, from its resolved settings; what its reads of bucket
/// objects used ([`object_reads`]).
pub(in crate::pack) fn run(rs: settings::RunSettings) -> Result<Vec<serde_json::Value>> {
    let t0 = Instant::now();
    profile::start(rs.tuning.profile);
    let mut s = setup::prepare(&rs)?;
    let Journal {
        cursor,
        base,
        prior_mds,
    } = match journal::open(&rs, &mut s)? {
        Opened::Complete(idx) => {
            // An output written before cards existed gains its card (an unchanged one is
            // left alone: write-if-changed).
            crate::shards::card::write(&s.out_dir, &idx)?;
            crate::progress::note(&format!(
                "{}: already complete ({} shards, {} rows); nothing to do",
                s.out_dir.display(),
                idx.shards.len(),
                idx.totals.rows
            ));
            if rs.json {
                crate::cron::json_line(summary(&idx, &s.out_dir, 0.0, true));
            }
            return Ok(Vec::new());
        }
        Opened::Run(j) => j,
    };

    let pad = rs.packing.pad_last.then(|| setup::pad_id(&s.tok)).flatten();
    if rs.packing.pad_last && pad.is_none() {
        return Err(crate::error::usage(
            "--pad-last: no pad token and no EOS to pad with",
        ));
    }
    let rows_per_shard = s.settings.rows_per_shard();
    let exhausted: Arc<Vec<AtomicBool>> = Arc::new(
        s.plan
            .sources
            .iter()
            .map(|_| AtomicBool::new(false))
            .collect(),
    );

    profile::mark(|p| &p.at_setup, true);
    let (rtx, rrx) = sync_channel::<ReadMsg>(3);
    // Parquet shards of a whole run, unshuffled, are encoded while they are packed: the
    // writer gets them a chunk of rows at a time (a queue of 16 chunks, ~8 MiB at seq-len
    // 2048); otherwise it gets whole shards, one queued at most.
    let stream_rows = s.part_format == ShardFormat::Parquet
        && s.worker.is_whole()
        && rs.packing.shuffle_seed.is_none();
    let (wtx, wrx) = sync_channel::<WriteMsg>(if stream_rows { 16 } else { 1 });
    let reader = spawn_reader(&mut s, &cursor, &rs, &exhausted, rtx)?;
    let writer = {
        let dir = s.out_dir.clone();
        let codec = crate::shards::ShardCodec {
            format: s.part_format,
            dtype: s.dtype,
            zstd_level: s.settings.packing.zstd(),
        };
        // Workers never shuffle: the merge does (see the `pack` module doc).
        let shuffle = if s.worker.is_whole() {
            rs.packing.shuffle_seed
        } else {
            None
        };
        let first_shard = cursor.shards;
        let hashes = s.hashes.take();
        let tuning = rs.tuning;
        std::thread::Builder::new()
            .name("pack-writer".into())
            .spawn(move || {
                write::write_shards(
                    &dir,
                    codec,
                    tuning,
                    shuffle,
                    base,
                    prior_mds,
                    first_shard,
                    hashes,
                    wrx,
                )
            })?
    };

    let ctx = context::PackCtx {
        settings: &rs,
        tok: &s.tok,
        units: &s.units,
        exhausted: &exhausted,
        segment_mode: !s.worker.is_whole(),
        stream_rows,
        pad,
        sources: &s.plan.sources,
    };
    let result = feed::pack_loop(&ctx, cursor, rows_per_shard, rrx, &wtx);
    profile::mark(|p| &p.at_packed, true);
    drop(wtx);
    let wres = writer
        .join()
        .map_err(|_| anyhow!("writer thread panicked"))?;
    profile::mark(|p| &p.at_written, true);
    let _ = reader.join();
    let final_idx = match (result, wres) {
        // The writer failed first (a full disk...): its error names the file.
        (Err(e), Err(we)) if e.is::<WriterStopped>() => return Err(we),
        (Err(e), _) => return Err(e),
        (Ok(()), Err(e)) => return Err(e),
        (Ok(()), Ok(idx)) => idx,
    };
    let secs = t0.elapsed().as_secs_f64();
    report(&rs, &final_idx, &s.out_dir, secs, &s.units);
    profile::report(
        t0.elapsed().as_secs_f64(),
        final_idx.totals.tokens,
        &rs.tuning,
    );
    Ok(object_reads(&s.units))
}

/// The reader thread, from the cursor's unit and row (it takes the `--stream` client).
fn spawn_reader(
    s: &mut Setup,
    cursor: &Cursor,
    rs: &settings::RunSettings,
    exhausted: &Arc<Vec<AtomicBool>>,
    tx: SyncSender<ReadMsg>,
) -> Result<JoinHandle<()>> {
    let units = s.units.clone();
    let exhausted = exhausted.clone();
    let streaming = s.streaming.take();
    let (start_unit, start_row) = (cursor.unit, cursor.row);
    let (bounds, tuning) = (rs.read_bounds, rs.tuning);
    Ok(std::thread::Builder::new()
        .name("pack-reader".into())
        .spawn(move || {
            read::read_units(
                &units,
                start_unit,
                start_row,
                bounds,
                tuning,
                &exhausted,
                streaming.as_deref(),
                &tx,
            )
        })?)
}

/// What this run's reads of bucket objects used, per object read (the `--json` summary's
/// `object_reads`: only the bytes ranged GETs fetched, not the sha256 pass).
fn object_reads(units: &[crate::pack::plan::Unit]) -> Vec<serde_json::Value> {
    let mut seen = std::collections::HashSet::new();
    units
        .iter()
        .filter_map(|u| match &u.remote {
            Some(crate::pack::plan::Remote::Object(o)) if seen.insert(o.url.clone()) => {
                Some(serde_json::json!({
                    "url": o.url,
                    "size": o.size,
                    "bytes_read": o.count.bytes(),
                    "requests": o.count.requests(),
                }))
            }
            _ => None,
        })
        .collect()
}

/// The end-of-run line on stderr, and the `--json` summary on stdout.
fn report(
    rs: &settings::RunSettings,
    idx: &Index,
    out_dir: &Path,
    secs: f64,
    units: &[crate::pack::plan::Unit],
) {
    let t = &idx.totals;
    crate::progress::note(&format!(
        "pack: {} rows, {} tokens, {} documents in {} shards under {} ({:.1} s, {:.2} Mtok/s); dropped tail {} tokens, skipped {} empty / {} filtered",
        t.rows,
        t.tokens,
        t.documents,
        idx.shards.len(),
        out_dir.display(),
        secs,
        t.tokens as f64 / secs.max(1e-9) / 1e6,
        t.dropped_tail_tokens,
        t.skipped_empty,
        t.skipped_filtered
    ));
    for m in idx.totals.mixture.iter().flatten().filter(|m| m.short) {
        tracing::warn!(
            "mixture: source {:?} supplied {} of its {} budgeted tokens: {:.1} % of the output against a requested {:.1} %",
            m.source,
            m.tokens,
            m.budget,
            100.0 * m.achieved_share,
            100.0 * m.requested_share
        );
    }
    if let Some(n) = idx.totals.extra.get("skipped_missing_text") {
        tracing::warn!("{n} rows had no text field and were skipped (--on-missing-text skip)");
    }
    if let Some(n) = idx.totals.extra.get("skipped_oversize") {
        tracing::warn!("{n} documents were oversized and skipped (--on-oversize skip)");
    }
    if rs.from_input {
        for (file, docs) in input_documents(idx) {
            if docs == 0 {
                tracing::warn!(
                    "--input {file}: contributed 0 documents (check --text-column / --text)"
                );
            } else {
                tracing::info!("--input {file}: {docs} documents");
            }
        }
    }
    if let Some(c) =
        idx.totals.extra.get("added_token_text").and_then(|v| {
            serde_json::from_value::<crate::added_text::AddedTextCounts>(v.clone()).ok()
        })
    {
        tracing::warn!("{}", c.summary("documents"));
    }
    if rs.json {
        crate::cron::json_line(with_reads(
            summary_value(idx, out_dir, secs, false),
            object_reads(units),
        ));
    }
}

/// Documents per input file, in the order the index's provenance first names them (index.json
/// holds them per range: `provenance[].documents`).
fn input_documents(idx: &Index) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = Vec::new();
    for p in &idx.provenance {
        match out.iter_mut().find(|(f, _)| *f == p.file) {
            Some((_, n)) => *n += p.documents,
            None => out.push((p.file.clone(), p.documents)),
        }
    }
    out
}

/// A summary with `object_reads` added when there were any (a local input's summary is
/// unchanged).
pub(super) fn with_reads(mut v: serde_json::Value, reads: Vec<serde_json::Value>) -> String {
    if !reads.is_empty() {
        v["object_reads"] = serde_json::Value::Array(reads);
    }
    v.to_string()
}

pub(super) fn summary(idx: &Index, dir: &Path, secs: f64, already: bool) -> String {
    summary_value(idx, dir, secs, already).to_string()
}

pub(super) fn summary_value(
    idx: &Index,
    dir: &Path,
    secs: f64,
    already: bool,
) -> serde_json::Value {
    serde_json::json!({
        "out": dir.display().to_string(),
        "format": idx.format,
        "shards": idx.shards.len(),
        "rows": idx.totals.rows,
        "tokens": idx.totals.tokens,
        "documents": idx.totals.documents,
        "dropped_tail_tokens": idx.totals.dropped_tail_tokens,
        "skipped_empty": idx.totals.skipped_empty,
        "skipped_filtered": idx.totals.skipped_filtered,
        "eos_token": idx.tokenizer.eos_token,
        "added_token_text": idx.totals.extra.get("added_token_text"),
        "skipped_missing_text": idx.totals.extra.get("skipped_missing_text"),
        "skipped_oversize": idx.totals.extra.get("skipped_oversize"),
        "inputs": input_documents(idx)
            .into_iter()
            .map(|(file, documents)| serde_json::json!({"file": file, "documents": documents}))
            .collect::<Vec<_>>(),
        "mixture": idx.totals.mixture,
        "seconds": (secs * 1000.0).round() / 1000.0,
        "mtok_per_s": if secs > 0.0 { idx.totals.tokens as f64 / secs / 1e6 } else { 0.0 },
        "already_complete": already,
    })
}

/// Where a run writes for this worker (exposed for tests and merge).
pub fn part_dir(out: &Path, worker: WorkerSlice) -> PathBuf {
    worker.out_dir(out)
}
