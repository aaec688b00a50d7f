//! Step 3 of a pack run, on the main thread: take the reader's batches in unit order, apply
//! the oversize policy, tokenize each batch (rayon inside), feed the documents to the
//! [`Packer`] in document order and hand every finished shard to the writer with the cursor a
//! resumed run would start from. Source budgets (`--tokens`) and provenance ranges are kept
//! here.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Result};

use super::profile::Clock;
use super::progress::Progress;
use super::read::ReadMsg;
use super::tuning;
use super::write::{WriteMsg, WriterStopped};
use crate::pack::packer::Packer;
use crate::pack::plan::Unit;
use crate::pack::resume::Cursor;
use crate::pack::tokenize::{DocTokenizer, Encoded};
use crate::pack::{Oversize, PackArgs};
use crate::shards::index::{ProvenanceRange, Totals};
use crate::shards::RowBatch;
use crate::sources::Outcome;

/// What the packing step reads but never changes.
pub(super) struct PackCtx<'a> {
    pub args: &'a PackArgs,
    pub tok: &'a DocTokenizer,
    pub units: &'a [Unit],
    /// Per source: its `--tokens` budget is spent (shared with the reader, which stops early).
    pub exhausted: &'a [AtomicBool],
    /// A worker: each unit is packed as its own segment (see the `pack` module doc).
    pub segment_mode: bool,
    /// Hand the writer each parquet shard's rows as they close (see [`WriteMsg::Rows`]).
    pub stream_rows: bool,
    /// `--pad-last`'s pad id.
    pub pad: Option<u32>,
    /// Every source of the plan (weights and `--tokens` budgets).
    pub sources: &'a [std::sync::Arc<crate::pack::plan::SourceInfo>],
}

/// A reader message in stream order, its batch's screening and tokenization under way.
enum Slot {
    Ready(ReadMsg),
    Rows {
        unit: usize,
        /// The batch back from the pool, with its screening and ids.
        done: Receiver<Done>,
    },
}

/// A batch screened and tokenized: per row whether it is kept, and each kept row's encoding
/// (an error is reported when the packer reaches that row).
struct Screened {
    keep: Vec<bool>,
    docs: Vec<Result<Encoded>>,
}

/// A batch's rows and what its chunks made of them.
type Done = (Arc<Batch>, Result<Screened>);

/// One batch on the pool: its rows, cut into chunks of about [`tuning::chunk_text_bytes`]
/// that are screened and tokenized as separate tasks; the last chunk to finish joins the
/// parts in row order and hands the batch to the packer.
struct Batch {
    items: Vec<(u64, Outcome)>,
    parts: Mutex<Vec<Option<Part>>>,
    left: AtomicUsize,
    done: Mutex<Option<SyncSender<Done>>>,
}

/// One chunk's result.
enum Part {
    /// The source's `--tokens` budget was spent before the chunk ran: the packer drops the
    /// whole batch unread, so the work is spared.
    Skipped,
    Done(Result<Screened>),
}

/// Row ranges of `items` holding about `target` text bytes each (a long document alone).
fn chunks(items: &[(u64, Outcome)], target: usize) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let (mut from, mut bytes) = (0, 0);
    for (i, (_, o)) in items.iter().enumerate() {
        if let Outcome::Text(t) = o {
            bytes += t.len();
        }
        if bytes >= target {
            out.push(from..i + 1);
            (from, bytes) = (i + 1, 0);
        }
    }
    if from < items.len() || out.is_empty() {
        out.push(from..items.len());
    }
    out
}

