//! The writer thread of a pack run: writes each finished shard durably (shuffled first when
//! `--shuffle-seed` says so), then journals it in `index.json` with the resume cursor, so a
//! killed run resumes after the last shard recorded; the end marks the index complete.

use std::path::Path;
use std::sync::mpsc::Receiver;

use anyhow::{anyhow, Context, Result};

use crate::pack::packer::shuffle_rows;
use crate::pack::resume::Cursor;
use crate::shards::index::{self, Index, ProvenanceRange, Totals};
use crate::shards::{parquet, Dtype, RowBatch, ShardFormat};

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

/// The writer thread: write each shard durably, then journal it in the index.
#[allow(clippy::too_many_arguments)]
pub(super) fn write_shards(
    dir: &Path,
    format: ShardFormat,
    dtype: Dtype,
    shuffle: Option<u64>,
    mut idx: Index,
    mut mds: Vec<serde_json::Value>,
    mut n: usize,
    rx: Receiver<WriteMsg>,
) -> Result<Index> {
    let is_mds = format == ShardFormat::Mds;
    let throttle: Option<u64> = std::env::var("DLM_PACK_THROTTLE_MS")
        .ok()
        .and_then(|v| v.parse().ok());
    // The parquet shard being encoded from `Rows` messages.
    let mut open: Option<parquet::Streaming> = None;
    for msg in rx {
        match msg {
            WriteMsg::Rows { batch } => {
                anyhow::ensure!(
                    format == ShardFormat::Parquet && shuffle.is_none(),
                    "streamed rows for a {format:?} shard (shuffled: {})",
                    shuffle.is_some()
                );
                let s = match &mut open {
                    Some(s) => s,
                    None => open.insert(parquet::Streaming::new(&batch)?),
                };
                s.write(&batch)
                    .with_context(|| format!("encoding shard {n} in {}", dir.display()))?;
            }
            WriteMsg::Shard { mut batch, cursor } => {
                // A safe point: stop before the next shard once a signal arrived.
                crate::signals::check()?;
                let w = match open.take() {
                    Some(mut s) => s
                        .write(&batch)
                        .and_then(|_| crate::shards::write_parquet_streamed(dir, n, s)),
                    None => {
                        if let Some(seed) = shuffle {
                            shuffle_rows(&mut batch, seed, n);
                        }
                        crate::shards::write_shard(format, dir, n, &batch, dtype)
                    }
                }
                .with_context(|| format!("writing shard {n} in {}", dir.display()))?;
                n += 1;
                idx.shards.push(w.entry);
                if let Some(m) = w.mds {
                    mds.push(m);
                }
                if let Some(c) = cursor {
                    idx.totals = c.totals.clone();
                    idx.provenance = c.provenance.clone();
                    idx.extra.insert("resume".into(), serde_json::to_value(&c)?);
                    index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                    crate::signals::pause_point("pack-shard");
                    if let Some(ms) = throttle {
                        // Tests and demos: slow down so a kill lands mid-run.
                        std::thread::sleep(std::time::Duration::from_millis(ms));
                    }
                }
            }
            WriteMsg::Finish { totals, provenance } => {
                idx.totals = totals;
                idx.provenance = provenance;
                idx.extra.remove("resume");
                idx.complete = true;
                index::save(dir, &idx, is_mds.then_some(&mds[..]))?;
                return Ok(idx);
            }
        }
    }
    Err(anyhow!(
        "pack stopped before the end of the input; rerun the same command to resume"
    ))
}
