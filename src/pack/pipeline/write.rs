//! The writer side of a pack run: the writer thread encodes finished shards (shuffled first
//! when `--shuffle-seed` says so) on encoder threads, several at once, and a committer thread
//! writes each durably and journals it in `index.json` with the resume cursor, in shard order,
//! so a killed run resumes after the last shard recorded; the end moves the shards out of the
//! staging dot-directory into place and marks the index complete.

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
use crate::shards::{
    parquet, staged, EncodedShard, RowBatch, ShardCodec, ShardFormat, ShardWriter,
};
use crate::sources::files::PendingHashes;
use crate::tuning::Tuning;

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

/// What the router hands the committer, in shard order.
enum Commit {
    Shard(InFlight),
    Finish {
        totals: Totals,
        provenance: Vec<ProvenanceRange>,
    },
}

/// The writer thread: route the packer's rows and shards to encoders (several shards at
/// once), while a committer thread writes each encoded shard durably, in order, and journals
/// it in the index. Writing and fsyncing a shard never holds up the rows of the next one: on
/// 16 threads the packer waited 38 % of a run on a writer busy with `write+journal`, which
/// with its own packing kept the main thread 81 % occupied, nearly a serial cap.
///
/// Shards encoded at once, each on its own thread: [`Tuning::encoders`] — encoding and
/// compression keep pace with tokenization on many cores, while files are still written and
/// journaled one at a time, in order (so a crash leaves at most one shard past the journal,
/// as resume expects).
#[allow(clippy::too_many_arguments)]
pub(super) fn write_shards(
    dir: &Path,
    codec: ShardCodec,
    tuning: Tuning,
    shuffle: Option<u64>,
    idx: Index,
    mds: Vec<serde_json::Value>,
    n: usize,
    hashes: Option<PendingHashes>,
    rx: Receiver<WriteMsg>,
) -> Result<Index> {
    // Shards in flight (encoding or encoded, not yet written) stay at most `encoders + 1`,
    // as before the committer: the one it waits on or writes, those queued here, and the
    // one the router waits to hand on.
    let (ctx, crx) = sync_channel::<Commit>(tuning.encoders - 1);
    let committer = {
        let dir = dir.to_path_buf();
        let is_mds = codec.format == ShardFormat::Mds;
        std::thread::Builder::new()
            .name("pack-commit".into())
            .spawn(move || {
                commit_shards(&dir, is_mds, idx, mds, n, hashes, tuning.throttle_ms, crx)
            })?
    };
    let routed = route(
        dir,
        codec,
        tuning.row_groups,
        shuffle,
        n,
        rx,
        ctx,
        &committer,
    );
    let committed = committer
        .join()
        .map_err(|_| anyhow!("shard committer panicked"))?;
    match (routed, committed) {
        // The committer failed first (a full disk...): its error names the file.
        (_, Err(e)) => Err(e),
        (Err(e), _) => Err(e),
        (Ok(()), Ok(Some(idx))) => Ok(idx),
        (Ok(()), Ok(None)) => Err(anyhow!("shard committer stopped")),
    }
}

