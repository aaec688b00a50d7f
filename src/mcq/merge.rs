//! Merge of `mcq --shard I/N` worker parts (`OUT/parts/IIIII-of-NNNNN/`) into exactly the
//! bytes one `mcq` process with the same arguments writes to `OUT`.
//!
//! Every worker reads all items and keeps item `k` when `k % N == I` ([`crate::worker`]), so
//! worker `I`'s `j`-th item is global item `j·N + I`: prompts.jsonl is the parts' records
//! interleaved in that order. The SFT rows (items over `--seq-len` are absent) follow their
//! items, matched by id, and are re-cut into shards of the run's `--rows-per-shard` (recorded
//! in each part's index.json) by the writer `mcq` itself uses ([`super::sft_write`]). Counts
//! of all items read (empty, oversize, blank options) are the same in every part; the
//! per-item ones (too long, added-token text, provenance documents) are summed.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use super::prompts::{self, PromptRecord};
use super::sft::SftRow;
use super::{sft_shards, sft_write, PART_ROWS_PER_SHARD};
use crate::shards::index::{self, Index, ProvenanceRange};
use crate::shards::outdir::Claim;
use crate::worker::{PartSet, PARTS_DIR};

/// The part's SFT index with what differs between workers of one run blanked, for comparing.
fn identity(idx: &Index) -> Index {
    let mut i = idx.clone();
    // Provenance, not a setting: workers of one run may be different builds.
    i.tool_build = None;
    i.shards.clear();
    i.totals = Default::default();
    i.complete = true;
    for p in &mut i.provenance {
        p.documents = 0;
    }
    if let Some(Value::Object(m)) = i.extra.get_mut("mcq") {
        m.remove("worker");
        m.remove("prompts_sha256");
    }
    i.totals.extra.clear();
    i
}

/// Merge the mcq parts `set` (one complete worker set under `out/parts/`) into `out`, then
/// remove `parts/`.
pub fn merge_dir(
    out: &Path,
    set: &PartSet,
    force: bool,
    row_groups: crate::shards::parquet::RowGroups,
) -> Result<Value> {
    let t0 = std::time::Instant::now();
    let workers = set.workers;
    let dirs = set.dirs();
    let parts = read_parts(set, &dirs)?;
    let (merged, owner) = interleave(&parts.recs, &dirs, workers)?;
    let total = merged.len();

    // Only this tool's files in OUT: parts/, and what an earlier mcq or merge wrote.
    let prompts_path = out.join("prompts.jsonl");
    let mut claim = Claim::new("merge", force).keep([PARTS_DIR, "sft"]);
    if prompts_path.is_file() && prompts::is_own_file(&prompts_path) {
        claim = claim.remove(["prompts.jsonl"]);
    }
    if super::card::is_card(&super::card::card_path(out)) {
        claim = claim.keep([crate::shards::card::CARD_FILE]);
    }
    claim.apply(out)?;
    let sft_dir = out.join("sft");
    if parts.sft {
        super::claim_sft(Claim::new("merge", force), &sft_dir, false).apply(&sft_dir)?;
    }
    crate::signals::check()?;
    prompts::write(&prompts_path, &merged)?;

    let mut counts = McqCounts {
        items: total,
        prompts_sha256: crate::util::sha256_file(&prompts_path)?,
        sft: None,
    };
    if parts.sft {
        check_one_run(&dirs, &parts.idxs)?;
        let rows_per_shard = rows_per_shard(&parts.idxs[0], &dirs[0])?;
        let rows = rows_in_order(&dirs, &merged, &owner)?;
        let sft = write_sft(
            &parts.idxs,
            rows,
            rows_per_shard,
            &sft_dir,
            &prompts_path,
            row_groups,
        )?;
        counts.sft = Some(sft);
    }
    let summary = crate::worker::MergeSummary {
        kind: "mcq",
        out: out.display().to_string(),
        workers,
        counts,
    };
    // The output's card, as a whole run writes it (the same bytes: a function of the records).
    super::card::write(out, &merged)?;
    set.remove()?;
    let secs = t0.elapsed().as_secs_f64();
    crate::progress::note(&format!(
        "merge: {workers} mcq parts → {total} items in {}{} ({secs:.1} s)",
        prompts_path.display(),
        if parts.sft {
            format!(", SFT shards in {}", sft_dir.display())
        } else {
            String::new()
        }
    ));
    summary.value()
}

