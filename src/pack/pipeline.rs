//! The pack run: set-up (plan, tokenizer, resume), then three stages connected by bounded
//! channels — reader thread → tokenize+pack (main thread, rayon inside) → writer thread.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{anyhow, Context, Result};

use super::packer::{shuffle_rows, Packer};
use super::plan::{Plan, Unit};
use super::resume::{self, Cursor, Found};
use super::tokenize::{BoundaryFlags, DocTokenizer};
use super::{DtypeArg, Oversize, PackArgs, ShardFormat};
use crate::hub::cache::Cache;
use crate::shards::index::{self, Index, Kind, ProvenanceRange, TokenizerInfo, Totals};
use crate::shards::outdir::{self, Claim};
use crate::shards::{Dtype, RowBatch};
use crate::sources::{Outcome, Stop};
use crate::worker::WorkerSlice;

/// Text bytes per tokenization batch.
const BATCH_TEXT_BYTES: usize = 4 << 20;
const BATCH_MAX_ROWS: usize = 16_384;

enum ReadMsg {
    Rows {
        unit: usize,
        items: Vec<(u64, Outcome)>,
    },
    UnitStart {
        unit: usize,
        first_row: u64,
    },
    UnitEnd {
        unit: usize,
    },
    Failed(anyhow::Error),
}

enum WriteMsg {
    Shard {
        batch: RowBatch,
        cursor: Option<Cursor>,
    },
    Finish {
        totals: Totals,
        provenance: Vec<ProvenanceRange>,
    },
}

fn pad_id(tok: &DocTokenizer) -> Option<u32> {
    let dir = tok
        .json_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let cfg = std::fs::read_to_string(dir.join("tokenizer_config.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| {
            v.get("pad_token")
                .and_then(|p| p.as_str().map(str::to_string))
        });
    cfg.and_then(|t| tok.inner.token_to_id(&t))
        .or_else(|| tok.inner.token_to_id("<|pad|>"))
        .or_else(|| tok.eos.as_ref().map(|e| e.1))
}

