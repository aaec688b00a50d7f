//! Shard outputs (pack's pretraining rows, mcq's SFT rows) in any format, read shard by shard
//! through the index's [`crate::shards::ShardReader`]: counts checked against index.json,
//! the first rows decoded with their boundaries marked.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::stats::Stats;
use super::{show, InspectArgs};
use crate::shards::index::{self, Index, Kind};
use crate::shards::Column;

/// Inspect the shard directory `dir` (only shard `only` when given), appending the decoded
/// rows to `out`.
pub fn inspect(
    dir: &Path,
    only: Option<usize>,
    args: &InspectArgs,
    out: &mut String,
) -> Result<Stats> {
    let idx = index::load(dir)?;
    if !idx.complete {
        tracing::warn!(
            "{}: incomplete output (an interrupted run): showing the {} shards journaled so far",
            index::index_path(dir).display(),
            idx.shards.len()
        );
    }
    let tok = super::decoder(args.tokenizer.as_deref(), Some(&idx.tokenizer))?;
    let mut st = Stats {
        path: match only {
            Some(k) => dir.join(&idx.shards[k].file).display().to_string(),
            None => dir.display().to_string(),
        },
        kind: match idx.kind {
            Kind::Pretrain => "pretrain",
            Kind::Sft => "sft",
        }
        .into(),
        format: Some(idx.format.name().into()),
        lengths_of: match idx.kind {
            Kind::Pretrain => "segment tokens (document pieces within rows)",
            Kind::Sft => "row tokens",
        }
        .into(),
        ..Default::default()
    };
    let (lo, hi) = (args.from, args.from.saturating_add(args.rows as u64));
    let mut row0 = 0u64;
    let mut segments = 0u64;
    let mut boundaries = 0u64;
    let mut prompt_tokens = 0u64;
    for (k, sh) in idx.shards.iter().enumerate() {
        if only.is_some_and(|o| o != k) {
            row0 += sh.rows;
            continue;
        }
        crate::signals::check()?;
        let path = dir.join(&sh.file);
        let b = idx
            .read_shard(dir, k)
            .with_context(|| format!("reading shard {}", path.display()))?;
        if b.tokens() != sh.tokens {
            bail!(
                "{}: {} tokens, index.json says {}",
                path.display(),
                b.tokens(),
                sh.tokens
            );
        }
        st.shards += 1;
        st.rows += b.rows() as u64;
        st.tokens += b.tokens();
        let shown = |r: usize| (lo..hi).contains(&(row0 + r as u64));
        match idx.kind {
            Kind::Pretrain => {
                let offs = match b.column("doc_offsets") {
                    Some(Column::U32List(v)) => Some(v),
                    _ => None,
                };
                let src = match b.column("source") {
                    Some(Column::Str(v)) => Some(v),
                    _ => None,
                };
                for (r, ids) in b.input_ids.iter().enumerate() {
                    let whole = [0, ids.len() as u32];
                    let o: &[u32] = offs.map_or(&whole[..], |v| &v[r]);
                    let source = src.map(|s| s[r].as_str());
                    if let Some(s) = source {
                        let c = st.source(s);
                        c.rows += 1;
                        if only.is_some() {
                            c.tokens += ids.len() as u64;
                        }
                    }
                    let mut row_segments = 0u64;
                    for w in o.windows(2) {
                        if w[1] > w[0] {
                            st.lengths.add((w[1] - w[0]) as u64);
                            row_segments += 1;
                        }
                    }
                    segments += row_segments;
                    boundaries += o
                        .iter()
                        .filter(|&&x| x > 0 && (x as usize) < ids.len())
                        .count() as u64;
                    if only.is_some() {
                        if let Some(s) = source {
                            st.source(s).documents += row_segments;
                        }
                    }
                    if shown(r) {
                        out.push_str(&format!(
                            "-- row {}  {}:{}  source {}  {} tokens\n",
                            row0 + r as u64,
                            sh.file,
                            r,
                            source.unwrap_or("(not stored in this format)"),
                            ids.len()
                        ));
                        for (j, w) in o.windows(2).enumerate() {
                            let (a, z) = (w[0] as usize, w[1] as usize);
                            if z <= a || z > ids.len() {
                                continue;
                            }
                            // Every boundary after the row's first offset starts a
                            // document (a worker part's doubled 0 marks one at the row start).
                            let mark = if j > 0 { "▶ new document" } else { "  " };
                            out.push_str(&format!(
                                "  [{a}, {z}) {mark} {}\n",
                                show(tok.as_ref(), &ids[a..z], args.chars)
                            ));
                        }
                    }
                }
            }
            Kind::Sft => {
                let rows = crate::mcq::sft_shards::rows_of(&b, idx.format, &path)?;
                for (r, row) in rows.iter().enumerate() {
                    let n = row.input_ids.len() as u64;
                    let name = if row.prov.source.is_empty() {
                        "(not stored)"
                    } else {
                        row.prov.source.as_str()
                    };
                    let c = st.source(name);
                    c.rows += 1;
                    c.tokens += n;
                    c.documents += 1;
                    st.lengths.add(n);
                    prompt_tokens += row.prompt_len as u64;
                    if shown(r) {
                        let p = (row.prompt_len as usize).min(row.input_ids.len());
                        out.push_str(&format!(
                            "-- row {}  {}:{}  {} ({} {} row {})  {} tokens\n",
                            row0 + r as u64,
                            sh.file,
                            r,
                            row.id,
                            row.prov.source,
                            row.prov.file,
                            row.prov.row,
                            n
                        ));
                        out.push_str(&format!(
                            "  prompt [0, {p}) {}\n  answer [{p}, {n}) {}\n",
                            show(tok.as_ref(), &row.input_ids[..p], args.chars),
                            show(tok.as_ref(), &row.input_ids[p..], args.chars)
                        ));
                    }
                }
            }
        }
        row0 += sh.rows;
    }
    finish(&idx, only, &mut st, segments, boundaries, prompt_tokens);
    Ok(st)
}