/// The counts of an mcq merge (`merge --json`); `sft` when the workers wrote SFT shards.
#[derive(serde::Serialize)]
struct McqCounts {
    items: usize,
    prompts_sha256: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    sft: Option<SftCounts>,
}

/// The merged SFT shards.
#[derive(serde::Serialize)]
struct SftCounts {
    dir: String,
    rows: u64,
    tokens: u64,
    shards: usize,
}

/// What the parts hold: each one's prompts, and each one's complete SFT index when the
/// workers had --tokenizer (`sft`).
struct Parts {
    recs: Vec<Vec<PromptRecord>>,
    idxs: Vec<Index>,
    sft: bool,
}

/// Every part's prompts and SFT index; refused (nothing merged) naming every part that lacks
/// one or was interrupted.
fn read_parts(set: &PartSet, dirs: &[PathBuf]) -> Result<Parts> {
    let names = &set.names;
    let mut recs: Vec<Vec<PromptRecord>> = Vec::new();
    let mut missing = Vec::new();
    for (n, d) in names.iter().zip(dirs) {
        let p = d.join("prompts.jsonl");
        if !p.is_file() {
            missing.push(format!("{n} (no prompts.jsonl)"));
            continue;
        }
        recs.push(prompts::read(&p)?);
    }
    let sft = dirs
        .iter()
        .any(|d| index::index_path(&d.join("sft")).exists());
    let mut idxs: Vec<Index> = Vec::new();
    if sft {
        for (n, d) in names.iter().zip(dirs) {
            match index::load(&d.join("sft")) {
                Ok(i) if i.complete => idxs.push(i),
                Ok(_) => missing.push(format!("{n} (sft/ interrupted: rerun that task to resume)")),
                Err(_) => missing.push(format!("{n} (no sft/index.json)")),
            }
        }
    }
    set.refuse_incomplete("mcq ", &missing)?;
    Ok(Parts { recs, idxs, sft })
}

/// The parts' records in global item order (worker `I`'s `j`-th is item `j·N + I`), with the
/// worker each came from; refused when a part holds the wrong number of items for one run.
fn interleave(
    recs: &[Vec<PromptRecord>],
    dirs: &[PathBuf],
    workers: usize,
) -> Result<(Vec<PromptRecord>, Vec<usize>)> {
    // Worker I of N holds ceil((T - I) / N) items.
    let total: usize = recs.iter().map(Vec::len).sum();
    for (i, r) in recs.iter().enumerate() {
        let want = (total + workers - 1 - i) / workers;
        if r.len() != want {
            return Err(crate::error::refused(format!(
                "{}: {} items where worker {i} of {workers} of a {total}-item run holds {want}; the parts are not one run (remove the stale part and rerun it)",
                dirs[i].join("prompts.jsonl").display(),
                r.len()
            )));
        }
    }
    let mut merged: Vec<PromptRecord> = Vec::with_capacity(total);
    let mut owner: Vec<usize> = Vec::with_capacity(total);
    for k in 0..total {
        let (w, j) = (k % workers, k / workers);
        merged.push(recs[w][j].clone());
        owner.push(w);
    }
    Ok((merged, owner))
}

/// Refused unless every part's SFT index was written by one mcq command.
fn check_one_run(dirs: &[PathBuf], idxs: &[Index]) -> Result<()> {
    let id0 = identity(&idxs[0]);
    for (i, x) in idxs.iter().enumerate().skip(1) {
        if identity(x) != id0 {
            return Err(crate::error::refused(format!(
                "{} and {} were written by different mcq commands (tokenizer, template, seed, format, --seq-len or inputs differ); remove the stale part",
                dirs[0].join("sft").display(),
                dirs[i].join("sft").display()
            )));
        }
    }
    Ok(())
}

