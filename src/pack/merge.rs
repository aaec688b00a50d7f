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
pub fn merge_dir(out: &Path, force: bool) -> Result<Value> {
    let t0 = std::time::Instant::now();
    let parts_root = out.join("parts");
    let names = crate::worker::part_dirs(&parts_root)?;
    let workers = crate::worker::check_worker_set(&parts_root, &names)?;
    let mut parts = Vec::new();
    let mut incomplete = Vec::new();
    for n in &names {
        let dir = parts_root.join(n);
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
    if !incomplete.is_empty() {
        return Err(crate::error::refused(format!(
            "{}: incomplete worker parts: {}; nothing merged",
            parts_root.display(),
            incomplete.join(", ")
        )));
    }
    // One run: identical arguments except the worker.
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
    let format = args.format;
    let dtype = first.dtype;
    let seq_len = first.seq_len as usize;
    if !(1..=crate::sizes::MAX_TOKENS as usize).contains(&seq_len) {
        bail!(
            "{}: seq_len {} out of range (1 to {})",
            index::index_path(&parts[0].dir).display(),
            first.seq_len,
            crate::sizes::MAX_TOKENS
        );
    }
    let rows_per_shard = args.rows_per_shard();
    let shuffle = args.shuffle_seed;
    let pad =
        if args.pad_last {
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

    let mut claim = Claim::new("merge", force).keep(["parts"]);
    if let Some(old) = outdir::own_index(out) {
        claim = claim
            .remove(outdir::journal_files(&old))
            .remove(outdir::shard_files(old.format, old.shards.len()));
    }
    claim.apply(out)?;

    let mut packer = Packer::new(seq_len, rows_per_shard);
    if format == ShardFormat::Megatron {
        packer = packer.whole_docs();
    }
    let mut n = 0usize;
    let mut merged = Index {
        shards: Vec::new(),
        complete: false,
        ..first.clone()
    };
    merged.format = format;
    merged.args = Some(args.clone());
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
    let mut mds: Vec<Value> = Vec::new();
    let mut rows = 0u64;
    let mut tokens = 0u64;
    let mut write = |mut batch: RowBatch, merged: &mut Index| -> Result<()> {
        if let Some(seed) = shuffle {
            shuffle_rows(&mut batch, seed, n);
        }
        rows += batch.rows() as u64;
        tokens += batch.tokens();
        let w = crate::shards::write_shard(format, out, n, &batch, dtype)
            .with_context(|| format!("writing shard {n} in {}", out.display()))?;
        n += 1;
        merged.shards.push(w.entry);
        if let Some(m) = w.mds {
            mds.push(m);
        }
        // The journal: a rerun after a crash may replace exactly these files.
        index::save(
            out,
            merged,
            (format == ShardFormat::Mds).then_some(&mds[..]),
        )
    };
    let mut provenance: Vec<ProvenanceRange> = Vec::new();
    for u in &units {
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
        let (a, b) = (
            prov.out_row_start.unwrap_or(0),
            prov.out_row_end.unwrap_or(0),
        );
        let mut doc: Vec<u32> = Vec::new();
        for r in a..b {
            let (ids, offs) = p.row(r)?.clone();
            let inner = &offs[1..offs.len().saturating_sub(1)];
            let mut pos = 0usize;
            for &s in inner {
                let s = s as usize;
                doc.extend_from_slice(&ids[pos..s]);
                if !doc.is_empty() {
                    for shard in packer.push_doc(&doc, &source, 0) {
                        write(shard.batch, &mut merged)?;
                    }
                }
                doc.clear();
                pos = s;
            }
            doc.extend_from_slice(&ids[pos..]);
        }
        if !doc.is_empty() {
            for shard in packer.push_doc(&doc, &source, 0) {
                write(shard.batch, &mut merged)?;
            }
        }
        provenance.push(ProvenanceRange {
            out_row_start: None,
            out_row_end: None,
            ..prov
        });
    }
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
    let (last, dropped, padded) = packer.finish(pad);
    if let Some(b) = last {
        write(b, &mut merged)?;
    }
    // Totals: rows/tokens as re-cut, the rest summed over parts.
    let mut totals = first.totals.clone();
    totals.documents = 0;
    totals.skipped_empty = 0;
    totals.skipped_filtered = 0;
    totals.extra = BTreeMap::new();
    let mut by_source = serde_json::Map::new();
    for u in &units {
        by_source.insert(u["source"].as_str().unwrap_or_default().into(), 0.into());
    }
    for p in &parts {
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
    totals.rows = rows;
    totals.tokens = tokens;
    totals.dropped_tail_tokens = dropped;
    if padded > 0 {
        totals
            .extra
            .insert("padded_tokens".into(), serde_json::json!(padded));
    }
    totals
        .extra
        .insert("tokens_by_source".into(), Value::Object(by_source));
    merged.totals = totals;
    merged.provenance = provenance;
    merged.complete = true;
    index::save(
        out,
        &merged,
        (format == ShardFormat::Mds).then_some(&mds[..]),
    )?;
    std::fs::remove_dir_all(&parts_root)
        .with_context(|| format!("removing {}", parts_root.display()))?;
    let secs = t0.elapsed().as_secs_f64();
    crate::report::note(&format!(
        "merge: {workers} pack parts → {} shards, {} rows, {} tokens in {} ({secs:.1} s)",
        merged.shards.len(),
        merged.totals.rows,
        merged.totals.tokens,
        out.display()
    ));
    Ok(serde_json::json!({
        "kind": "pack",
        "out": out.display().to_string(),
        "workers": workers,
        "format": merged.format,
        "shards": merged.shards.len(),
        "rows": merged.totals.rows,
        "tokens": merged.totals.tokens,
        "documents": merged.totals.documents,
        "seconds": (secs * 1000.0).round() / 1000.0,
    }))
}