/// Totals that only index.json knows (documents, tokens per source) for a whole output; the
/// scan's own counts for one shard.
fn finish(
    idx: &Index,
    only: Option<usize>,
    st: &mut Stats,
    segments: u64,
    boundaries: u64,
    prompt_tokens: u64,
) {
    let e = &mut st.extra;
    e.insert("seq_len".into(), idx.seq_len.into());
    e.insert("dtype".into(), idx.dtype.name().into());
    e.insert("complete".into(), idx.complete.into());
    match idx.kind {
        Kind::Sft => {
            st.documents = st.rows;
            e.insert("prompt_tokens".into(), prompt_tokens.into());
            e.insert(
                "answer_tokens".into(),
                (st.tokens - prompt_tokens.min(st.tokens)).into(),
            );
        }
        Kind::Pretrain => {
            e.insert("segments".into(), segments.into());
            e.insert("document_boundaries_in_rows".into(), boundaries.into());
            if only.is_some() {
                // One shard: a document cut across rows counts once per row it touches.
                st.documents = segments;
                return;
            }
            st.documents = idx.totals.documents;
            e.insert(
                "dropped_tail_tokens".into(),
                idx.totals.dropped_tail_tokens.into(),
            );
            if let Some(by) = idx
                .totals
                .extra
                .get("tokens_by_source")
                .and_then(|v| v.as_object())
            {
                for (s, t) in by {
                    st.source(s).tokens = t.as_u64().unwrap_or(0);
                }
            }
            for p in &idx.provenance {
                st.source(&p.source).documents += p.documents;
            }
            if idx.format == crate::shards::ShardFormat::Megatron {
                // Megatron stores no per-row source; each of its rows is one document.
                for c in st.per_source.values_mut() {
                    c.rows = c.documents;
                }
            }
        }
    }
}
