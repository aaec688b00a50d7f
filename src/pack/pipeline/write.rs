//! The writer thread of a pack run: encodes finished shards (shuffled first when
//! `--shuffle-seed` says so) on encoder threads, several at once, then writes each durably and
//! journals it in `index.json` with the resume cursor, in shard order, so a killed run resumes
//! after the last shard recorded; the end marks the index complete.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use anyhow::{anyhow, Context, Result};

use super::profile::Clock;
use super::setup::settle_inputs;
use crate::pack::packer::shuffle_rows;
use crate::pack::resume::Cursor;
use crate::shards::index::{self, Index, ProvenanceRange, Totals};
use crate::shards::{parquet, Dtype, EncodedShard, RowBatch, ShardFormat, ShardWriter};
use crate::sources::files::PendingHashes;

/// What the packing thread hands the writer.
pub(super) enum WriteMsg {
    /// Leading rows of the shard being packed ([`crate::shards::parquet::CHUNK_ROWS`] of
    /// them), encoded now so the shard's encoding overlaps tokenization.
    Rows { batch: RowBatch },
    /// A finished shard (its rows not already sent as `Rows`).
    Shard {
        batch: RowBatch,
        cursor: Option<Cursor>,
    },
    Finish {
        totals: Totals,
        provenance: Vec<ProvenanceRange>,
    },
}

/// The writer thread is gone (its own error, naming the file, is the one to report).
#[derive(Debug)]
pub(super) struct WriterStopped;

impl std::fmt::Display for WriterStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard writer stopped")
    }
}
impl std::error::Error for WriterStopped {}

/// Shards encoded at once, each on its own thread: encoding and compression keep pace with
/// tokenization on many cores, while files are still written and journaled one at a time, in
/// order (so a crash leaves at most one shard past the journal, as resume expects).
fn encoders() -> usize {
    (rayon::current_num_threads() / 4).clamp(1, 8)
}

/// A shard being encoded on its own thread.
struct InFlight {
    cursor: Option<Cursor>,
    handle: JoinHandle<Result<EncodedShard>>,
}

/// The parquet shard being encoded from `Rows` messages, on its own thread.
struct OpenShard {
    tx: SyncSender<RowBatch>,
    handle: JoinHandle<Result<EncodedShard>>,
}

fn spawn_encoder<F>(n: usize, f: F) -> Result<JoinHandle<Result<EncodedShard>>>
where
    F: FnOnce() -> Result<EncodedShard> + Send + 'static,
{
    Ok(std::thread::Builder::new()
        .name(format!("pack-encode-{n}"))
        .spawn(f)?)
}