/// The SFT rows of every part in global item order (each part's rows follow its items,
/// matched by id).
fn rows_in_order(
    dirs: &[PathBuf],
    merged: &[PromptRecord],
    owner: &[usize],
) -> Result<Vec<SftRow>> {
    // The rows of each part, in the part's item order; then in global item order.
    let mut part_rows: Vec<std::vec::IntoIter<SftRow>> = Vec::new();
    for d in dirs {
        part_rows.push(sft_shards::read_dir(&d.join("sft"))?.into_iter());
    }
    let mut peeked: Vec<Option<SftRow>> = part_rows.iter_mut().map(|it| it.next()).collect();
    let mut rows: Vec<SftRow> = Vec::new();
    for (rec, &w) in merged.iter().zip(owner) {
        if peeked[w].as_ref().is_some_and(|r| r.id == rec.id) {
            rows.push(peeked[w].take().unwrap());
            peeked[w] = part_rows[w].next();
        }
    }
    for (w, p) in peeked.iter().enumerate() {
        if let Some(r) = p {
            bail!(
                "{}: SFT row {:?} follows no item of the part's prompts.jsonl in order; the part is damaged, rerun that task",
                dirs[w].join("sft").display(),
                r.id
            );
        }
    }
    Ok(rows)
}

/// The run's `--rows-per-shard`, as the first part recorded it.
fn rows_per_shard(first: &Index, dir0: &Path) -> Result<usize> {
    Ok(first
        .extra
        .get(PART_ROWS_PER_SHARD)
        .and_then(Value::as_u64)
        .with_context(|| {
            format!(
                "{}: the part records no rows_per_shard (written by an older dlm-data); rerun the workers",
                index::index_path(&dir0.join("sft")).display()
            )
        })? as usize)
}

/// Counts: those over all items read are the same in every part (the first's); too long,
/// added-token text and each file's provenance documents add up.
fn summed_counts(idxs: &[Index]) -> Result<(sft_write::Counts, Vec<ProvenanceRange>)> {
    let first = &idxs[0];
    let t0c = &first.totals;
    let extra_u64 = |t: &crate::shards::index::Totals, k: &str| {
        t.extra.get(k).and_then(Value::as_u64).unwrap_or(0)
    };
    let mut counts = sft_write::Counts {
        skipped_empty: t0c.skipped_empty,
        too_long: 0,
        skipped_oversize: extra_u64(t0c, "skipped_oversize"),
        kept_without_blank: extra_u64(t0c, "kept_without_blank_options"),
        added: Default::default(),
    };
    let mut provenance = first.provenance.clone();
    for p in &mut provenance {
        p.documents = 0;
    }
    for x in idxs {
        counts.too_long += x.totals.skipped_filtered;
        if let Some(v) = x.totals.extra.get("added_token_text") {
            let c: crate::added_text::AddedTextCounts =
                serde_json::from_value(v.clone()).context("a part's added_token_text counts")?;
            counts.added.merge(&c);
        }
        for (m, p) in provenance.iter_mut().zip(&x.provenance) {
            m.documents += p.documents;
        }
    }
    Ok((counts, provenance))
}

/// The merged SFT set, re-cut into the run's shards by the writer `mcq` uses, under the first
/// part's index made whole (worker `0/1`, the merged prompts' sha256); its summary.
fn write_sft(
    idxs: &[Index],
    rows: Vec<SftRow>,
    rows_per_shard: usize,
    sft_dir: &Path,
    prompts_path: &Path,
    row_groups: crate::shards::parquet::RowGroups,
) -> Result<SftCounts> {
    let first = &idxs[0];
    let (counts, provenance) = summed_counts(idxs)?;
    let mut index = Index {
        shards: Vec::new(),
        totals: Default::default(),
        provenance: Vec::new(),
        complete: false,
        tool_build: Some(crate::build_info::ToolBuild::current()),
        ..first.clone()
    };
    index.extra.remove(PART_ROWS_PER_SHARD);
    if let Some(Value::Object(m)) = index.extra.get_mut("mcq") {
        m.insert("worker".into(), "0/1".into());
        m.insert(
            "prompts_sha256".into(),
            crate::util::sha256_file(prompts_path)?.into(),
        );
    }
    std::fs::create_dir_all(sft_dir).with_context(|| format!("creating {}", sft_dir.display()))?;
    let kept: Vec<&SftRow> = rows.iter().collect();
    let mds = sft_write::write_shards(sft_dir, &mut index, &kept, rows_per_shard, row_groups)?;
    index.totals = sft_write::totals(&kept, &index, &counts)?;
    index.provenance = provenance;
    sft_write::save_complete(sft_dir, &mut index, &mds)?;
    Ok(SftCounts {
        dir: sft_dir.display().to_string(),
        rows: index.totals.rows,
        tokens: index.totals.tokens,
        shards: index.shards.len(),
    })
}