pub fn run(args: PackArgs) -> Result<()> {
    let t0 = Instant::now();
    if args.seq_len == 0 {
        return Err(crate::error::usage("--seq-len must be at least 1"));
    }
    let worker = WorkerSlice::resolve(args.shard, args.num_shards)?;
    let streaming = if args.stream {
        Some(Arc::new(super::remote::Streaming::new(&args, worker)?))
    } else {
        None
    };
    if !worker.is_whole() && args.tokens.is_some() {
        return Err(crate::error::usage(
            "--tokens cannot be combined with --shard I/N: budgets depend on the tokens of files other workers own; apply the budget in one process",
        ));
    }
    let plan = match (&args.manifest, &args.input) {
        (Some(m), None) => match &streaming {
            Some(st) => Plan::from_manifest_stream(m, args.tokens, &|man| st.list(man))?,
            None => Plan::from_manifest(m, &Cache::resolve(args.cache.as_deref()), args.tokens)?,
        },
        (None, Some(i)) => Plan::from_input(i, &args.text_column, args.tokens)?,
        _ => {
            return Err(crate::error::usage(
                "give exactly one of --manifest or --input",
            ))
        }
    };
    let tok = DocTokenizer::load(
        &args.tokenizer,
        &BoundaryFlags {
            eos_token: args.eos_token.clone(),
            no_eos: args.no_eos,
            bos: args.bos,
            bos_token: args.bos_token.clone(),
            no_fast: args.no_fast_tokenizer,
        },
    )?;
    let eos_desc = match &tok.eos {
        Some((t, i)) => format!("{t:?} (id {i}, from {})", tok.eos_choice),
        None => "none".into(),
    };
    tracing::info!(
        "tokenizer {} (path: {}), EOS {eos_desc}",
        tok.json_path.display(),
        tok.path()
    );
    let dtype = match (args.format, args.dtype) {
        (ShardFormat::Parquet, DtypeArg::Uint16) => {
            return Err(crate::error::usage(
                "--dtype uint16: parquet shards are always list<uint32>",
            ))
        }
        (ShardFormat::Parquet, _) | (_, DtypeArg::Uint32) => Dtype::U32,
        (_, DtypeArg::Uint16) | (_, DtypeArg::Auto) if tok.vocab_size <= 1 << 16 => Dtype::U16,
        (_, DtypeArg::Uint16) => {
            return Err(crate::error::usage(format!(
                "--dtype uint16: the vocabulary has {} ids, more than uint16 holds",
                tok.vocab_size
            )))
        }
        (_, DtypeArg::Auto) => Dtype::U32,
    };
    // Worker parts are an intermediate: always parquet (exact ids and document boundaries),
    // whatever --format says; `merge` writes the requested format.
    let part_format = if worker.is_whole() {
        args.format
    } else {
        ShardFormat::Parquet
    };
    let out_dir = if worker.is_whole() {
        args.out.clone()
    } else {
        args.out.join("parts").join(worker.part_dir_name())
    };
    std::fs::create_dir_all(&out_dir).with_context(|| format!("creating {}", out_dir.display()))?;

    let units: Vec<Unit> = plan
        .units
        .iter()
        .enumerate()
        .filter(|(k, _)| worker.owns(*k))
        .map(|(_, u)| u.clone())
        .collect();
    let fingerprint = fingerprint(&args, &plan, &tok, dtype, worker);
    let (prior, cursor) = match resume::inspect(&out_dir, &fingerprint, args.force)? {
        Found::Complete(idx) => {
            eprintln!(
                "{}: already complete ({} shards, {} rows); nothing to do",
                out_dir.display(),
                idx.shards.len(),
                idx.totals.rows
            );
            if args.json {
                println!("{}", summary(&idx, &out_dir, 0.0, true));
            }
            return Ok(());
        }
        Found::Resume(idx, c) => {
            eprintln!(
                "{}: resuming after {} recorded shards (input unit {}, row {})",
                out_dir.display(),
                c.shards,
                c.unit,
                c.row
            );
            (Some(idx), c)
        }
        Found::Fresh => (
            None,
            Cursor {
                source_tokens: vec![0; plan.sources.len()],
                ..Default::default()
            },
        ),
    };
    // Delete or overwrite only what the journal proves this tool wrote; never an input.
    let mut claim = Claim::new("pack", args.force)
        .inputs(plan.units.iter().map(|u| u.path.as_path()))
        .inputs(std::iter::once(args.tokenizer.as_path()));
    if let Some(p) = &prior {
        claim = claim
            .keep(outdir::journal_files(p))
            .remove(outdir::shard_files(&p.format, p.shards.len()));
    }
    claim.apply(&out_dir)?;

    let base = Index {
        version: 1,
        tool: Index::tool_name(),
        kind: Kind::Pretrain,
        format: part_format.name().into(),
        seq_len: args.seq_len as u64,
        dtype: dtype.name().into(),
        tokenizer: TokenizerInfo {
            path: index::abs_path(&tok.json_path),
            sha256: tok.sha256.clone(),
            eos_token: tok.eos.as_ref().map(|e| e.0.clone()).unwrap_or_default(),
            eos_id: tok.eos.as_ref().map(|e| e.1).unwrap_or(u32::MAX),
            vocab_size: tok.vocab_size,
        },
        shards: prior.as_ref().map(|i| i.shards.clone()).unwrap_or_default(),
        totals: cursor.totals.clone(),
        provenance: cursor.provenance.clone(),
        manifest: plan.manifest.as_deref().map(index::abs_path),
        lock_sha256: plan.lock_sha256.clone(),
        complete: false,
        extra: {
            let mut m = std::collections::BTreeMap::new();
            m.insert("args".into(), fingerprint.clone());
            m.insert("eos_choice".into(), serde_json::json!(tok.eos_choice));
            // Which encoder the ids came from, and the share of documents that went through the
            // `tokenizers` crate instead of the exact fast path (per tokenizer: 0 or 1).
            m.insert("tokenizer_encoder".into(), serde_json::json!(tok.path()));
            m.insert(
                "tokenizer_crate_share".into(),
                serde_json::json!(if tok.is_fast() { 0.0 } else { 1.0 }),
            );
            m.insert(
                "bos_token".into(),
                serde_json::json!(tok.bos.as_ref().map(|b| &b.0)),
            );
            if !worker.is_whole() {
                m.insert(
                    "worker".into(),
                    serde_json::json!({"index": worker.index, "count": worker.count}),
                );
                let all: Vec<_> = plan
                    .units
                    .iter()
                    .enumerate()
                    .map(|(k, u)| serde_json::json!({"source": &*u.source.name, "file": u.file, "owner": k % worker.count}))
                    .collect();
                m.insert("units".into(), serde_json::json!(all));
                // What `merge` pads the final row with (`--pad-last`).
                m.insert(
                    "pad_id".into(),
                    serde_json::json!(if args.pad_last { pad_id(&tok) } else { None }),
                );
            }
            m.insert("resume".into(), serde_json::to_value(&cursor)?);
            m
        },
    };
    let prior_mds: Vec<serde_json::Value> = if part_format == ShardFormat::Mds && prior.is_some() {
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(index::index_path(&out_dir))?)?;
        raw.get("shards")
            .and_then(|s| s.as_array())
            .cloned()
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    index::save(
        &out_dir,
        &base,
        (part_format == ShardFormat::Mds).then_some(&prior_mds[..]),
    )?;

    let pad = if args.pad_last { pad_id(&tok) } else { None };
    if args.pad_last && pad.is_none() {
        return Err(crate::error::usage(
            "--pad-last: no pad token and no EOS to pad with",
        ));
    }
    let rows_per_shard = ((args.shard_bytes / (args.seq_len as u64 * 4)).max(1)) as usize;
    let shuffle = if worker.is_whole() {
        args.shuffle_seed
    } else {
        None
    };
    let exhausted: Arc<Vec<AtomicBool>> = Arc::new(
        plan.sources
            .iter()
            .map(|_| AtomicBool::new(false))
            .collect(),
    );

    let (rtx, rrx) = sync_channel::<ReadMsg>(3);
    let (wtx, wrx) = sync_channel::<WriteMsg>(1);
    let reader = {
        let units = units.clone();
        let exhausted = exhausted.clone();
        let (start_unit, start_row) = (cursor.unit, cursor.row);
        std::thread::Builder::new()
            .name("pack-reader".into())
            .spawn(move || {
                read_units(
                    &units,
                    start_unit,
                    start_row,
                    &exhausted,
                    streaming.as_deref(),
                    &rtx,
                )
            })?
    };
    let writer = {
        let dir = out_dir.clone();
        let format = part_format;
        let first_shard = cursor.shards;
        std::thread::Builder::new()
            .name("pack-writer".into())
            .spawn(move || {
                write_shards(
                    &dir,
                    format,
                    dtype,
                    shuffle,
                    base,
                    prior_mds,
                    first_shard,
                    wrx,
                )
            })?
    };

    let ctx = PackCtx {
        args: &args,
        tok: &tok,
        units: &units,
        exhausted: &exhausted,
        segment_mode: !worker.is_whole(),
        pad,
    };
    let result = pack_loop(&ctx, cursor, rows_per_shard, rrx, &wtx);
    drop(wtx);
    let wres = writer
        .join()
        .map_err(|_| anyhow!("writer thread panicked"))?;
    let _ = reader.join();
    let final_idx = match (result, wres) {
        // The writer failed first (a full disk...): its error names the file.
        (Err(e), Err(we)) if e.is::<WriterStopped>() => return Err(we),
        (Err(e), _) => return Err(e),
        (Ok(()), Err(e)) => return Err(e),
        (Ok(()), Ok(idx)) => idx,
    };
    let secs = t0.elapsed().as_secs_f64();
    let t = &final_idx.totals;
    eprintln!(
        "pack: {} rows, {} tokens, {} documents in {} shards under {} ({:.1} s, {:.2} Mtok/s); dropped tail {} tokens, skipped {} empty / {} filtered",
        t.rows,
        t.tokens,
        t.documents,
        final_idx.shards.len(),
        out_dir.display(),
        secs,
        t.tokens as f64 / secs.max(1e-9) / 1e6,
        t.dropped_tail_tokens,
        t.skipped_empty,
        t.skipped_filtered
    );
    if args.json {
        println!("{}", summary(&final_idx, &out_dir, secs, false));
    }
    Ok(())
}

