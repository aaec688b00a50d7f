//! Why: one reader thread decoding a parquet file caps `pack` on many cores (decompressing
//! and rendering ~1 GB of code text takes it ~2 s, 113–194 Mtok/s on the 16-core device).
//! Here a file is cut into pieces — runs of whole row groups of up to [`super::PIECE_BYTES`] of
//! uncompressed text, a very large row group split at row offsets (whole pages are skipped by
//! their headers, not decoded) — and the pieces are decoded and rendered on a few
//! threads of their own, a bounded number ahead, while the caller's thread hands their rows
//! to the sink strictly in file order. The rows, their order and every error are those of the
//! serial reader: a piece's decode error is raised only after every row before it was given
//! to the sink, and names the file and row as the serial reader's does.
//!
//! A sink's error (`Stop`: budget reached, consumer gone) ends the read at once: the decoding
//! threads see a cancel flag between batches and are joined before the read returns.
//! A file of one piece from the cursor (one row group of up to 4 × [`super::PIECE_BYTES`]), or one
//! decoding thread, is read serially.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;

use anyhow::{anyhow, Context, Result};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::ParquetMetaData;

use super::parquet_batch::{emit_batch, locate_error, projection, BATCH_ROWS};
use super::{Outcome, RowsOf, Sink, Template};

/// Uncompressed bytes of the template's columns per piece, merging small row groups (a piece
/// is decoded whole by one thread, and `threads + 1` pieces at most are decoded ahead of the
/// sink: the read-ahead memory is that many pieces of rendered text; see [`plan`]).

/// A run of file rows `[first_row, first_row + rows)`: the row groups it touches, and the
/// rows to skip in the first of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Piece {
    row_groups: Vec<usize>,
    offset: u64,
    first_row: u64,
    rows: u64,
}

/// Cut the rows from `start_row` on into pieces, given each row group's `(rows, bytes)`;
/// row groups before the cursor are skipped by their row counts. Consecutive row groups are
/// merged while they stay within `target` bytes; a row group is split only when what is read
/// of it exceeds `SPLIT × target`, into pieces of about `2 × target`: a piece that starts
/// inside a row group decompresses its dictionary page again (pyarrow's run to megabytes:
/// 16 MiB pieces of 65–90 MB row groups cost 2.2× the serial CPU time).
pub(super) fn plan(groups: &[(u64, u64)], start_row: u64, target: u64) -> Vec<Piece> {
    const SPLIT: u64 = 4;
    let mut out: Vec<Piece> = Vec::new();
    let mut cur: Option<(Piece, u64)> = None;
    let mut base = 0u64;
    for (g, &(rows, bytes)) in groups.iter().enumerate() {
        let lo = start_row.saturating_sub(base);
        let first = base;
        base += rows;
        if lo >= rows {
            continue;
        }
        let n = rows - lo;
        let size = (bytes as u128 * n as u128 / rows as u128) as u64;
        if size > SPLIT.saturating_mul(target) {
            out.extend(cur.take().map(|(p, _)| p));
            let k = size.div_ceil(target.max(1).saturating_mul(2)).min(n);
            for i in 0..k {
                let (a, b) = (lo + n * i / k, lo + n * (i + 1) / k);
                out.push(Piece {
                    row_groups: vec![g],
                    offset: a,
                    first_row: first + a,
                    rows: b - a,
                });
            }
            continue;
        }
        if cur.as_ref().is_some_and(|(_, have)| have + size > target) {
            out.extend(cur.take().map(|(p, _)| p));
        }
        let (p, have) = cur.get_or_insert_with(|| {
            (
                Piece {
                    row_groups: vec![],
                    offset: lo,
                    first_row: first + lo,
                    rows: 0,
                },
                0,
            )
        });
        p.row_groups.push(g);
        p.rows += n;
        *have += size;
    }
    out.extend(cur.map(|(p, _)| p));
    out
}