/// The writer thread: encode shards (several at once), write each durably in order, then
/// journal it in the index.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_shards(
    dir: &Path,
    format: ShardFormat,
    dtype: Dtype,
    shuffle: Option<u64>,
    mut idx: Index,
    mut mds: Vec<serde_json::Value>,
    mut n: usize,
    mut hashes: Option<PendingHashes>,
    rx: Receiver<WriteMsg>,
) -> Result<Index> {
    let is_mds = format == ShardFormat::Mds;
    let throttle: Option<u64> = std::env::var("DLM_PACK_THROTTLE_MS")
        .ok()
        .and_then(|v| v.parse().ok());
    let max_in_flight = encoders();
    let mut open: Option<OpenShard> = None;
    let mut in_flight: VecDeque<InFlight> = VecDeque::new();
    let mut first_pending = n;
    let writer: Arc<dyn ShardWriter> = Arc::from(format.writer(dtype));
    // Write and journal the oldest shard in flight.
    let mut commit = |f: InFlight,
                      idx: &mut Index,
                      mds: &mut Vec<serde_json::Value>,
                      hashes: &mut Option<PendingHashes>|
     -> Result<()> {
        let k = first_pending;
        first_pending += 1;
        let mut c = Clock::start();
        let enc = f
            .handle
            .join()
            .map_err(|_| anyhow!("shard encoder panicked"))?
            .with_context(|| format!("encoding shard {k} in {}", dir.display()))?;
        c.lap(|p| &p.write_wait);
        let w = enc
            .commit(dir)
            .with_context(|| format!("writing shard {k} in {}", dir.display()))?;
        idx.shards.push(w.entry);
        if let Some(m) = w.mds {
            mds.push(m);
        }
        if let Some(c) = f.cursor {
            idx.totals = c.totals.clone();
            idx.provenance = c.provenance.clone();
            idx.extra.insert("resume".into(), serde_json::to_value(&c)?);
            settle_inputs(hashes, idx)?;
            index::save(dir, idx, is_mds.then_some(&mds[..]))?;
            crate::signals::pause_point("pack-shard");
            if let Some(ms) = throttle {
                // Tests and demos: slow down so a kill lands mid-run.
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
        }
        c.lap(|p| &p.write_io);
        Ok(())
    };
    let mut clock = Clock::start();
    for msg in rx {
        clock.lap(|p| &p.write_wait);
        match msg {
            WriteMsg::Rows { batch } => {
                anyhow::ensure!(
                    format == ShardFormat::Parquet && shuffle.is_none(),
                    "streamed rows for a {format:?} shard (shuffled: {})",
                    shuffle.is_some()
                );
                let o = match &mut open {
                    Some(o) => o,
                    None => {
                        let (tx, brx) = sync_channel::<RowBatch>(16);
                        let k = n;
                        let handle = spawn_encoder(k, move || {
                            let mut s: Option<parquet::Streaming> = None;
                            for b in brx {
                                // Time encoding only, not waiting for rows.
                                let mut c = Clock::start();
                                let st = match &mut s {
                                    Some(st) => st,
                                    None => s.insert(parquet::Streaming::new(&b)?),
                                };
                                st.write(&b)?;
                                c.lap(|p| &p.encode_cpu);
                            }
                            let mut c = Clock::start();
                            let mut st =
                                s.ok_or_else(|| anyhow!("a streamed shard without rows"))?;
                            let drained = st.drain();
                            // The waits were for row groups encoding on the pool.
                            super::profile::add(|p| &p.encode_wait, st.waited());
                            super::profile::add(|p| &p.encode_pool, st.encoding());
                            let r = drained.and_then(|_| st.into_shard(k));
                            c.lap(|p| &p.encode_cpu);
                            r
                        })?;
                        open.insert(OpenShard { tx, handle })
                    }
                };
                if o.tx.send(batch).is_err() {
                    // The encoder stopped: its error is reported when the shard is joined.
                    let o = open.take().expect("open shard");
                    in_flight.push_back(InFlight {
                        cursor: None,
                        handle: o.handle,
                    });
                    let f = in_flight.pop_front().unwrap();
                    return Err(commit(f, &mut idx, &mut mds, &mut hashes)
                        .err()
                        .unwrap_or_else(|| anyhow!("shard encoder stopped")));
                }
            }
            WriteMsg::Shard { mut batch, cursor } => {
                // A safe point: stop before the next shard once a signal arrived.
                crate::signals::check()?;
                let handle = match open.take() {
                    Some(o) => {
                        let _ = o.tx.send(batch);
                        drop(o.tx);
                        o.handle
                    }
                    None => {
                        if let Some(seed) = shuffle {
                            shuffle_rows(&mut batch, seed, n);
                        }
                        let (w, k) = (writer.clone(), n);
                        spawn_encoder(k, move || {
                            let mut c = Clock::start();
                            let r = w.encode(k, &batch);
                            c.lap(|p| &p.encode_cpu);
                            r
                        })?
                    }
                };
                n += 1;
                in_flight.push_back(InFlight { cursor, handle });
            }
            WriteMsg::Finish { totals, provenance } => {
                while let Some(f) = in_flight.pop_front() {
                    commit(f, &mut idx, &mut mds, &mut hashes)?;
                }
                idx.totals = totals;
                idx.provenance = provenance;
                idx.extra.remove("resume");
                idx.complete = true;
                settle_inputs(&mut hashes, &mut idx)?;
                index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                return Ok(idx);
            }
        }
        // Journal what is done; wait only when too many shards are in flight.
        while in_flight.len() > max_in_flight
            || in_flight.front().is_some_and(|f| f.handle.is_finished())
        {
            commit(
                in_flight.pop_front().unwrap(),
                &mut idx,
                &mut mds,
                &mut hashes,
            )?;
        }
        clock = Clock::start();
    }
    Err(anyhow!(
        "pack stopped before the end of the input; rerun the same command to resume"
    ))
}
