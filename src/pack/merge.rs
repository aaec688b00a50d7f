//! Merge of `pack --shard I/N` worker parts (`OUT/parts/IIIII-of-NNNNN/`) into exactly the
//! bytes a single-process `pack` with the same arguments writes to `OUT` (the rule is in the
//! docs of [`super`]): per unit in global order, the owner's segment rows are split back into
//! documents (parts mark every document start in `doc_offsets`), re-packed with the same
//! [`Packer`], the tail dropped or padded, shuffled per shard and written in `--format`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

use super::packer::{shuffle_rows, Packer};
use super::ShardFormat;
use crate::shards::index::{self, Index, ProvenanceRange};
use crate::shards::outdir::{self, Claim};
use crate::shards::settings::PackSettings;
use crate::shards::RowBatch;
use crate::worker::{PartSet, PARTS_DIR};

/// One row of a part: ids and its `doc_offsets`.
type Row = (Vec<u32>, Vec<u32>);

/// A worker part, read shard by shard as the merge walks its rows in order.
struct PartRows {
    dir: PathBuf,
    idx: Index,
    /// (first row, shard number) of the shard loaded now, and its rows.
    loaded: Option<(u64, usize, Vec<Row>)>,
    next_prov: usize,
}

/// A part's shard as rows of (ids, `doc_offsets`), read through the index's reader.
fn read_rows(idx: &Index, dir: &Path, k: usize) -> Result<Vec<Row>> {
    let b = idx.read_shard(dir, k)?;
    let Some(crate::shards::Column::U32List(offs)) = b.column("doc_offsets") else {
        bail!(
            "{}: no doc_offsets column",
            dir.join(&idx.shards[k].file).display()
        );
    };
    let offs = offs.clone();
    Ok(b.input_ids.into_iter().zip(offs).collect())
}

impl PartRows {
    fn row(&mut self, r: u64) -> Result<&Row> {
        let hit = matches!(&self.loaded, Some((first, _, rows)) if r >= *first && r < first + rows.len() as u64);
        if !hit {
            let mut first = 0u64;
            let mut found = None;
            for (k, s) in self.idx.shards.iter().enumerate() {
                if r < first + s.rows {
                    found = Some((k, first));
                    break;
                }
                first += s.rows;
            }
            let (k, first) = found.ok_or_else(|| {
                anyhow!("{}: row {r} is past the part's shards", self.dir.display())
            })?;
            let rows = read_rows(&self.idx, &self.dir, k)?;
            self.loaded = Some((first, k, rows));
        }
        let (first, _, rows) = self.loaded.as_ref().unwrap();
        Ok(&rows[(r - first) as usize])
    }
}