fn summary(idx: &Index, dir: &Path, secs: f64, already: bool) -> String {
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
        "seconds": (secs * 1000.0).round() / 1000.0,
        "mtok_per_s": if secs > 0.0 { idx.totals.tokens as f64 / secs / 1e6 } else { 0.0 },
        "already_complete": already,
    })
    .to_string()
}

fn fingerprint(
    args: &PackArgs,
    plan: &Plan,
    tok: &DocTokenizer,
    dtype: Dtype,
    worker: WorkerSlice,
) -> serde_json::Value {
    serde_json::json!({
        "units": plan.units.iter().map(|u| serde_json::json!([&*u.source.name, u.file, u.bytes])).collect::<Vec<_>>(),
        "lock_sha256": plan.lock_sha256,
        "text_column": args.input.as_ref().map(|_| &args.text_column),
        "tokenizer_sha256": tok.sha256,
        "eos": tok.eos.as_ref().map(|e| e.1),
        "bos": tok.bos.as_ref().map(|b| b.1),
        "seq_len": args.seq_len,
        "format": args.format.name(),
        "dtype": dtype.name(),
        "shuffle_seed": args.shuffle_seed,
        "pad_last": args.pad_last,
        "tokens": args.tokens,
        "shard_bytes": args.shard_bytes,
        "max_doc_bytes": args.max_doc_bytes,
        "max_word_bytes": args.max_word_bytes,
        "on_oversize": format!("{:?}", args.on_oversize),
        "worker": [worker.index, worker.count],
    })
}

