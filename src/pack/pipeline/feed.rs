//! Step 3b of a pack run, on the main thread: take the reader's batches in unit order, have
//! each screened and tokenized on the pool ([`super::chunked`]), feed the documents to the
//! [`Packer`] in document order and hand every finished shard to the writer with the cursor a
//! resumed run would start from. Source budgets (`--tokens`) and provenance ranges are kept
//! here.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use anyhow::{anyhow, Result};

use super::chunked::{self, Done, Screened};
use super::context::PackCtx;
use super::profile::Clock;
use super::progress::Progress;
use super::read::ReadMsg;
use super::write::{WriteMsg, WriterStopped};
use crate::pack::packer::Packer;
use crate::pack::resume::Cursor;
use crate::shards::index::{ProvenanceRange, Totals};
use crate::shards::RowBatch;
use crate::sources::Outcome;

/// A reader message in stream order, its batch's screening and tokenization under way.
enum Slot {
    Ready(ReadMsg),
    Rows {
        unit: usize,
        /// The batch back from the pool, with its screening and ids.
        done: Receiver<Done>,
        /// Bytes of the unit's file read by then ([`ReadMsg::Rows`]).
        at: u64,
    },
}

/// Tokenize and pack in document order; hand full shards to the writer. Each batch is cut
/// into chunks that are queued on the rayon pool first-in first-out as the reader hands the
/// batches on, up to [`crate::tuning::Tuning::batches_ahead`] batches ahead of the packer: the pool works
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
    let ahead = ctx.settings.tuning.batches_ahead;
    let chunk_bytes = ctx.settings.tuning.chunk_text_bytes;
    std::thread::scope(|scope| -> Result<()> {
        let (otx, orx) = sync_channel::<Slot>(ahead);
        // Dispatch: reader messages into stream order, batches' chunks onto the pool.
        std::thread::Builder::new()
            .name("pack-dispatch".into())
            .spawn_scoped(scope, move || {
                rayon::in_place_scope_fifo(|pool| {
                    for msg in rx {
                        let slot = match msg {
                            ReadMsg::Rows { unit, items, at } => Slot::Rows {
                                unit,
                                done: chunked::queue(pool, ctx, unit, items, chunk_bytes),
                                at,
                            },
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
                Slot::Rows { unit, done, at } => {
                    let (batch, enc) = done
                        .recv()
                        .map_err(|_| anyhow!("a tokenizing task stopped"))?;
                    clock.lap(|p| &p.wait_tokenize);
                    super::profile::mark(|p| &p.at_first_batch, true);
                    super::profile::mark(|p| &p.at_last_batch, false);
                    feed.rows(unit, &batch.items, enc, at)?;
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
            Packer::new(ctx.settings.seq_len, rows_per_shard).with_rows_closed(start.rows_emitted);
        if ctx.segment_mode {
            packer = packer.marking_row_start_docs();
        } else if ctx.settings.format == crate::shards::ShardFormat::Megatron {
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
        if self.ctx.settings.strict_mixture {
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

    /// A batch of rows of `unit`, screened and tokenized ([`chunked`]): pack.
    fn rows(
        &mut self,
        unit: usize,
        items: &[(u64, Outcome)],
        encoded: Result<Screened>,
        at: u64,
    ) -> Result<()> {
        let ctx = self.ctx;
        let u = &ctx.units[unit];
        let src = u.source.index;
        if ctx.exhausted[src].load(Ordering::Relaxed) {
            return Ok(());
        }
        let Screened { keep, docs } = encoded?;
        // The kept texts, in the order the screening handed them to the tokenizer.
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
                Outcome::Missing(_) => bump(&mut self.st.totals, "skipped_missing_text"),
                Outcome::Oversize(why) => {
                    // A row over --max-row-bytes, read past unheld (--on-oversize skip).
                    bump(&mut self.st.totals, "skipped_oversize");
                    tracing::warn!("{}: {why}: skipped (--on-oversize skip)", u.file);
                }
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
            .rows(unit, items.last().map_or(0, |i| i.0 + 1), at);
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
        if !ctx.segment_mode {
            // Before the last row goes out: index.json is never marked complete, and the
            // journal (every shard before) resumes cleanly.
            let mut t = self.st.totals.clone();
            t.mixture = self.mixture();
            // No document at all is never a result, `--strict` or not.
            super::super::strict::check_not_empty(&ctx.settings.inputs, &t, &self.st.provenance)?;
            if ctx.settings.strict {
                super::super::strict::check(&ctx.settings.inputs, &t, &self.st.provenance)?;
            }
        }
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

/// Add one to a counter of `totals.extra` (e.g. `skipped_oversize`).
fn bump(totals: &mut Totals, key: &str) {
    let v = totals
        .extra
        .entry(key.to_string())
        .or_insert(serde_json::json!(0));
    *v = serde_json::json!(v.as_u64().unwrap_or(0) + 1);
}