/// Merge `out/parts/*` into `out`. Refuses missing or incomplete parts (by name) and parts of
/// different runs; journals each shard in an incomplete index, marks it complete last, then
/// removes `parts/`. `OUT` may hold only `parts/` and what an earlier merge's journal lists
/// (`force`: also dlm-data's own files); anything else is refused before a byte is written.
pub fn merge_dir(
    out: &Path,
    set: &PartSet,
    force: bool,
    row_groups: crate::shards::parquet::RowGroups,
) -> Result<Value> {
    let t0 = std::time::Instant::now();
    let workers = set.workers;
    let mut parts = open_parts(set)?;
    let run = Run::of(&parts)?;

    let mut claim = Claim::new("merge", force).keep([PARTS_DIR]);
    if let Some(old) = outdir::own_index(out) {
        claim = claim
            .remove(outdir::journal_files(&old))
            .remove(outdir::shard_files(old.format, old.shards.len()));
    }
    claim.apply(out)?;

    let mut packer = Packer::new(run.seq_len, run.args.rows_per_shard());
    if run.args.format == ShardFormat::Megatron {
        packer = packer.whole_docs();
    }
    let mut sink = Sink::new(out, &run, row_groups);
    let provenance = repack_units(&mut parts, &run.units, &mut packer, &mut sink)?;
    for p in &parts {
        if p.next_prov != p.idx.provenance.len() {
            bail!(
                "{}: provenance does not follow the unit list ({} of {} ranges used)",
                p.dir.display(),
                p.next_prov,
                p.idx.provenance.len()
            );
        }
    }
    let (last, dropped, padded) = packer.finish(run.pad);
    if let Some(b) = last {
        sink.write(b)?;
    }
    let totals = merged_totals(&run, &parts, &sink, dropped, padded);
    let Sink {
        mut merged, mds, ..
    } = sink;
    merged.totals = totals;
    merged.provenance = provenance;
    merged.complete = true;
    index::save(
        out,
        &merged,
        (run.args.format == ShardFormat::Mds).then_some(&mds[..]),
    )?;
    set.remove()?;
    let secs = t0.elapsed().as_secs_f64();
    crate::progress::note(&format!(
        "merge: {workers} pack parts → {} shards, {} rows, {} tokens in {} ({secs:.1} s)",
        merged.shards.len(),
        merged.totals.rows,
        merged.totals.tokens,
        out.display()
    ));
    crate::worker::MergeSummary {
        kind: "pack",
        out: out.display().to_string(),
        workers,
        counts: PackCounts {
            format: merged.format,
            shards: merged.shards.len(),
            rows: merged.totals.rows,
            tokens: merged.totals.tokens,
            documents: merged.totals.documents,
            seconds: (secs * 1000.0).round() / 1000.0,
        },
    }
    .value()
}

/// The counts of a pack merge (`merge --json`).
#[derive(serde::Serialize)]
struct PackCounts {
    format: ShardFormat,
    shards: usize,
    rows: u64,
    tokens: u64,
    documents: u64,
    seconds: f64,
}

/// Every part with its index; refused (nothing merged) naming each part without one or
/// interrupted.
fn open_parts(set: &PartSet) -> Result<Vec<PartRows>> {
    let mut parts = Vec::new();
    let mut incomplete = Vec::new();
    for (n, dir) in set.names.iter().zip(set.dirs()) {
        let idx = match index::load(&dir) {
            Ok(i) => i,
            Err(_) => {
                incomplete.push(format!("{n} (no index.json)"));
                continue;
            }
        };
        if !idx.complete {
            incomplete.push(format!("{n} (interrupted: rerun that task to resume)"));
        }
        parts.push(PartRows {
            dir,
            idx,
            loaded: None,
            next_prov: 0,
        });
    }
    set.refuse_incomplete("", &incomplete)?;
    Ok(parts)
}

/// The one run the parts are workers of, as one process would have recorded it.
struct Run {
    /// The pack arguments, worker aside (identical in every part).
    args: PackSettings,
    /// The first part's index: what is the same in every part.
    first: Index,
    seq_len: usize,
    /// `--pad-last`'s pad id.
    pad: Option<u32>,
    /// Every unit of the run in global order, with the worker that owns it.
    units: Vec<Value>,
}

impl Run {
    /// Refused unless every part records the same pack arguments except the worker.
    fn of(parts: &[PartRows]) -> Result<Run> {
        let identity = |p: &PartRows| -> Result<PackSettings> {
            match &p.idx.args {
                Some(a) => Ok(a.as_one_process()),
                None => Err(crate::error::refused(format!(
                    "{}: the part's index records no pack arguments; rerun that task",
                    p.dir.display()
                ))),
            }
        };
        let args = identity(&parts[0])?;
        for p in &parts[1..] {
            if identity(p)? != args {
                return Err(crate::error::refused(format!(
                    "{} and {} were written by different pack commands; remove the stale part",
                    parts[0].dir.display(),
                    p.dir.display()
                )));
            }
        }
        let first = parts[0].idx.clone();
        let seq_len = first.seq_len as usize;
        if !(1..=crate::sizes::MAX_TOKENS as usize).contains(&seq_len) {
            bail!(
                "{}: seq_len {} out of range (1 to {})",
                index::index_path(&parts[0].dir).display(),
                first.seq_len,
                crate::sizes::MAX_TOKENS
            );
        }
        let pad = if args.packing.pad_last {
            Some(first.extra.get("pad_id").and_then(Value::as_u64).context(
                "part index lacks pad_id (written by an older dlm-data); rerun the workers",
            )? as u32)
        } else {
            None
        };
        let units = first
            .extra
            .get("units")
            .and_then(Value::as_array)
            .cloned()
            .context("part index lacks its unit list")?;
        Ok(Run {
            args,
            first,
            seq_len,
            pad,
            units,
        })
    }
}

