//! Shard outputs (pack's pretraining rows, mcq's SFT rows) in any format, read shard by shard
//! through the index's [`crate::shards::ShardReader`]: counts checked against index.json,
//! the first rows decoded with their boundaries marked.

use std::path::Path;

use anyhow::{bail, Context, Result};

use super::settings::InspectSettings;
use super::show;
use super::stats::Stats;
use crate::mcq::sft::SftRow;
use crate::shards::index::{self, Index, Kind};
use crate::shards::{Column, RowBatch};

/// Inspect the shard directory `dir` (only shard `only` when given), appending the decoded
/// rows to `out`.
pub fn inspect(
    dir: &Path,
    only: Option<usize>,
    args: &InspectSettings,
    out: &mut String,
) -> Result<Stats> {
    let idx = index::load(dir)?;
    // A shard listed outside the directory is not part of this output: refused, as audit
    // refuses it, before anything is read.
    for (k, sh) in idx.shards.iter().enumerate() {
        let files =
            std::iter::once(sh.file.as_str()).chain(sh.extra_files.keys().map(String::as_str));
        for f in files {
            if let Err(why) = index::confined(f) {
                bail!(
                    "{} shards[{k}]: file {f:?} {why}: a shard path must be relative and inside \
                     the output directory; not inspected",
                    index::index_path(dir).display()
                );
            }
        }
    }
    if !idx.complete {
        tracing::warn!(
            "{}: incomplete output (an interrupted run): showing the {} shards journaled so far",
            index::index_path(dir).display(),
            idx.shards.len()
        );
    }
    let mut scan = Scan {
        tok: super::decoder(args.tokenizer.as_deref(), Some(&idx.tokenizer))?,
        args,
        only,
        shown: args.from..args.from.saturating_add(args.rows as u64),
        out,
        st: header(dir, only, &idx),
        segments: 0,
        boundaries: 0,
        prompt_tokens: 0,
    };
    let mut row0 = 0u64;
    for (k, sh) in idx.shards.iter().enumerate() {
        if only.is_none_or(|o| o == k) {
            // An incomplete output's shards wait in its staging directory.
            let d = crate::shards::staged::dir_of(dir, idx.complete, &sh.file);
            scan.shard(&d, &idx, k, row0)?;
        }
        row0 += sh.rows;
    }
    let Scan {
        mut st,
        segments,
        boundaries,
        prompt_tokens,
        ..
    } = scan;
    finish(&idx, only, &mut st, segments, boundaries, prompt_tokens);
    Ok(st)
}

/// The stats of the output (or of shard `only`) before any row is read.
fn header(dir: &Path, only: Option<usize>, idx: &Index) -> Stats {
    Stats {
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
    }
}

/// One pass over the shards: the counts so far, and the rows shown.
struct Scan<'a> {
    args: &'a InspectSettings,
    tok: Option<tokenizers::Tokenizer>,
    only: Option<usize>,
    /// The rows to show, by row number across the output.
    shown: std::ops::Range<u64>,
    out: &'a mut String,
    st: Stats,
    segments: u64,
    boundaries: u64,
    prompt_tokens: u64,
}

impl Scan<'_> {
    /// Shard `k`, whose first row is row `row0` of the output: read, its tokens checked
    /// against index.json, its rows counted and the shown ones decoded.
    fn shard(&mut self, dir: &Path, idx: &Index, k: usize, row0: u64) -> Result<()> {
        crate::signals::check()?;
        let sh = &idx.shards[k];
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
        self.st.shards += 1;
        self.st.rows += b.rows() as u64;
        self.st.tokens += b.tokens();
        match idx.kind {
            Kind::Pretrain => self.pretrain_rows(&b, &sh.file, row0),
            Kind::Sft => {
                let rows = crate::mcq::sft_shards::rows_of(&b, idx.format, &path)?;
                for (r, row) in rows.iter().enumerate() {
                    self.sft_row(row, &sh.file, (row0, r));
                }
            }
        }
        Ok(())
    }

    /// Pretraining rows: segments between the document offsets (when the format stores
    /// them), sources, and the shown rows piece by piece.
    fn pretrain_rows(&mut self, b: &RowBatch, file: &str, row0: u64) {
        let offs = match b.column("doc_offsets") {
            Some(Column::U32List(v)) => Some(v),
            _ => None,
        };
        let src = match b.column("source") {
            Some(Column::Str(v)) => Some(v),
            _ => None,
        };
        let only = self.only.is_some();
        for (r, ids) in b.input_ids.iter().enumerate() {
            let whole = [0, ids.len() as u32];
            let o: &[u32] = offs.map_or(&whole[..], |v| &v[r]);
            let source = src.map(|s| s[r].as_str());
            if let Some(s) = source {
                let c = self.st.source(s);
                c.rows += 1;
                if only {
                    c.tokens += ids.len() as u64;
                }
            }
            let mut row_segments = 0u64;
            for w in o.windows(2) {
                if w[1] > w[0] {
                    self.st.lengths.add((w[1] - w[0]) as u64);
                    row_segments += 1;
                }
            }
            self.segments += row_segments;
            self.boundaries += o
                .iter()
                .filter(|&&x| x > 0 && (x as usize) < ids.len())
                .count() as u64;
            if only {
                if let Some(s) = source {
                    self.st.source(s).documents += row_segments;
                }
            }
            let at = row0 + r as u64;
            if self.shown.contains(&at) {
                self.out.push_str(&format!(
                    "-- row {at}  {file}:{r}  source {}  {} tokens\n",
                    source.unwrap_or("(not stored in this format)"),
                    ids.len()
                ));
                self.show_pieces(ids, o);
            }
        }
    }

    /// A shown pretraining row, piece by piece between its offsets.
    fn show_pieces(&mut self, ids: &[u32], o: &[u32]) {
        for (j, w) in o.windows(2).enumerate() {
            let (a, z) = (w[0] as usize, w[1] as usize);
            if z <= a || z > ids.len() {
                continue;
            }
            // Every boundary after the row's first offset starts a
            // document (a worker part's doubled 0 marks one at the row start).
            let mark = if j > 0 { "▶ new document" } else { "  " };
            self.out.push_str(&format!(
                "  [{a}, {z}) {mark} {}\n",
                show(self.tok.as_ref(), &ids[a..z], self.args.chars)
            ));
        }
    }

    /// One SFT row (row `r` of a shard whose first row is `row0`): its source, its prompt
    /// tokens, and (shown) the prompt and the answer.
    fn sft_row(&mut self, row: &SftRow, file: &str, (row0, r): (u64, usize)) {
        let n = row.input_ids.len() as u64;
        let name = if row.prov.source.is_empty() {
            "(not stored)"
        } else {
            row.prov.source.as_str()
        };
        let c = self.st.source(name);
        c.rows += 1;
        c.tokens += n;
        c.documents += 1;
        self.st.lengths.add(n);
        self.prompt_tokens += row.prompt_len as u64;
        let at = row0 + r as u64;
        if !self.shown.contains(&at) {
            return;
        }
        let p = (row.prompt_len as usize).min(row.input_ids.len());
        self.out.push_str(&format!(
            "-- row {at}  {file}:{r}  {} ({} {} row {})  {n} tokens\n",
            row.id, row.prov.source, row.prov.file, row.prov.row,
        ));
        let (tok, chars) = (self.tok.as_ref(), self.args.chars);
        self.out.push_str(&format!(
            "  prompt [0, {p}) {}\n  answer [{p}, {n}) {}\n",
            show(tok, &row.input_ids[..p], chars),
            show(tok, &row.input_ids[p..], chars)
        ));
    }
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