/// The reader thread: stream units from the cursor, batching rows.
fn read_units(
    units: &[Unit],
    start_unit: usize,
    start_row: u64,
    exhausted: &[AtomicBool],
    streaming: Option<&super::remote::Streaming>,
    tx: &SyncSender<ReadMsg>,
) {
    for (k, u) in units.iter().enumerate().skip(start_unit) {
        let first = if k == start_unit { start_row } else { 0 };
        if tx
            .send(ReadMsg::UnitStart {
                unit: k,
                first_row: first,
            })
            .is_err()
        {
            return;
        }
        let src = u.source.index;
        if !exhausted[src].load(Ordering::Relaxed) {
            let mut items: Vec<(u64, Outcome)> = Vec::new();
            let mut bytes = 0usize;
            let mut sink = |row: u64, o: Outcome| -> Result<()> {
                if let Outcome::Text(t) = &o {
                    bytes += t.len();
                }
                items.push((row, o));
                if bytes >= BATCH_TEXT_BYTES || items.len() >= BATCH_MAX_ROWS {
                    bytes = 0;
                    let batch = std::mem::take(&mut items);
                    if tx
                        .send(ReadMsg::Rows {
                            unit: k,
                            items: batch,
                        })
                        .is_err()
                        || exhausted[src].load(Ordering::Relaxed)
                    {
                        return Err(Stop.into());
                    }
                }
                Ok(())
            };
            let r = match (&u.remote, streaming) {
                (Some(spec), Some(st)) => st.read(u, spec, first, &mut sink),
                _ => crate::sources::read_rows(
                    &u.path,
                    &u.file,
                    u.source.format,
                    &u.source.tpl,
                    first,
                    &mut sink,
                ),
            };
            if let Err(e) = r {
                let _ = tx.send(ReadMsg::Failed(
                    e.context(format!("source {:?}", &*u.source.name)),
                ));
                return;
            }
            if !items.is_empty() && tx.send(ReadMsg::Rows { unit: k, items }).is_err() {
                return;
            }
        }
        if tx.send(ReadMsg::UnitEnd { unit: k }).is_err() {
            return;
        }
    }
}

struct PackCtx<'a> {
    args: &'a PackArgs,
    tok: &'a DocTokenizer,
    units: &'a [Unit],
    exhausted: &'a [AtomicBool],
    segment_mode: bool,
    pad: Option<u32>,
}

