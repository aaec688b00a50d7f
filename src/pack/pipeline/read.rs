//! Step 3a of a pack run, the reader thread: streams this worker's units from the resume cursor (from
//! the cache, or from the Hub with `--stream`) and hands their rows to the packing thread in
//! batches of about 4 MiB of text, framed by unit start / end messages.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::SyncSender;

use anyhow::Result;

use super::profile::Clock;
use crate::pack::plan::{Remote, Unit};
use crate::pack::remote::Streaming;
use crate::sources::bucket::ObjectInput;
use crate::sources::{Outcome, Stop};

use crate::tuning::{Tuning, BATCH_MAX_ROWS};

/// What the reader hands the packing thread, in unit order.
pub(super) enum ReadMsg {
    Rows {
        unit: usize,
        items: Vec<(u64, Outcome)>,
        /// Bytes of the unit's file read when the batch was cut (compressed bytes for
        /// `.gz` / `.zst`; 0 when unknown): progress for inputs without row counts.
        at: u64,
    },
    UnitStart {
        unit: usize,
        first_row: u64,
    },
    UnitEnd {
        unit: usize,
    },
    Failed(anyhow::Error),
}

/// The reader thread: stream units from the cursor, batching rows.
pub(super) fn read_units(
    units: &[Unit],
    start_unit: usize,
    start_row: u64,
    bounds: crate::bounded::ReadBounds,
    tuning: Tuning,
    exhausted: &[AtomicBool],
    streaming: Option<&Streaming>,
    tx: &SyncSender<ReadMsg>,
) {
    for (k, u) in units.iter().enumerate().skip(start_unit) {
        let first = if k == start_unit { start_row } else { 0 };
        if tx
            .send(ReadMsg::UnitStart {
                unit: k,
                first_row: first,
            })
            .is_err()
        {
            return;
        }
        let src = u.source.index;
        if !exhausted[src].load(Ordering::Relaxed) {
            let mut items: Vec<(u64, Outcome)> = Vec::new();
            let mut bytes = 0usize;
            let mut clock = Clock::start();
            let batch_bytes = tuning.batch_text_bytes;
            let mut sink = |row: u64, o: Outcome| -> Result<()> {
                if let Outcome::Text(t) = &o {
                    bytes += t.len();
                }
                items.push((row, o));
                if bytes >= batch_bytes || items.len() >= BATCH_MAX_ROWS {
                    bytes = 0;
                    let batch = std::mem::take(&mut items);
                    clock.lap(|p| &p.read_busy);
                    let sent = tx.send(ReadMsg::Rows {
                        unit: k,
                        items: batch,
                        at: crate::bounded::consumed(),
                    });
                    clock.lap(|p| &p.read_blocked);
                    if sent.is_err() || exhausted[src].load(Ordering::Relaxed) {
                        return Err(Stop.into());
                    }
                }
                Ok(())
            };
            let r = match (&u.remote, streaming) {
                (Some(Remote::Hub(spec)), Some(st)) => {
                    st.read(u, spec, first, bounds, tuning.decoding, &mut sink)
                }
                (Some(Remote::Object(o)), _) => read_object(u, o, first, bounds, tuning, &mut sink),
                (Some(Remote::Hub(_)), None) => Err(anyhow::anyhow!(
                    "{}: a Hub file without a Hub client",
                    u.file
                )),
                (None, _) => {
                    let at = crate::sources::RowsOf {
                        path: &u.path,
                        name: &u.file,
                        start_row: first,
                    };
                    crate::sources::read_rows(
                        at,
                        u.format,
                        bounds,
                        tuning.decoding,
                        &u.source.tpl,
                        &mut sink,
                    )
                }
            };
            if let Err(e) = r {
                let _ = tx.send(ReadMsg::Failed(
                    e.context(format!("source {:?}", &*u.source.name)),
                ));
                return;
            }
            clock.lap(|p| &p.read_busy);
            let sent = items.is_empty()
                || tx
                    .send(ReadMsg::Rows {
                        unit: k,
                        items,
                        at: crate::bounded::consumed(),
                    })
                    .is_ok();
            clock.lap(|p| &p.read_blocked);
            if !sent {
                return;
            }
        }
        if tx.send(ReadMsg::UnitEnd { unit: k }).is_err() {
            return;
        }
    }
}

/// One bucket object's rows from `first` on, read by range; what its reads used logged.
fn read_object(
    u: &Unit,
    o: &ObjectInput,
    first: u64,
    bounds: crate::bounded::ReadBounds,
    tuning: Tuning,
    sink: &mut crate::sources::Sink,
) -> Result<()> {
    let at = crate::sources::RemoteRows {
        rt: o.bucket.runtime(),
        file: o.file(),
        name: &u.file,
        start_row: first,
    };
    let r = crate::sources::read_remote_rows(
        at,
        u.format,
        bounds,
        tuning.decoding,
        &u.source.tpl,
        sink,
    );
    tracing::info!(
        "{}: read {} of {} bytes in {} ranged GETs",
        o.url,
        o.count.bytes(),
        o.size,
        o.count.requests()
    );
    r
}