/// Route the packer's messages: streamed rows to the open parquet shard's encoder, finished
/// shards to encoder threads, and each shard, in order, on to the committer.
#[allow(clippy::too_many_arguments)]
fn route(
    dir: &Path,
    codec: ShardCodec,
    row_groups: parquet::RowGroups,
    shuffle: Option<u64>,
    mut n: usize,
    rx: Receiver<WriteMsg>,
    ctx: SyncSender<Commit>,
    committer: &JoinHandle<Result<Option<Index>>>,
) -> Result<()> {
    let mut open: Option<OpenShard> = None;
    let writer: Arc<dyn ShardWriter> = Arc::from(codec.writer(row_groups));
    let (format, zstd_level) = (codec.format, codec.zstd_level);
    // The committer is gone: its own error, naming the file, is the one reported.
    let stopped = || anyhow::Error::new(WriterStopped);
    for msg in rx {
        match msg {
            WriteMsg::Rows { batch } => {
                // The committer ends early only on an error (or a signal): stop the packer
                // now, not at the shard's end.
                if committer.is_finished() {
                    return Err(stopped());
                }
                anyhow::ensure!(
                    format == ShardFormat::Parquet && shuffle.is_none(),
                    "streamed rows for a {format:?} shard (shuffled: {})",
                    shuffle.is_some()
                );
                let o = match &mut open {
                    Some(o) => o,
                    None => open.insert(open_streamed(n, zstd_level, row_groups)?),
                };
                if o.tx.send(batch).is_err() {
                    // The encoder stopped: report its error.
                    let o = open.take().expect("open shard");
                    return Err(o
                        .handle
                        .join()
                        .map_err(|_| anyhow!("shard encoder panicked"))?
                        .err()
                        .unwrap_or_else(|| anyhow!("shard encoder stopped"))
                        .context(format!("encoding shard {n} in {}", dir.display())));
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
                ctx.send(Commit::Shard(InFlight { cursor, handle }))
                    .map_err(|_| stopped())?;
            }
            WriteMsg::Finish { totals, provenance } => {
                return ctx
                    .send(Commit::Finish { totals, provenance })
                    .map_err(|_| stopped());
            }
        }
    }
    Err(anyhow!(
        "pack stopped before the end of the input; rerun the same command to resume"
    ))
}

/// A parquet shard encoded on its own thread from the rows streamed to it.
fn open_streamed(k: usize, zstd_level: u8, row_groups: parquet::RowGroups) -> Result<OpenShard> {
    let (tx, brx) = sync_channel::<RowBatch>(16);
    let handle = spawn_encoder(k, move || {
        let mut s: Option<parquet::Streaming> = None;
        for b in brx {
            // Time encoding only, not waiting for rows.
            let mut c = Clock::start();
            let st = match &mut s {
                Some(st) => st,
                None => s.insert(parquet::Streaming::new(&b, zstd_level, row_groups)?),
            };
            st.write(&b)?;
            c.lap(|p| &p.encode_cpu);
        }
        let mut c = Clock::start();
        let mut st = s.ok_or_else(|| anyhow!("a streamed shard without rows"))?;
        let drained = st.drain();
        // The waits were for row groups encoding on the pool.
        super::profile::add(|p| &p.encode_wait, st.waited());
        super::profile::add(|p| &p.encode_pool, st.encoding());
        let r = drained.and_then(|_| st.into_shard(k));
        c.lap(|p| &p.encode_cpu);
        r
    })?;
    Ok(OpenShard { tx, handle })
}

/// The committer thread: wait for each shard's encoder in order, write the shard durably into
/// the staging directory (`OUT/.incomplete/`, [`staged`]) and journal it with its resume
/// cursor; at the end move the shards into place, then mark the index complete. `None`: the router
/// stopped before the end (a signal, an error it reports), with every shard before it
/// journaled.
fn commit_shards(
    dir: &Path,
    is_mds: bool,
    mut idx: Index,
    mut mds: Vec<serde_json::Value>,
    mut k: usize,
    mut hashes: Option<PendingHashes>,
    throttle: Option<u64>,
    rx: Receiver<Commit>,
) -> Result<Option<Index>> {
    let mut c = Clock::start();
    for msg in rx {
        let f = match msg {
            // Once a stop signal arrived, no further shard is journaled (the run resumes
            // after the last one that was).
            Commit::Shard(f) => {
                crate::signals::check()?;
                f
            }
            Commit::Finish { totals, provenance } => {
                idx.totals = totals;
                idx.provenance = provenance;
                idx.extra.remove("resume");
                idx.complete = true;
                settle_inputs(&mut hashes, &mut idx)?;
                // The shards leave the staging directory before the index says complete: a
                // kill in between leaves an incomplete output that resumes.
                staged::promote(dir, &staged::listed(&idx))?;
                crate::signals::pause_point("pack-promoted");
                index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                return Ok(Some(idx));
            }
        };
        let enc = f
            .handle
            .join()
            .map_err(|_| anyhow!("shard encoder panicked"))?
            .with_context(|| format!("encoding shard {k} in {}", dir.display()))?;
        c.lap(|p| &p.write_wait);
        let w = enc
            .commit(&staged::dir(dir))
            .with_context(|| format!("writing shard {k} in {}", dir.display()))?;
        k += 1;
        idx.shards.push(w.entry);
        if let Some(m) = w.mds {
            mds.push(m);
        }
        if let Some(cur) = f.cursor {
            idx.totals = cur.totals.clone();
            idx.provenance = cur.provenance.clone();
            idx.extra
                .insert("resume".into(), serde_json::to_value(&cur)?);
            settle_inputs(&mut hashes, &mut idx)?;
            index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
            crate::signals::pause_point("pack-shard");
            if let Some(ms) = throttle {
                // Tests and demos: slow down so a kill lands mid-run.
                std::thread::sleep(std::time::Duration::from_millis(ms));
            }
        }
        c.lap(|p| &p.write_io);
    }
    Ok(None)
}