fn bump(totals: &mut Totals, key: &str) {
    let v = totals
        .extra
        .entry(key.to_string())
        .or_insert(serde_json::json!(0));
    *v = serde_json::json!(v.as_u64().unwrap_or(0) + 1);
}

/// Tokenize and pack in document order; hand full shards to the writer.
fn pack_loop(
    ctx: &PackCtx,
    start: Cursor,
    rows_per_shard: usize,
    rx: Receiver<ReadMsg>,
    wtx: &SyncSender<WriteMsg>,
) -> Result<()> {
    let mut packer =
        Packer::new(ctx.args.seq_len, rows_per_shard).with_rows_closed(start.rows_emitted);
    if ctx.segment_mode {
        packer = packer.marking_row_start_docs();
    }
    let resume_at = (start.unit, start.row, start.skip_tokens);
    let resuming = start.shards > 0 || start.unit > 0 || start.row > 0;
    let mut st = start;
    let mut rows_emitted = st.rows_emitted;
    let progress = Progress::new(ctx.units, st.unit);
    let send = |batch: RowBatch, cursor: Option<Cursor>| -> Result<()> {
        wtx.send(WriteMsg::Shard { batch, cursor })
            .map_err(|_| anyhow::Error::new(WriterStopped))
    };
    for msg in rx {
        match msg {
            ReadMsg::Failed(e) => return Err(e),
            ReadMsg::UnitStart { unit, first_row } => {
                let u = &ctx.units[unit];
                let reopen = resuming && unit == resume_at.0 && st.unit_open;
                if !reopen {
                    st.provenance.push(ProvenanceRange {
                        source: u.source.name.to_string(),
                        repo: u.source.repo.clone(),
                        commit: u.source.commit.clone(),
                        file: u.file.clone(),
                        split: u.source.split.clone(),
                        role: u.source.role.clone(),
                        row_start: first_row,
                        row_end: first_row,
                        documents: 0,
                        out_row_start: ctx.segment_mode.then_some(packer.rows_closed()),
                        out_row_end: None,
                    });
                }
                st.unit = unit;
                st.unit_open = true;
            }
            ReadMsg::UnitEnd { unit } => {
                if ctx.segment_mode {
                    for s in packer.end_segment() {
                        rows_emitted += s.batch.rows() as u64;
                        st.totals.rows += s.batch.rows() as u64;
                        st.totals.tokens += s.batch.tokens();
                        st.shards += 1;
                        st.unit = unit + 1;
                        st.row = 0;
                        st.skip_tokens = 0;
                        st.unit_open = false;
                        st.rows_emitted = rows_emitted;
                        let mut c = st.clone();
                        if let Some(p) = c.provenance.last_mut() {
                            p.out_row_end = Some(packer.rows_closed());
                        }
                        send(s.batch, Some(c))?;
                    }
                    if let Some(p) = st.provenance.last_mut() {
                        p.out_row_end = Some(packer.rows_closed());
                    }
                }
                st.unit_open = false;
                progress.unit_done(unit);
            }
            ReadMsg::Rows { unit, items } => {
                let u = &ctx.units[unit];
                let src = u.source.index;
                if ctx.exhausted[src].load(Ordering::Relaxed) {
                    continue;
                }
                // Oversize policy before any tokenization.
                let mut texts: Vec<&str> = Vec::new();
                let mut keep: Vec<bool> = Vec::with_capacity(items.len());
                for (row, o) in &items {
                    let too_big = match o {
                        Outcome::Text(t) => super::oversize::reason(
                            t,
                            ctx.args.max_doc_bytes,
                            ctx.args.max_word_bytes,
                        ),
                        _ => None,
                    };
                    match o {
                        Outcome::Text(_) if too_big.is_some() => {
                            if ctx.args.on_oversize == Oversize::Fail {
                                return Err(anyhow!(
                                    "{}: row {row}: {} (policy: fail; use --on-oversize skip to skip and count such documents)",
                                    u.file,
                                    too_big.unwrap_or_default()
                                ));
                            }
                            keep.push(false);
                        }
                        Outcome::Text(t) => {
                            texts.push(t);
                            keep.push(true);
                        }
                        _ => keep.push(false),
                    }
                }
                let encoded = ctx.tok.encode_docs(&texts).map_err(|e| {
                    anyhow!(
                        "{}: rows {}..: {e}",
                        u.file,
                        items.first().map_or(0, |i| i.0)
                    )
                })?;
                let mut enc = encoded.into_iter();
                let name = u.source.name.clone();
                for ((row, o), kept) in items.iter().zip(keep) {
                    let row = *row;
                    // A cursor's document has at least one token packed (skip > 0); a cursor with
                    // skip 0 (segment end) points at a document not started yet.
                    let is_resume_doc =
                        resuming && resume_at.2 > 0 && (unit, row) == (resume_at.0, resume_at.1);
                    match o {
                        Outcome::Empty => st.totals.skipped_empty += 1,
                        Outcome::Filtered => st.totals.skipped_filtered += 1,
                        Outcome::Text(_) if !kept => bump(&mut st.totals, "skipped_oversize"),
                        Outcome::Text(_) => {
                            let ids = enc.next().expect("one encoding per kept text");
                            let skip = if is_resume_doc {
                                resume_at.2 as usize
                            } else {
                                0
                            };
                            if !is_resume_doc {
                                if let Some(b) = u.source.budget {
                                    if st.source_tokens[src] >= b {
                                        ctx.exhausted[src].store(true, Ordering::Relaxed);
                                        break;
                                    }
                                }
                                st.totals.documents += 1;
                                st.source_tokens[src] += ids.len() as u64;
                                if let Some(p) = st.provenance.last_mut() {
                                    p.documents += 1;
                                }
                            }
                            if let Some(p) = st.provenance.last_mut() {
                                p.row_end = row + 1;
                            }
                            for s in packer.push_doc(&ids, &name, skip) {
                                rows_emitted += s.batch.rows() as u64;
                                st.totals.rows += s.batch.rows() as u64;
                                st.totals.tokens += s.batch.tokens();
                                st.shards += 1;
                                st.unit = unit;
                                st.row = row;
                                st.skip_tokens = s.doc_tokens_done as u64;
                                st.rows_emitted = rows_emitted;
                                send(s.batch, Some(st.clone()))?;
                            }
                            progress.tokens(ids.len().saturating_sub(skip) as u64);
                            continue;
                        }
                    }
                    if let Some(p) = st.provenance.last_mut() {
                        p.row_end = row + 1;
                    }
                }
                progress.rows(unit, items.last().map_or(0, |i| i.0 + 1));
            }
        }
    }
    progress.finish();
    let (last, dropped, padded) = packer.finish(if ctx.segment_mode { None } else { ctx.pad });
    if ctx.segment_mode {
        debug_assert_eq!(dropped, 0);
    }
    st.totals.dropped_tail_tokens += dropped;
    if padded > 0 {
        st.totals
            .extra
            .insert("padded_tokens".into(), serde_json::json!(padded));
    }
    if let Some(b) = last {
        st.totals.rows += b.rows() as u64;
        st.totals.tokens += b.tokens();
        send(b, None)?;
    }
    let mut by_source = serde_json::Map::new();
    for u in ctx.units {
        by_source.insert(
            u.source.name.to_string(),
            serde_json::json!(st.source_tokens[u.source.index]),
        );
    }
    st.totals.extra.insert(
        "tokens_by_source".into(),
        serde_json::Value::Object(by_source),
    );
    wtx.send(WriteMsg::Finish {
        totals: st.totals,
        provenance: st.provenance,
    })
    .map_err(|_| anyhow::Error::new(WriterStopped))?;
    Ok(())
}

