//! Step 3b of a pack run, with [`super::feed`]: a batch's rows screened (the oversize policy) and
//! tokenized on the rayon pool, cut into chunks of about `DLM_PACK_CHUNK_KB` of text, each its own
//! task queued first-in first-out — the pool works on the oldest batches first, and no thread waits
//! on a batch's longest document while later chunks are queued (on 16 cores, 8 threads each blocked
//! per 4 MiB batch left the pool 41–44 % idle). The last chunk of a batch to finish joins the parts
//! in row order and hands the batch to the packer ([`super::feed`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use anyhow::{anyhow, Result};

use super::context::PackCtx;
use super::profile::Clock;
use super::settings::RunSettings;
use crate::pack::plan::Unit;
use crate::pack::MissingText;
use crate::pack::Oversize;
use crate::sources::Outcome;
use crate::tokenize::Encoded;

/// Queue the chunks of a batch of `unit` on `pool` (first-in first-out); the receiver gets
/// the batch back when its last chunk is done.
pub(super) fn queue<'s>(
    pool: &rayon::ScopeFifo<'s>,
    ctx: &'s PackCtx<'s>,
    unit: usize,
    items: Vec<(u64, Outcome)>,
    chunk_bytes: usize,
) -> Receiver<Done> {
    let (tx, rx) = sync_channel(1);
    let ranges = chunks(&items, chunk_bytes);
    let batch = Arc::new(Batch {
        parts: Mutex::new((0..ranges.len()).map(|_| None).collect()),
        left: AtomicUsize::new(ranges.len()),
        done: Mutex::new(Some(tx)),
        items,
    });
    for (k, r) in ranges.into_iter().enumerate() {
        let b = batch.clone();
        pool.spawn_fifo(move |_| run_chunk(ctx, unit, &b, k, r));
    }
    rx
}

/// A batch screened and tokenized: per row whether it is kept, and each kept row's encoding
/// (an error is reported when the packer reaches that row).
pub(super) struct Screened {
    pub keep: Vec<bool>,
    pub docs: Vec<Result<Encoded>>,
}

/// A batch's rows and what its chunks made of them.
pub(super) type Done = (Arc<Batch>, Result<Screened>);

/// One batch on the pool: its rows, cut into chunks of about `chunk_bytes`
/// that are screened and tokenized as separate tasks; the last chunk to finish joins the
/// parts in row order and hands the batch to the packer.
pub(super) struct Batch {
    pub items: Vec<(u64, Outcome)>,
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
    let (texts, keep) = screen(ctx.settings, u, items)?;
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

/// The oversize policy, before any tokenization: the texts to encode, and per row whether it
/// is kept. `--on-oversize fail` stops at the first oversized document, naming file and row.
fn screen<'i>(
    args: &RunSettings,
    u: &Unit,
    items: &'i [(u64, Outcome)],
) -> Result<(Vec<&'i str>, Vec<bool>)> {
    let mut texts: Vec<&str> = Vec::new();
    let mut keep: Vec<bool> = Vec::with_capacity(items.len());
    for (row, o) in items {
        let too_big = match o {
            Outcome::Text(t) => crate::pack::oversize::reason(
                t,
                args.packing.max_doc_bytes,
                args.packing.max_word_bytes,
            ),
            _ => None,
        };
        match o {
            Outcome::Text(_) if too_big.is_some() => {
                if args.packing.on_oversize == Oversize::Fail {
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
            Outcome::Missing(why) if args.on_missing_text == MissingText::Fail => {
                return Err(anyhow!(
                    "{}: row {row}: {why} (policy: fail; use --text-column/--text to name the \
                     field, or --on-missing-text skip to skip and count such rows)",
                    u.file
                ));
            }
            _ => keep.push(false),
        }
    }
    Ok((texts, keep))
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