/// Where re-cut shards go: shuffled per shard, written in `--format`, each journaled in the
/// incomplete merged index as it lands.
struct Sink<'a> {
    out: &'a Path,
    /// `--format`, the parts' dtype and their `--zstd-level` (parquet output).
    codec: crate::shards::ShardCodec,
    /// How parquet row groups are encoded (`merge --threads`).
    row_groups: crate::shards::parquet::RowGroups,
    shuffle: Option<u64>,
    /// Shards written.
    n: usize,
    mds: Vec<Value>,
    rows: u64,
    tokens: u64,
    merged: Index,
}

impl<'a> Sink<'a> {
    /// The merged index starts as the first part's, emptied, with the one run's arguments
    /// and the tokenizer keys of its `extra`.
    fn new(out: &'a Path, run: &Run, row_groups: crate::shards::parquet::RowGroups) -> Sink<'a> {
        let first = &run.first;
        let mut merged = Index {
            shards: Vec::new(),
            complete: false,
            tool_build: Some(crate::build_info::ToolBuild::current()),
            ..first.clone()
        };
        merged.format = run.args.format;
        merged.args = Some(run.args.clone());
        merged.extra = BTreeMap::new();
        for k in [
            "eos_choice",
            "bos_token",
            "tokenizer_encoder",
            "tokenizer_crate_share",
        ] {
            if let Some(v) = first.extra.get(k) {
                merged.extra.insert(k.into(), v.clone());
            }
        }
        Sink {
            out,
            codec: crate::shards::ShardCodec {
                format: run.args.format,
                dtype: first.dtype,
                zstd_level: run.args.packing.zstd(),
            },
            row_groups,
            shuffle: run.args.packing.shuffle_seed,
            n: 0,
            mds: Vec::new(),
            rows: 0,
            tokens: 0,
            merged,
        }
    }

    fn write(&mut self, mut batch: RowBatch) -> Result<()> {
        let (out, n) = (self.out, self.n);
        if let Some(seed) = self.shuffle {
            shuffle_rows(&mut batch, seed, n);
        }
        self.rows += batch.rows() as u64;
        self.tokens += batch.tokens();
        let w = crate::shards::write_shard(self.codec, self.row_groups, out, n, &batch)
            .with_context(|| format!("writing shard {n} in {}", out.display()))?;
        self.n += 1;
        self.merged.shards.push(w.entry);
        if let Some(m) = w.mds {
            self.mds.push(m);
        }
        // The journal: a rerun after a crash may replace exactly these files.
        index::save(
            out,
            &self.merged,
            (self.codec.format == ShardFormat::Mds).then_some(&self.mds[..]),
        )
    }
}

/// Per unit in global order: the owner's rows of it split back into documents and re-packed;
/// the provenance ranges of the merged output.
fn repack_units(
    parts: &mut [PartRows],
    units: &[Value],
    packer: &mut Packer,
    sink: &mut Sink,
) -> Result<Vec<ProvenanceRange>> {
    let mut provenance: Vec<ProvenanceRange> = Vec::new();
    for u in units {
        crate::signals::check()?;
        let owner = u["owner"].as_u64().context("unit owner")? as usize;
        let file = u["file"].as_str().unwrap_or_default();
        let source: Arc<str> = Arc::from(u["source"].as_str().unwrap_or_default());
        let p = parts
            .get_mut(owner)
            .with_context(|| format!("unit {file} owned by missing worker {owner}"))?;
        let Some(prov) = p.idx.provenance.get(p.next_prov).cloned() else {
            continue; // the unit yielded nothing (no range was opened)
        };
        if prov.file != file || *prov.source != *source {
            continue;
        }
        p.next_prov += 1;
        let rows = prov.out_row_start.unwrap_or(0)..prov.out_row_end.unwrap_or(0);
        repack_rows(p, rows, &source, packer, sink)?;
        provenance.push(ProvenanceRange {
            out_row_start: None,
            out_row_end: None,
            ..prov
        });
    }
    Ok(provenance)
}

/// Rows `rows` of a part cut back into documents at their `doc_offsets` (a document may run
/// on into the next row), each pushed to the packer; full shards go to the sink.
fn repack_rows(
    p: &mut PartRows,
    rows: std::ops::Range<u64>,
    source: &Arc<str>,
    packer: &mut Packer,
    sink: &mut Sink,
) -> Result<()> {
    let mut doc: Vec<u32> = Vec::new();
    for r in rows {
        let (ids, offs) = p.row(r)?.clone();
        let inner = &offs[1..offs.len().saturating_sub(1)];
        let mut pos = 0usize;
        for &s in inner {
            let s = s as usize;
            doc.extend_from_slice(&ids[pos..s]);
            if !doc.is_empty() {
                for shard in packer.push_doc(&doc, source, 0) {
                    sink.write(shard.batch)?;
                }
            }
            doc.clear();
            pos = s;
        }
        doc.extend_from_slice(&ids[pos..]);
    }
    if !doc.is_empty() {
        for shard in packer.push_doc(&doc, source, 0) {
            sink.write(shard.batch)?;
        }
    }
    Ok(())
}

/// Totals: rows/tokens as re-cut, the rest summed over parts.
fn merged_totals(
    run: &Run,
    parts: &[PartRows],
    sink: &Sink,
    dropped: u64,
    padded: u64,
) -> index::Totals {
    let mut totals = run.first.totals.clone();
    totals.documents = 0;
    totals.skipped_empty = 0;
    totals.skipped_filtered = 0;
    totals.extra = BTreeMap::new();
    let mut by_source = serde_json::Map::new();
    for u in &run.units {
        by_source.insert(u["source"].as_str().unwrap_or_default().into(), 0.into());
    }
    for p in parts {
        let t = &p.idx.totals;
        totals.documents += t.documents;
        totals.skipped_empty += t.skipped_empty;
        totals.skipped_filtered += t.skipped_filtered;
        for (k, v) in &t.extra {
            if k == "tokens_by_source" {
                for (s, x) in v.as_object().into_iter().flatten() {
                    let e = by_source.entry(s.clone()).or_insert(0.into());
                    *e = (e.as_u64().unwrap_or(0) + x.as_u64().unwrap_or(0)).into();
                }
            } else if k == "added_token_text" {
                let mut c: crate::added_text::AddedTextCounts = totals
                    .extra
                    .get(k)
                    .and_then(|v| serde_json::from_value(v.clone()).ok())
                    .unwrap_or_default();
                if let Ok(o) = serde_json::from_value(v.clone()) {
                    c.merge(&o);
                }
                if let Ok(v) = serde_json::to_value(&c) {
                    totals.extra.insert(k.clone(), v);
                }
            } else if k != "padded_tokens" {
                let e = totals.extra.entry(k.clone()).or_insert(0.into());
                *e = (e.as_u64().unwrap_or(0) + v.as_u64().unwrap_or(0)).into();
            }
        }
    }
    totals.rows = sink.rows;
    totals.tokens = sink.tokens;
    totals.dropped_tail_tokens = dropped;
    if padded > 0 {
        totals
            .extra
            .insert("padded_tokens".into(), serde_json::json!(padded));
    }
    totals
        .extra
        .insert("tokens_by_source".into(), Value::Object(by_source));
    totals
}