/// Screen and tokenize rows `range` of a batch of `unit` (one pool task), then, if it is the
/// batch's last chunk to finish, join the parts and send the batch on.
fn run_chunk(
    ctx: &PackCtx,
    unit: usize,
    batch: &Arc<Batch>,
    k: usize,
    range: std::ops::Range<usize>,
) {
    let u = &ctx.units[unit];
    let part = if ctx.exhausted[u.source.index].load(Ordering::Relaxed) {
        Part::Skipped
    } else {
        Part::Done(encode_rows(ctx, u, &batch.items[range]))
    };
    lock(&batch.parts)[k] = Some(part);
    if batch.left.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    let parts = std::mem::take(&mut *lock(&batch.parts));
    let joined = join_parts(parts.into_iter().map(|p| p.expect("every chunk finished")));
    if let Some(tx) = lock(&batch.done).take() {
        let _ = tx.send((batch.clone(), joined));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The chunks' parts in row order as one batch's result: the first error in row order, or an
/// empty result when any chunk was skipped (the packer drops such a batch unread).
fn join_parts(parts: impl Iterator<Item = Part>) -> Result<Screened> {
    let mut all = Screened {
        keep: Vec::new(),
        docs: Vec::new(),
    };
    let mut skipped = false;
    for p in parts {
        match p {
            Part::Skipped => skipped = true,
            Part::Done(r) => {
                let s = r?;
                all.keep.extend(s.keep);
                all.docs.extend(s.docs);
            }
        }
    }
    if skipped {
        all.keep.clear();
        all.docs.clear();
    }
    Ok(all)
}

/// Screen and tokenize rows of `u` on this thread.
fn encode_rows(ctx: &PackCtx, u: &Unit, items: &[(u64, Outcome)]) -> Result<Screened> {
    let (texts, keep) = screen(ctx.args, u, items)?;
    let profile = super::profile::enabled();
    let docs = texts
        .iter()
        .map(|t| {
            let mut c = Clock::start();
            let cpu = profile.then(super::profile::thread_cpu);
            let r = ctx.tok.encode_doc(t);
            if let Some(t0) = cpu {
                c.lap(|p| &p.tokenize_cpu);
                let used = super::profile::thread_cpu().saturating_sub(t0);
                super::profile::add(|p| &p.tokenize_thread_cpu, used);
            }
            r
        })
        .collect();
    Ok(Screened { keep, docs })
}

/// Tokenize and pack in document order; hand full shards to the writer. Each batch is cut
/// into chunks that are queued on the rayon pool first-in first-out as the reader hands the
/// batches on, up to [`tuning::batches_ahead`] batches ahead of the packer: the pool works
/// on the oldest batches first, and no thread waits for a batch's longest document while
/// later chunks are queued. The packer takes batches in stream order, so the output does not
/// depend on the thread count.
pub(super) fn pack_loop(
    ctx: &PackCtx,
    start: Cursor,
    rows_per_shard: usize,
    rx: Receiver<ReadMsg>,
    wtx: &SyncSender<WriteMsg>,
) -> Result<()> {
    let mut feed = Feed::new(ctx, start, rows_per_shard, wtx);
    let ahead = tuning::batches_ahead();
    let chunk_bytes = tuning::chunk_text_bytes();
    std::thread::scope(|scope| -> Result<()> {
        let (otx, orx) = sync_channel::<Slot>(ahead);
        // Dispatch: reader messages into stream order, batches' chunks onto the pool.
        std::thread::Builder::new()
            .name("pack-dispatch".into())
            .spawn_scoped(scope, move || {
                rayon::in_place_scope_fifo(|pool| {
                    for msg in rx {
                        let slot = match msg {
                            ReadMsg::Rows { unit, items } => {
                                let (dtx, drx) = sync_channel(1);
                                let ranges = chunks(&items, chunk_bytes);
                                let batch = Arc::new(Batch {
                                    parts: Mutex::new((0..ranges.len()).map(|_| None).collect()),
                                    left: AtomicUsize::new(ranges.len()),
                                    done: Mutex::new(Some(dtx)),
                                    items,
                                });
                                for (k, r) in ranges.into_iter().enumerate() {
                                    let b = batch.clone();
                                    pool.spawn_fifo(move |_| run_chunk(ctx, unit, &b, k, r));
                                }
                                Slot::Rows { unit, done: drx }
                            }
                            m => Slot::Ready(m),
                        };
                        if otx.send(slot).is_err() {
                            return;
                        }
                    }
                })
            })?;
        let mut clock = Clock::start();
        for slot in orx {
            clock.lap(|p| &p.wait_read);
            crate::signals::check()?;
            match slot {
                Slot::Ready(ReadMsg::Failed(e)) => return Err(e),
                Slot::Ready(ReadMsg::UnitStart { unit, first_row }) => {
                    feed.unit_start(unit, first_row)
                }
                Slot::Ready(ReadMsg::UnitEnd { unit }) => feed.unit_end(unit)?,
                Slot::Ready(ReadMsg::Rows { .. }) => unreachable!("batches are dispatched"),
                Slot::Rows { unit, done } => {
                    let (batch, enc) = done
                        .recv()
                        .map_err(|_| anyhow!("a tokenizing task stopped"))?;
                    clock.lap(|p| &p.wait_tokenize);
                    super::profile::mark(|p| &p.at_first_batch, true);
                    super::profile::mark(|p| &p.at_last_batch, false);
                    feed.rows(unit, &batch.items, enc)?;
                }
            }
            clock.lap(|p| &p.pack);
        }
        feed.finish()
    })
}

/// The packing state: the packer, the cursor (`st`, what a resumed run restores) and where
/// this run resumed from.
struct Feed<'a> {
    ctx: &'a PackCtx<'a>,
    packer: Packer,
    st: Cursor,
    /// (unit, row, tokens already packed) of the document the run resumed in.
    resume_at: (usize, u64, u64),
    resuming: bool,
    progress: Progress,
    wtx: &'a SyncSender<WriteMsg>,
    /// Send a shard's leading rows to the writer as they close (parquet, not shuffled, not a
    /// worker's segments), so encoding it overlaps tokenization.
    stream: bool,
    /// (rows, tokens) of the current shard already sent that way.
    streamed: (u64, u64),
    /// Per source: the last of its units in this run (where a budget shortfall is known).
    last_unit: Vec<Option<usize>>,
}

/// Whether to go on with a batch's documents after one.
enum Next {
    Go,
    /// The source's `--tokens` budget is spent: the rest of the batch is not taken.
    SourceExhausted,
}

impl<'a> Feed<'a> {
    fn new(
        ctx: &'a PackCtx<'a>,
        start: Cursor,
        rows_per_shard: usize,
        wtx: &'a SyncSender<WriteMsg>,
    ) -> Feed<'a> {
        let mut packer =
            Packer::new(ctx.args.seq_len, rows_per_shard).with_rows_closed(start.rows_emitted);
        if ctx.segment_mode {
            packer = packer.marking_row_start_docs();
        } else if ctx.args.format == crate::shards::ShardFormat::Megatron {
            packer = packer.whole_docs();
        }
        Feed {
            ctx,
            packer,
            resume_at: (start.unit, start.row, start.skip_tokens),
            resuming: start.shards > 0 || start.unit > 0 || start.row > 0,
            progress: Progress::new(ctx.units, start.unit),
            st: start,
            wtx,
            stream: ctx.stream_rows,
            streamed: (0, 0),
            last_unit: (0..ctx.sources.len())
                .map(|i| ctx.units.iter().rposition(|u| u.source.index == i))
                .collect(),
        }
    }

    fn send(&self, batch: RowBatch, cursor: Option<Cursor>) -> Result<()> {
        let mut c = Clock::start();
        let r = self
            .wtx
            .send(WriteMsg::Shard { batch, cursor })
            .map_err(|_| anyhow::Error::new(WriterStopped));
        c.lap(|p| &p.wait_write);
        r
    }

    /// Count a finished shard (with its rows streamed before) in the cursor.
    fn count_shard(&mut self, batch: &RowBatch) {
        let (rows, tokens) = std::mem::take(&mut self.streamed);
        self.st.rows_emitted += batch.rows() as u64 + rows;
        self.st.totals.rows += batch.rows() as u64 + rows;
        self.st.totals.tokens += batch.tokens() + tokens;
        self.st.shards += 1;
    }

    /// Hand the writer the current shard's closed rows, a chunk at a time.
    fn stream_rows(&mut self) -> Result<()> {
        if !self.stream {
            return Ok(());
        }
        while let Some(batch) = self.packer.take_chunk(crate::shards::parquet::CHUNK_ROWS) {
            self.streamed.0 += batch.rows() as u64;
            self.streamed.1 += batch.tokens();
            let mut c = Clock::start();
            self.wtx
                .send(WriteMsg::Rows { batch })
                .map_err(|_| anyhow::Error::new(WriterStopped))?;
            c.lap(|p| &p.wait_write);
        }
        Ok(())
    }

    /// A unit begins: open its provenance range (unless the resumed cursor has it open).
    fn unit_start(&mut self, unit: usize, first_row: u64) {
        let u = &self.ctx.units[unit];
        let reopen = self.resuming && unit == self.resume_at.0 && self.st.unit_open;
        if !reopen {
            self.st.provenance.push(ProvenanceRange {
                source: u.source.name.to_string(),
                repo: u.source.repo.clone(),
                commit: u.source.commit.clone(),
                file: u.file.clone(),
                split: u.source.split.clone(),
                role: u.source.role.clone(),
                row_start: first_row,
                row_end: first_row,
                documents: 0,
                out_row_start: self.ctx.segment_mode.then_some(self.packer.rows_closed()),
                out_row_end: None,
            });
        }
        self.st.unit = unit;
        self.st.unit_open = true;
    }

    /// A unit ends: a worker closes its segment (the short last row) and its output rows.
    fn unit_end(&mut self, unit: usize) -> Result<()> {
        if self.ctx.segment_mode {
            for s in self.packer.end_segment() {
                self.count_shard(&s.batch);
                let st = &mut self.st;
                st.unit = unit + 1;
                st.row = 0;
                st.skip_tokens = 0;
                st.unit_open = false;
                let mut c = st.clone();
                if let Some(p) = c.provenance.last_mut() {
                    p.out_row_end = Some(self.packer.rows_closed());
                }
                self.send(s.batch, Some(c))?;
            }
            if let Some(p) = self.st.provenance.last_mut() {
                p.out_row_end = Some(self.packer.rows_closed());
            }
        }
        self.st.unit_open = false;
        self.progress.unit_done(unit);
        self.check_share(unit)
    }

    /// After a source's last unit: a source that could not supply its `--tokens` budget is
    /// warned about now (the summary and index.json say it again), or with `--strict-mixture`
    /// ends the run here, before the other sources are packed (index.json stays incomplete).
    fn check_share(&self, unit: usize) -> Result<()> {
        let s = &self.ctx.units[unit].source;
        let Some(budget) = s.budget else {
            return Ok(());
        };
        let got = self.st.source_tokens[s.index];
        if self.last_unit[s.index] != Some(unit) || got >= budget {
            return Ok(());
        }
        let msg = format!(
            "source {:?} ran out of data: {got} tokens of its {budget}-token share of --tokens \
             ({:.1} % of it; weight {}{}); the mixture is not the one the weights ask for \
             (more data, a lower weight, or `epochs` in the manifest)",
            &*s.name,
            100.0 * got as f64 / budget.max(1) as f64,
            s.weight,
            if s.epochs > 1 {
                format!(", {} epochs", s.epochs)
            } else {
                String::new()
            }
        );
        if self.ctx.args.strict_mixture {
            return Err(anyhow!("--strict-mixture: {msg}"));
        }
        tracing::warn!("{msg}");
        Ok(())
    }

    /// The `--tokens` mixture: per source, requested against achieved (`None` without a
    /// budget).
    fn mixture(&self) -> Option<Vec<crate::shards::index::MixtureShare>> {
        let srcs = self.ctx.sources;
        srcs.first()?.budget?;
        let wsum: f64 = srcs.iter().map(|s| s.weight).sum();
        let total: u64 = srcs.iter().map(|s| self.st.source_tokens[s.index]).sum();
        Some(
            srcs.iter()
                .map(|s| {
                    let tokens = self.st.source_tokens[s.index];
                    let budget = s.budget.unwrap_or(0);
                    crate::shards::index::MixtureShare {
                        source: s.name.to_string(),
                        weight: s.weight,
                        epochs: s.epochs,
                        requested_share: if wsum > 0.0 { s.weight / wsum } else { 0.0 },
                        budget,
                        tokens,
                        achieved_share: if total > 0 {
                            tokens as f64 / total as f64
                        } else {
                            0.0
                        },
                        short: tokens < budget,
                    }
                })
                .collect(),
        )
    }

    /// A batch of rows of `unit`, screened and tokenized ([`run_chunk`]): pack.
    fn rows(
        &mut self,
        unit: usize,
        items: &[(u64, Outcome)],
        encoded: Result<Screened>,
    ) -> Result<()> {
        let ctx = self.ctx;
        let u = &ctx.units[unit];
        let src = u.source.index;
        if ctx.exhausted[src].load(Ordering::Relaxed) {
            return Ok(());
        }
        let Screened { keep, docs } = encoded?;
        // The kept texts, in the order `screen` handed them to the tokenizer.
        let texts = items.iter().zip(&keep).filter_map(|((_, o), k)| match o {
            Outcome::Text(t) if *k => Some(t.as_str()),
            _ => None,
        });
        let mut enc = docs.into_iter().zip(texts);
        for ((row, o), &kept) in items.iter().zip(&keep) {
            let row = *row;
            match o {
                Outcome::Empty => self.st.totals.skipped_empty += 1,
                Outcome::Filtered => self.st.totals.skipped_filtered += 1,
                Outcome::Text(_) if !kept => bump(&mut self.st.totals, "skipped_oversize"),
                Outcome::Text(_) => {
                    let (e, text) = enc.next().expect("one encoding per kept text");
                    let e = e.map_err(|e| anyhow!("{}: row {row}: {e:#}", u.file))?;
                    if !e.hits.is_empty() {
                        self.added_text(unit, row, text, &e.hits);
                    }
                    match self.document(unit, row, &e.ids)? {
                        Next::Go => continue,
                        Next::SourceExhausted => break,
                    }
                }
            }
            if let Some(p) = self.st.provenance.last_mut() {
                p.row_end = row + 1;
            }
        }
        self.progress
            .rows(unit, items.last().map_or(0, |i| i.0 + 1));
        Ok(())
    }

    /// A document holding added-token text: counted per source and token in
    /// `totals.added_token_text`, the first few named in the log.
    fn added_text(&mut self, unit: usize, row: u64, text: &str, hits: &[crate::added_text::Hit]) {
        use crate::added_text::{AddedTextCounts, EXAMPLES_LOGGED};
        // The document a resumed run starts inside was counted before its cursor was saved.
        if self.resuming
            && self.resume_at.2 > 0
            && (unit, row) == (self.resume_at.0, self.resume_at.1)
        {
            return;
        }
        let u = &self.ctx.units[unit];
        let tok = &self.ctx.tok;
        let key = "added_token_text";
        let mut c: AddedTextCounts = self
            .st
            .totals
            .extra
            .get(key)
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_else(|| AddedTextCounts::new(tok.mode));
        c.add(&u.source.name, hits, |i| tok.token_name(i));
        if c.documents <= EXAMPLES_LOGGED as u64 {
            let h = &hits[0];
            tracing::warn!(
                "{}: row {row}: byte offset {}: {:?} (added token {}) in the text, encoded as {} \
                 {}",
                u.file,
                h.offset,
                tok.token_name(h.id),
                h.id,
                match tok.mode {
                    crate::added_text::SpecialTokensInText::Split => "that token",
                    _ => "plain text",
                },
                crate::added_text::excerpt(text, h.offset)
            );
        }
        if let Ok(v) = serde_json::to_value(&c) {
            self.st.totals.extra.insert(key.into(), v);
        }
    }

    /// One tokenized document at `row` of `unit`: budget, provenance, then the packer.
    fn document(&mut self, unit: usize, row: u64, ids: &[u32]) -> Result<Next> {
        let ctx = self.ctx;
        let u = &ctx.units[unit];
        let src = u.source.index;
        // A cursor's document has at least one token packed (skip > 0); a cursor with
        // skip 0 (segment end) points at a document not started yet.
        let is_resume_doc = self.resuming
            && self.resume_at.2 > 0
            && (unit, row) == (self.resume_at.0, self.resume_at.1);
        let skip = if is_resume_doc {
            self.resume_at.2 as usize
        } else {
            0
        };
        let st = &mut self.st;
        if !is_resume_doc {
            if let Some(b) = u.source.budget {
                if st.source_tokens[src] >= b {
                    ctx.exhausted[src].store(true, Ordering::Relaxed);
                    return Ok(Next::SourceExhausted);
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
        for s in self.packer.push_doc(ids, &u.source.name, skip) {
            self.count_shard(&s.batch);
            let st = &mut self.st;
            st.unit = unit;
            st.row = row;
            st.skip_tokens = s.doc_tokens_done as u64;
            self.send(s.batch, Some(self.st.clone()))?;
        }
        self.stream_rows()?;
        self.progress.tokens(ids.len().saturating_sub(skip) as u64);
        Ok(Next::Go)
    }

    /// The input is done: the last (short, dropped or padded) row, the per-source token
    /// counts, and the writer's `Finish`.
    fn finish(mut self) -> Result<()> {
        let ctx = self.ctx;
        self.progress.finish();
        let pad = if ctx.segment_mode { None } else { ctx.pad };
        let (last, dropped, padded) = self.packer.finish(pad);
        if ctx.segment_mode {
            debug_assert_eq!(dropped, 0);
        }
        let st = &mut self.st;
        st.totals.dropped_tail_tokens += dropped;
        if padded > 0 {
            st.totals
                .extra
                .insert("padded_tokens".into(), serde_json::json!(padded));
        }
        if let Some(b) = last {
            let (rows, tokens) = std::mem::take(&mut self.streamed);
            st.totals.rows += b.rows() as u64 + rows;
            st.totals.tokens += b.tokens() + tokens;
            self.send(b, None)?;
        }
        let st = &mut self.st;
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
        if !ctx.segment_mode {
            self.st.totals.mixture = self.mixture();
        }
        self.wtx
            .send(WriteMsg::Finish {
                totals: self.st.totals,
                provenance: self.st.provenance,
            })
            .map_err(|_| anyhow::Error::new(WriterStopped))?;
        Ok(())
    }
}

/// The oversize policy, before any tokenization: the texts to encode, and per row whether it
/// is kept. `--on-oversize fail` stops at the first oversized document, naming file and row.
fn screen<'i>(
    args: &PackArgs,
    u: &Unit,
    items: &'i [(u64, Outcome)],
) -> Result<(Vec<&'i str>, Vec<bool>)> {
    let mut texts: Vec<&str> = Vec::new();
    let mut keep: Vec<bool> = Vec::with_capacity(items.len());
    for (row, o) in items {
        let too_big = match o {
            Outcome::Text(t) => {
                crate::pack::oversize::reason(t, args.max_doc_bytes, args.max_word_bytes)
            }
            _ => None,
        };
        match o {
            Outcome::Text(_) if too_big.is_some() => {
                if args.on_oversize == Oversize::Fail {
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
    Ok((texts, keep))
}

/// Add one to a counter of `totals.extra` (e.g. `skipped_oversize`).
fn bump(totals: &mut Totals, key: &str) {
    let v = totals
        .extra
        .entry(key.to_string())
        .or_insert(serde_json::json!(0));
    *v = serde_json::json!(v.as_u64().unwrap_or(0) + 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(sizes: &[usize]) -> Vec<(u64, Outcome)> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let o = if n == 0 {
                    Outcome::Empty
                } else {
                    Outcome::Text("x".repeat(n))
                };
                (i as u64, o)
            })
            .collect()
    }

    #[test]
    fn chunks_cover_every_row_in_order() {
        for sizes in [
            vec![],
            vec![5],
            vec![3, 0, 4, 10, 1, 1, 1, 0, 0],
            vec![100, 1, 1],
            vec![1, 1, 100],
        ] {
            let items = rows(&sizes);
            let cs = chunks(&items, 4);
            let mut next = 0;
            for (k, c) in cs.iter().enumerate() {
                assert_eq!(c.start, next, "{sizes:?}: {cs:?}");
                next = c.end;
                let bytes: usize = sizes[c.clone()].iter().sum();
                // Every chunk but the last reaches the target, and would not without its last row.
                if k + 1 < cs.len() {
                    assert!(
                        bytes >= 4 && bytes - sizes[c.end - 1] < 4,
                        "{sizes:?}: {cs:?}"
                    );
                }
            }
            assert_eq!(next, sizes.len(), "{sizes:?}: {cs:?}");
            assert!(!cs.is_empty());
        }
        // A long document is a chunk alone.
        assert_eq!(chunks(&rows(&[1, 1, 100]), 4), vec![0..3]);
        assert_eq!(chunks(&rows(&[100, 1, 1]), 4), vec![0..1, 1..3]);
    }

    fn part(keep: &[bool]) -> Part {
        Part::Done(Ok(Screened {
            keep: keep.to_vec(),
            docs: keep
                .iter()
                .filter(|k| **k)
                .map(|_| Err(anyhow!("doc")))
                .collect(),
        }))
    }

    #[test]
    fn parts_join_in_row_order() {
        let j = join_parts([part(&[true, false]), part(&[true]), part(&[])].into_iter()).unwrap();
        assert_eq!(j.keep, [true, false, true]);
        assert_eq!(j.docs.len(), 2);
        // The first error in row order is the batch's.
        let e = |m: &str| Part::Done(Err(anyhow!("{m}")));
        let r = join_parts([part(&[true]), e("first"), e("second")].into_iter());
        assert_eq!(r.err().unwrap().to_string(), "first");
        // A chunk skipped after the budget was spent: the packer gets nothing to read.
        let j = join_parts([part(&[true]), Part::Skipped].into_iter()).unwrap();
        assert!(j.keep.is_empty() && j.docs.is_empty());
    }
}