/// Per row group: rows, and uncompressed bytes of the columns under `roots`.
fn groups(meta: &ParquetMetaData, roots: &[String]) -> Vec<(u64, u64)> {
    meta.row_groups()
        .iter()
        .map(|g| {
            let bytes: i64 = g
                .columns()
                .iter()
                .filter(|c| {
                    c.column_path()
                        .parts()
                        .first()
                        .is_some_and(|r| roots.contains(r))
                })
                .map(|c| c.uncompressed_size())
                .sum();
            let bytes = if bytes > 0 {
                bytes
            } else {
                g.total_byte_size()
            };
            (g.num_rows().max(0) as u64, bytes.max(0) as u64)
        })
        .collect()
}

/// Read `path` on several threads when it has more than one piece from `start_row` and more
/// than one decoding thread is allowed (`decoding`); `None`: read it serially.
pub(super) fn try_read(
    at: RowsOf,
    decoding: super::Decoding,
    tpl: &Template,
    sink: &mut Sink,
) -> Option<Result<()>> {
    let RowsOf {
        path,
        name,
        start_row,
    } = at;
    let threads = decoding.threads;
    if threads < 2 {
        return None;
    }
    // A footer that does not open is left to the serial reader's error.
    let b = crate::shards::guarded::builder(path).ok()?;
    let meta = b.metadata().clone();
    let pieces = plan(
        &groups(&meta, &tpl.root_columns()),
        start_row,
        decoding.piece_bytes,
    );
    if pieces.len() < 2 {
        return None;
    }
    let opened = (|| {
        let mask = projection(b.schema(), b.parquet_schema(), tpl, name)?;
        let meta = ArrowReaderMetadata::try_new(meta, ArrowReaderOptions::new())
            .with_context(|| format!("{name}: not a readable parquet file"))?;
        Ok((meta, mask))
    })();
    Some(opened.and_then(|(meta, mask)| {
        let file = Input {
            path,
            name,
            tpl,
            meta,
            mask,
        };
        read_pieces(&file, pieces, threads, sink)
    }))
}

/// What the decoding threads share about the file.
struct Input<'a> {
    path: &'a Path,
    name: &'a str,
    tpl: &'a Template,
    meta: ArrowReaderMetadata,
    mask: ProjectionMask,
}

/// A decoding thread's word on one piece, in order.
enum Msg {
    Rows(Vec<(u64, Outcome)>),
    Failed(anyhow::Error),
    Done,
}

/// Sets the cancel flag when the reading ends, however it ends.
struct CancelOnDrop<'a>(&'a AtomicBool);

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Decode `pieces` on `threads` threads, at most `threads + 1` ahead of the sink, and give
/// their rows to `sink` in order.
fn read_pieces(f: &Input<'_>, pieces: Vec<Piece>, threads: usize, sink: &mut Sink) -> Result<()> {
    let cancel = AtomicBool::new(false);
    let (job_tx, job_rx) = channel::<(Piece, Sender<Msg>)>();
    let job_rx = Mutex::new(job_rx);
    std::thread::scope(|s| {
        let _cancel = CancelOnDrop(&cancel);
        for i in 0..threads.min(pieces.len()) {
            let (jobs, cancel) = (&job_rx, &cancel);
            std::thread::Builder::new()
                .name(format!("parquet-decode-{i}"))
                .spawn_scoped(s, move || decode_jobs(f, jobs, cancel))
                .with_context(|| format!("{}: starting a decoding thread", f.name))?;
        }
        let ahead = threads + 1;
        let mut queue = pieces.into_iter();
        let mut inflight: VecDeque<(u64, Receiver<Msg>)> = VecDeque::new();
        loop {
            while inflight.len() < ahead {
                let Some(p) = queue.next() else { break };
                let (tx, rx) = channel();
                inflight.push_back((p.first_row, rx));
                job_tx
                    .send((p, tx))
                    .map_err(|_| anyhow!("{}: the decoding threads are gone", f.name))?;
            }
            let Some((first, rx)) = inflight.pop_front() else {
                break;
            };
            let mut done = false;
            for m in rx.iter() {
                match m {
                    Msg::Rows(items) => {
                        for (row, o) in items {
                            sink(row, o)?;
                        }
                    }
                    Msg::Failed(e) => return Err(e),
                    Msg::Done => {
                        done = true;
                        break;
                    }
                }
            }
            if !done {
                return Err(anyhow!(
                    "{}: rows from {first}: a decoding thread ended early",
                    f.name
                ));
            }
        }
        drop(job_tx);
        Ok(())
    })
}