/// The writer thread is gone (its own error, naming the file, is the one to report).
#[derive(Debug)]
struct WriterStopped;

impl std::fmt::Display for WriterStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard writer stopped")
    }
}
impl std::error::Error for WriterStopped {}

/// The writer thread: write each shard durably, then journal it in the index.
#[allow(clippy::too_many_arguments)]
fn write_shards(
    dir: &Path,
    format: ShardFormat,
    dtype: Dtype,
    shuffle: Option<u64>,
    mut idx: Index,
    mut mds: Vec<serde_json::Value>,
    mut n: usize,
    rx: Receiver<WriteMsg>,
) -> Result<Index> {
    let is_mds = format == ShardFormat::Mds;
    let throttle: Option<u64> = std::env::var("DLM_PACK_THROTTLE_MS")
        .ok()
        .and_then(|v| v.parse().ok());
    for msg in rx {
        match msg {
            WriteMsg::Shard { mut batch, cursor } => {
                if let Some(seed) = shuffle {
                    shuffle_rows(&mut batch, seed, n);
                }
                let w = crate::shards::write_shard(format, dir, n, &batch, dtype)
                    .with_context(|| format!("writing shard {n} in {}", dir.display()))?;
                n += 1;
                idx.shards.push(w.entry);
                if let Some(m) = w.mds {
                    mds.push(m);
                }
                if let Some(c) = cursor {
                    idx.totals = c.totals.clone();
                    idx.provenance = c.provenance.clone();
                    idx.extra.insert("resume".into(), serde_json::to_value(&c)?);
                    index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                    if let Some(ms) = throttle {
                        // Tests and demos: slow down so a kill lands mid-run.
                        std::thread::sleep(std::time::Duration::from_millis(ms));
                    }
                }
            }
            WriteMsg::Finish { totals, provenance } => {
                idx.totals = totals;
                idx.provenance = provenance;
                idx.extra.remove("resume");
                idx.complete = true;
                index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                return Ok(idx);
            }
        }
    }
    Err(anyhow!(
        "pack stopped before the end of the input; rerun the same command to resume"
    ))
}