/// A decoding thread: take pieces until the job queue closes or the read is cancelled.
fn decode_jobs(f: &Input<'_>, jobs: &Mutex<Receiver<(Piece, Sender<Msg>)>>, cancel: &AtomicBool) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((piece, tx)) = job else { return };
        if cancel.load(Ordering::Relaxed) {
            return;
        }
        let r = crate::util::no_panic(f.name, || decode_piece(f, &piece, &tx, cancel));
        let last = match r {
            Ok(()) => Msg::Done,
            Err(e) => Msg::Failed(e),
        };
        let _ = tx.send(last);
    }
}

/// Decode and render one piece, a batch at a time, onto `tx`.
fn decode_piece(f: &Input<'_>, p: &Piece, tx: &Sender<Msg>, cancel: &AtomicBool) -> Result<()> {
    let file = std::fs::File::open(f.path).with_context(|| format!("opening {}", f.name))?;
    let b = ParquetRecordBatchReaderBuilder::new_with_metadata(file, f.meta.clone())
        .with_projection(f.mask.clone())
        .with_batch_size(BATCH_ROWS)
        .with_row_groups(p.row_groups.clone())
        .with_offset(p.offset as usize)
        .with_limit(p.rows as usize);
    let batches = crate::shards::guarded::build(b, f.path).with_context(|| f.name.to_string())?;
    let mut row = p.first_row;
    for b in batches {
        if cancel.load(Ordering::Relaxed) {
            return Ok(());
        }
        let batch = match b {
            Ok(b) => b,
            Err(e) => return Err(locate_error(f.path, f.name, f.tpl, row, &e.to_string())),
        };
        let mut items = Vec::with_capacity(batch.num_rows());
        emit_batch(&batch, row, f.name, f.tpl, &mut |r: u64, o: Outcome| {
            items.push((r, o));
            Ok(())
        })?;
        row += batch.num_rows() as u64;
        if tx.send(Msg::Rows(items)).is_err() {
            return Ok(());
        }
    }
    if row != p.first_row + p.rows && !cancel.load(Ordering::Relaxed) {
        return Err(anyhow!(
            "{}: row {row}: the file ends before the {} rows its footer counts",
            f.name,
            p.first_row + p.rows
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;

    use arrow::array::{ArrayRef, BinaryArray, RecordBatch, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::WriterProperties;

    use super::*;
    use crate::sources::{is_stop, Stop};

    /// `n` rows in row groups of `rg` rows and pages of 4: `text` (some null, some blank,
    /// lengths varying) and `q`, binary, invalid UTF-8 at row `bad` if given.
    fn write(dir: &Path, n: usize, rg: usize, bad: Option<usize>) -> PathBuf {
        let text: Vec<Option<String>> = (0..n)
            .map(|i| match i % 17 {
                3 => None,
                5 => Some("  \n".into()),
                _ => Some(format!("doc {i} {}", "xy".repeat(i % 41))),
            })
            .collect();
        let q: Vec<Vec<u8>> = (0..n)
            .map(|i| {
                if Some(i) == bad {
                    vec![b'q', 0xff, 0xfe]
                } else {
                    format!("q{i}").into_bytes()
                }
            })
            .collect();
        let schema = Arc::new(Schema::new(vec![
            Field::new("q", DataType::Binary, false),
            Field::new("text", DataType::Utf8, true),
        ]));
        let cols: Vec<ArrayRef> = vec![
            Arc::new(BinaryArray::from_iter_values(q.iter())),
            Arc::new(StringArray::from(text)),
        ];
        let rb = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let props = WriterProperties::builder()
            .set_max_row_group_row_count(Some(rg))
            .set_data_page_row_count_limit(4)
            .set_write_batch_size(4)
            .build();
        let p = dir.join("rows.parquet");
        let mut w =
            ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema, Some(props)).unwrap();
        w.write(&rb).unwrap();
        w.close().unwrap();
        p
    }

    type Rows = Vec<(u64, Outcome)>;

    /// Rows read from `start` until the end, an error, or `stop_after` rows.
    fn collect(
        read: impl FnOnce(&mut Sink) -> Result<()>,
        stop_after: Option<usize>,
    ) -> (Rows, Result<()>) {
        let mut rows = Vec::new();
        let r = read(&mut |row: u64, o: Outcome| {
            if stop_after == Some(rows.len()) {
                return Err(Stop.into());
            }
            rows.push((row, o));
            Ok(())
        });
        (rows, r)
    }

    fn serial(
        p: &Path,
        tpl: &Template,
        start: u64,
        stop_after: Option<usize>,
    ) -> (Rows, Result<()>) {
        collect(
            |sink| {
                let at = RowsOf {
                    path: p,
                    name: "rows.parquet",
                    start_row: start,
                };
                super::super::parquet_batch::read_serial(at, tpl, sink)
            },
            stop_after,
        )
    }

    /// The parallel reader with `threads` and pieces of `target` bytes; also the plan's
    /// piece count.
    fn parallel(
        p: &Path,
        tpl: &Template,
        start: u64,
        threads: usize,
        target: u64,
        stop_after: Option<usize>,
    ) -> (Rows, Result<()>, usize) {
        let b = crate::shards::guarded::builder(p).unwrap();
        let pieces = plan(&groups(b.metadata(), &tpl.root_columns()), start, target);
        let n = pieces.len();
        let f = Input {
            path: p,
            name: "rows.parquet",
            tpl,
            meta: ArrowReaderMetadata::try_new(b.metadata().clone(), ArrowReaderOptions::new())
                .unwrap(),
            mask: projection(b.schema(), b.parquet_schema(), tpl, "rows.parquet").unwrap(),
        };
        let (rows, r) = collect(|sink| read_pieces(&f, pieces, threads, sink), stop_after);
        (rows, r, n)
    }

    #[test]
    fn the_plan_covers_the_rows_from_the_cursor_once_in_order() {
        let groups = [(10, 1000), (3, 30), (0, 0), (50, 50_000), (1, 7)];
        let total = 64u64;
        for start in [0, 1, 9, 10, 12, 13, 40, 63, 64, 100] {
            for target in [1, 25, 100, 999, 5000, u64::MAX / 4] {
                let pieces = plan(&groups, start, target);
                let mut next = start;
                for p in &pieces {
                    assert_eq!(p.first_row, next, "{start} {target}: {pieces:?}");
                    assert!(p.rows > 0);
                    // The row groups are consecutive and hold exactly the piece's rows.
                    let g0 = p.row_groups[0];
                    let base: u64 = groups[..g0].iter().map(|g| g.0).sum();
                    assert_eq!(p.offset, p.first_row - base);
                    let held: u64 = p.row_groups.iter().map(|&g| groups[g].0).sum();
                    assert!(p.offset + p.rows <= held && p.offset < groups[g0].0);
                    assert!(p.row_groups.windows(2).all(|w| w[1] > w[0]));
                    next += p.rows;
                }
                assert_eq!(next, total.max(start), "{start} {target}: {pieces:?}");
            }
        }
        // Large row groups are split, small ones merged.
        // Row group 0 (1000 > 4 × 100 bytes) in 5 pieces; row group 1 alone (row group 3 would
        // take it past 100 bytes); row group 3 split into 50 one-row pieces; row group 4 alone.
        let p = plan(&groups, 0, 100);
        assert_eq!(p.len(), 5 + 1 + 50 + 1);
        assert_eq!((p[5].row_groups.clone(), p[5].rows), (vec![1], 3));
        // Small row groups are merged whole, large ones not split below 4 × target.
        let p = plan(&groups, 0, 20_000);
        let rgs: Vec<Vec<usize>> = p.iter().map(|p| p.row_groups.clone()).collect();
        assert_eq!(rgs, vec![vec![0, 1], vec![3], vec![4]]);
        // The cursor's row group is entered at its row, never split below 4 × target.
        let p = plan(&groups, 5, 20_000);
        assert_eq!((p[0].offset, p[0].first_row, p[0].rows), (5, 5, 8));
        assert_eq!(plan(&groups, 0, u64::MAX / 4).len(), 1);
    }

    #[test]
    fn parallel_rows_are_the_serial_rows_in_order_from_any_cursor() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), 1000, 37, None);
        for t in ["{text}", "{q}: {text}"] {
            let tpl = Template::parse(t).unwrap();
            let (all, r) = serial(&p, &tpl, 0, None);
            r.unwrap();
            assert_eq!(all.len(), 1000);
            assert!(all.iter().any(|(_, o)| *o == Outcome::Filtered));
            assert!(all.iter().any(|(_, o)| matches!(o, Outcome::Text(_))));
            assert_eq!(all.iter().any(|(_, o)| *o == Outcome::Empty), t == "{text}");
            same_from_any_cursor(&p, &tpl, &all);
        }
    }

    fn same_from_any_cursor(p: &Path, tpl: &Template, all: &Rows) {
        for start in [0u64, 1, 36, 37, 40, 555, 999, 1000, 5000] {
            let (want, r) = serial(p, tpl, start, None);
            r.unwrap();
            assert_eq!(want[..], all[(start as usize).min(1000)..]);
            for (threads, target) in [(2, 1), (3, 300), (8, 2000), (4, 1 << 30)] {
                let (got, r, n) = parallel(p, tpl, start, threads, target, None);
                r.unwrap();
                assert!(target > 1000 || start >= 990 || n > 10, "{n} pieces");
                assert_eq!(got, want, "start {start}, {threads} threads, {n} pieces");
            }
        }
    }

    #[test]
    fn a_stop_from_the_sink_ends_the_parallel_read_there() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), 1000, 37, None);
        let tpl = Template::parse("{text}").unwrap();
        for stop in [0, 1, 123, 959] {
            let (want, _) = serial(&p, &tpl, 40, Some(stop));
            let (got, r, n) = parallel(&p, &tpl, 40, 4, 100, Some(stop));
            assert!(n > 20);
            assert!(r.as_ref().is_err_and(is_stop), "{r:?}");
            assert_eq!(got.len(), stop);
            assert_eq!(got, want);
        }
    }

    #[test]
    fn a_decode_error_is_the_serial_one_after_the_rows_before_it() {
        let d = tempfile::tempdir().unwrap();
        let p = write(d.path(), 1000, 37, Some(700));
        let tpl = Template::parse("{q}: {text}").unwrap();
        let (_, want) = serial(&p, &tpl, 0, None);
        let want = format!("{:#}", want.unwrap_err());
        assert!(
            want.contains("row 700") && want.contains("rows.parquet"),
            "{want}"
        );
        let (got, r, n) = parallel(&p, &tpl, 0, 3, 200, None);
        assert!(n > 20);
        assert_eq!(format!("{:#}", r.unwrap_err()), want);
        // Every row of the pieces before the failing batch was delivered, in order.
        assert!(got.len() >= 600 && got.len() <= 700, "{}", got.len());
        assert!(got.iter().enumerate().all(|(i, (r, _))| *r == i as u64));
    }
}