/// Progress on a TTY: documents and tokens per second, input bytes, ETA by input bytes.
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    unit_bytes: Vec<u64>,
    done_before: u64,
    start: Instant,
    tokens: std::cell::Cell<u64>,
    docs: std::cell::Cell<u64>,
    rows_total: std::cell::RefCell<Vec<Option<u64>>>,
}

impl Progress {
    fn new(units: &[Unit], start_unit: usize) -> Progress {
        let unit_bytes: Vec<u64> = units.iter().map(|u| u.bytes).collect();
        let total: u64 = unit_bytes.iter().sum();
        let done_before: u64 = unit_bytes[..start_unit.min(units.len())].iter().sum();
        let bar = std::io::stderr().is_terminal().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} read, {msg}, ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_position(done_before);
            b
        });
        let rows_total = units
            .iter()
            .map(|u| {
                (u.source.format == crate::manifest::Format::Parquet && bar.is_some())
                    .then(|| {
                        crate::sources::parquet::row_counts(&u.path, &u.file)
                            .ok()
                            .map(|v| v.iter().sum())
                    })
                    .flatten()
            })
            .collect();
        Progress {
            bar,
            unit_bytes,
            done_before,
            start: Instant::now(),
            tokens: 0.into(),
            docs: 0.into(),
            rows_total: std::cell::RefCell::new(rows_total),
        }
    }
    fn tokens(&self, n: u64) {
        self.tokens.set(self.tokens.get() + n);
        self.docs.set(self.docs.get() + 1);
    }
    fn rows(&self, unit: usize, rows_done: u64) {
        let Some(b) = &self.bar else { return };
        let before: u64 = self.unit_bytes[..unit]
            .iter()
            .sum::<u64>()
            .max(self.done_before);
        let frac = match self.rows_total.borrow()[unit] {
            Some(t) if t > 0 => rows_done as f64 / t as f64,
            _ => 0.0,
        };
        b.set_position(before + (frac * self.unit_bytes[unit] as f64) as u64);
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        b.set_message(format!(
            "{:.0} docs/s, {:.2} Mtok/s",
            self.docs.get() as f64 / secs,
            self.tokens.get() as f64 / secs / 1e6
        ));
    }
    fn unit_done(&self, unit: usize) {
        if let Some(b) = &self.bar {
            b.set_position(self.unit_bytes[..=unit].iter().sum());
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// Where a run writes for this worker (exposed for tests and merge).
pub fn part_dir(out: &Path, worker: WorkerSlice) -> PathBuf {
    if worker.is_whole() {
        out.to_path_buf()
    } else {
        out.join("parts").join(worker.part_dir_name())
    }
}
