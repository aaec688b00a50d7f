//! Parquet shards (`--format parquet`, the default): zstd, `input_ids: list<uint32>`, and the
//! batch's metadata columns (`doc_offsets: list<uint32>`, `source: string`, ...), readable by
//! pyarrow and the `datasets` parquet loader. Shards are `data/part-NNNNN.parquet`, so sorting
//! the file names gives row order, and `OUT/data` holds nothing but the shards: pyarrow
//! (`pq.read_table`, `pyarrow.dataset`), polars `scan_parquet` and `datasets.load_dataset(
//! "parquet", data_dir=...)` read it whole without naming files (none of them can read `OUT`
//! itself while `OUT/index.json` is there: pyarrow and `datasets` take every file not starting
//! with `.`/`_` for parquet, polars refuses a directory of mixed extensions, hidden or not).

use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, TryRecvError};
use std::sync::Arc;

use anyhow::{bail, Result};
use arrow::array::{ArrayRef, ListBuilder, RecordBatch, StringBuilder, UInt32Array, UInt32Builder};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_writer::{
    compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory,
};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;

use std::path::Path;

use anyhow::{anyhow, Context};
use arrow::array::{Array, AsArray};
use arrow::datatypes::UInt32Type;

use super::{Column, EncodedShard, RowBatch, ShardEntry, ShardReader, ShardWriter};
pub use crate::tuning::RowGroups;

/// The zstd level of `pack`'s parquet shards when `--zstd-level` is not given. Level 3 was
/// 22 % of a 2-thread pack's CPU (perf, Llama-3-shaped prose, 2-core box); level 1 compresses
/// 1.6× as fast for shards ~5 % larger (issue 43).
pub const ZSTD_LEVEL: u8 = 1;
/// The level of parquet shards written before `--zstd-level` existed (an index's `args`
/// without `zstd_level`), and of the other commands' parquet shards (`mcq`'s SFT shards).
pub const LEGACY_ZSTD_LEVEL: u8 = 3;

/// The parquet shard writer (pages compressed with zstd at `zstd_level`).
pub struct Parquet {
    pub zstd_level: u8,
    pub row_groups: RowGroups,
}

impl ShardWriter for Parquet {
    fn encode(&self, n: usize, batch: &RowBatch) -> Result<EncodedShard> {
        let mut s = Streaming::new(batch, self.zstd_level, self.row_groups)?;
        s.write(batch)?;
        s.into_shard(n)
    }
}

/// The parquet shard reader (any level: the pages say theirs).
pub struct ParquetReader;

impl ShardReader for ParquetReader {
    fn read(&self, dir: &Path, entry: &ShardEntry) -> Result<RowBatch> {
        read(&dir.join(&entry.file))
    }
}

/// The rows of one `list<uint32>` column, cast from any integer list type.
fn lists(col: &ArrayRef, path: &Path, name: &str) -> Result<Vec<Vec<u32>>> {
    let list_t = DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, true)));
    let cast = arrow::compute::cast(col, &list_t).map_err(|e| {
        anyhow!(
            "{}: column {name} is not a list of token ids ({e})",
            path.display()
        )
    })?;
    let l = cast.as_list::<i32>();
    let vals = l.values().as_primitive::<UInt32Type>().values();
    let offs = l.value_offsets();
    Ok((0..l.len())
        .map(|i| vals[offs[i] as usize..offs[i + 1] as usize].to_vec())
        .collect())
}

/// Read a parquet shard back into the batch it was written from: `input_ids`, and every
/// other column as `list<uint32>` → [`Column::U32List`], `uint32` → [`Column::U32`],
/// `utf8` → [`Column::Str`], in file order.
pub fn read(path: &Path) -> Result<RowBatch> {
    let reader = super::guarded::open(path)?;
    let mut out = RowBatch::default();
    for (k, rb) in reader.enumerate() {
        let rb = rb.with_context(|| format!("reading {}", path.display()))?;
        let schema = rb.schema();
        if k == 0 {
            for f in schema.fields().iter().filter(|f| f.name() != "input_ids") {
                let c = match f.data_type() {
                    DataType::List(_) | DataType::LargeList(_) => Column::U32List(Vec::new()),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                        Column::Str(Vec::new())
                    }
                    t if t.is_integer() => Column::U32(Vec::new()),
                    t => anyhow::bail!(
                        "{}: column {} has type {t}, not one a shard holds",
                        path.display(),
                        f.name()
                    ),
                };
                out.columns.push((f.name().clone(), c));
            }
        }
        let ids = rb
            .column_by_name("input_ids")
            .ok_or_else(|| anyhow!("{}: no input_ids column", path.display()))?;
        out.input_ids.extend(lists(ids, path, "input_ids")?);
        for (name, c) in &mut out.columns {
            let a = rb
                .column_by_name(name)
                .ok_or_else(|| anyhow!("{}: row group {k} lacks column {name}", path.display()))?;
            let bad = |i: usize| {
                anyhow!(
                    "{} row {i}: column {name} is null or out of range",
                    path.display()
                )
            };
            match c {
                Column::U32List(v) => v.extend(lists(a, path, name)?),
                Column::Str(v) => {
                    let s = arrow::compute::cast(a, &DataType::Utf8)?;
                    let s = s.as_string::<i32>();
                    for i in 0..s.len() {
                        if s.is_null(i) {
                            return Err(bad(i));
                        }
                        v.push(s.value(i).to_string());
                    }
                }
                Column::U32(v) => {
                    // A checked cast: a value out of uint32 range is an error, not a wrap.
                    let opts = arrow::compute::CastOptions {
                        safe: false,
                        ..Default::default()
                    };
                    let u = arrow::compute::cast_with_options(a, &DataType::UInt32, &opts)
                        .map_err(|e| anyhow!("{}: column {name}: {e}", path.display()))?;
                    let u = u.as_primitive::<UInt32Type>();
                    for i in 0..u.len() {
                        if u.is_null(i) {
                            return Err(bad(i));
                        }
                        v.push(u.value(i));
                    }
                }
            }
        }
    }
    out.check().with_context(|| path.display().to_string())?;
    Ok(out)
}

/// Rows per row group: ~8 MiB of uint32 tokens at seq-len 2048.
const ROW_GROUP_ROWS: usize = 1024;

/// The subdirectory of an output that holds its parquet shards.
pub const DATA_DIR: &str = "data";

/// `data/part-00000.parquet` (relative to the output directory)
pub fn shard_name(n: usize) -> String {
    format!("{DATA_DIR}/part-{n:05}.parquet")
}

fn u32_lists(rows: &[Vec<u32>]) -> ArrayRef {
    let total = rows.iter().map(Vec::len).sum();
    let mut b = ListBuilder::with_capacity(UInt32Builder::with_capacity(total), rows.len());
    for r in rows {
        b.values().append_slice(r);
        b.append(true);
    }
    Arc::new(b.finish())
}

/// The batch as one arrow record batch (`input_ids` first, then the columns in order).
pub fn to_record_batch(batch: &RowBatch) -> Result<RecordBatch> {
    let mut fields = Vec::new();
    let mut arrays: Vec<ArrayRef> = Vec::new();
    let list_t = DataType::List(Arc::new(Field::new_list_field(DataType::UInt32, true)));
    fields.push(Field::new("input_ids", list_t.clone(), false));
    arrays.push(u32_lists(&batch.input_ids));
    for (name, col) in &batch.columns {
        match col {
            Column::U32List(v) => {
                fields.push(Field::new(name, list_t.clone(), false));
                arrays.push(u32_lists(v));
            }
            Column::U32(v) => {
                fields.push(Field::new(name, DataType::UInt32, false));
                arrays.push(Arc::new(UInt32Array::from(v.clone())));
            }
            Column::Str(v) => {
                fields.push(Field::new(name, DataType::Utf8, false));
                let mut b = StringBuilder::new();
                for s in v {
                    b.append_value(s);
                }
                arrays.push(Arc::new(b.finish()));
            }
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// Rows per writer call, counted from the shard's first row. A shard is fed to the parquet
/// writer in these chunks whether it is encoded at once ([`encode`]) or row by row while
/// `pack` still tokenizes ([`Streaming`]): the writer's page cuts depend on its calls, so the
/// same chunks give the same bytes either way.
pub const CHUNK_ROWS: usize = 64;

fn props(zstd_level: u8) -> Result<WriterProperties> {
    // No dictionary pages: interning every token id cost ~11% of a pack's instructions
    // (callgrind, Mistral, 8 MB), and zstd over plain ids gives smaller files (-28% there).
    Ok(WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(zstd_level.into())?))
        .set_dictionary_enabled(false)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .build())
}

/// A parquet shard being encoded in memory, [`CHUNK_ROWS`] rows at a time.
///
/// Row groups ([`ROW_GROUP_ROWS`] rows) are encoded and compressed in parallel on the rayon
/// pool ([`RowGroups`]) — the writer side of `pack` keeps pace with tokenization on many cores — and spliced
/// into the file in order. Each group goes through the same column writers, fed the same
/// chunks, that `ArrowWriter` would use, so the bytes are those of one serial encoding.
pub struct Streaming {
    file: SerializedFileWriter<Vec<u8>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// The chunks of the row group being filled, and their rows.
    group: Vec<RecordBatch>,
    group_rows: usize,
    /// Row groups handed out so far.
    groups: usize,
    /// Row groups being encoded, oldest first (with the time each took).
    pending: VecDeque<Receiver<Encoded>>,
    rows: u64,
    tokens: u64,
    /// Time spent waiting for row groups to finish encoding.
    waited: std::time::Duration,
    /// Time the row groups spliced so far took to encode (on the pool, summed).
    encoding: std::time::Duration,
    /// On the pool or here, and how many in flight.
    row_groups: RowGroups,
}

/// One row group's encoded column chunks and the time its encoding took.
type Encoded = (Result<Vec<ArrowColumnChunk>>, std::time::Duration);

/// [`encode_group`], timed.
fn encode_timed(
    schema: &SchemaRef,
    writers: Vec<ArrowColumnWriter>,
    chunks: &[RecordBatch],
) -> Encoded {
    let t = std::time::Instant::now();
    let r = encode_group(schema, writers, chunks);
    (r, t.elapsed())
}

/// Encode one row group's chunks through its column writers (what `ArrowWriter` does for a
/// group, chunk by chunk).
fn encode_group(
    schema: &SchemaRef,
    mut writers: Vec<ArrowColumnWriter>,
    chunks: &[RecordBatch],
) -> Result<Vec<ArrowColumnChunk>> {
    for rb in chunks {
        let mut w = writers.iter_mut();
        for (field, column) in schema.fields().iter().zip(rb.columns()) {
            for leaf in compute_leaves(field.as_ref(), column)? {
                w.next()
                    .ok_or_else(|| anyhow!("more leaf columns than writers"))?
                    .write(&leaf)?;
            }
        }
    }
    Ok(writers
        .into_iter()
        .map(|w| w.close())
        .collect::<parquet::errors::Result<_>>()?)
}

impl Streaming {
    /// A shard with `batch`'s schema (no rows written yet), compressed at `zstd_level`, its
    /// row groups encoded as `row_groups` says.
    pub fn new(batch: &RowBatch, zstd_level: u8, row_groups: RowGroups) -> Result<Streaming> {
        let rb = to_record_batch(&RowBatch {
            input_ids: Vec::new(),
            columns: batch
                .columns
                .iter()
                .map(|(n, c)| (n.clone(), c.empty_like()))
                .collect(),
        })?;
        // ArrowWriter's own setup (the arrow schema in the footer's metadata), then its parts.
        let (file, factory) =
            ArrowWriter::try_new(Vec::new(), rb.schema(), Some(props(zstd_level)?))?
                .into_serialized_writer()?;
        Ok(Streaming {
            file,
            factory,
            schema: rb.schema(),
            group: Vec::new(),
            group_rows: 0,
            groups: 0,
            pending: VecDeque::new(),
            rows: 0,
            tokens: 0,
            waited: std::time::Duration::ZERO,
            encoding: std::time::Duration::ZERO,
            row_groups,
        })
    }

    /// Tests: row groups on the pool or not, whatever the pool's size.
    #[cfg(test)]
    fn on_pool(mut self, on: bool) -> Streaming {
        self.row_groups.on_pool = on;
        self
    }

    /// Append `batch`'s rows; every call but the shard's last must hold a multiple of
    /// [`CHUNK_ROWS`] rows (so chunks stay aligned to the shard's first row).
    pub fn write(&mut self, batch: &RowBatch) -> Result<()> {
        batch.check()?;
        anyhow::ensure!(
            self.rows % CHUNK_ROWS as u64 == 0,
            "parquet shard written after a short chunk ({} rows so far)",
            self.rows
        );
        let rb = to_record_batch(batch)?;
        let n = rb.num_rows();
        let mut at = 0;
        while at < n {
            // A chunk never crosses a row group's end (ArrowWriter splits it there too).
            let len = CHUNK_ROWS.min(n - at).min(ROW_GROUP_ROWS - self.group_rows);
            self.group.push(rb.slice(at, len));
            self.group_rows += len;
            at += len;
            if self.group_rows == ROW_GROUP_ROWS {
                self.dispatch()?;
            }
        }
        self.rows += n as u64;
        self.tokens += batch.tokens();
        Ok(())
    }

    /// Hand the filled row group to the pool; splice finished groups into the file in order.
    fn dispatch(&mut self) -> Result<()> {
        let chunks = std::mem::take(&mut self.group);
        self.group_rows = 0;
        let writers = self.factory.create_column_writers(self.groups)?;
        self.groups += 1;
        let (tx, rx) = sync_channel(1);
        if rayon::current_thread_index().is_some() || !self.row_groups.on_pool {
            // Already on the pool (a caller's parallel loop): blocking here on pool jobs
            // could starve it; encode inline. A small pool: see [`RowGroups::on_pool`].
            let _ = tx.send(encode_timed(&self.schema, writers, &chunks));
        } else {
            let schema = self.schema.clone();
            rayon::spawn(move || {
                let _ = tx.send(encode_timed(&schema, writers, &chunks));
            });
        }
        self.pending.push_back(rx);
        // Splice what is done; wait only while too many groups are in flight.
        let limit = self.row_groups.pending;
        while let Some(front) = self.pending.front() {
            match front.try_recv() {
                Ok(ready) => {
                    self.pending.pop_front();
                    self.splice(ready)?;
                }
                Err(TryRecvError::Empty) if self.pending.len() > limit => self.splice_oldest()?,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => bail!("a row group encoder stopped"),
            }
        }
        Ok(())
    }

    /// Wait for the oldest row group in flight (timed in [`Self::waited`]) and splice it.
    fn splice_oldest(&mut self) -> Result<()> {
        let Some(rx) = self.pending.pop_front() else {
            return Ok(());
        };
        let t = std::time::Instant::now();
        let encoded = rx
            .recv()
            .map_err(|_| anyhow!("a row group encoder stopped"))?;
        self.waited += t.elapsed();
        self.splice(encoded)
    }

    /// Append one encoded row group to the file.
    fn splice(&mut self, (chunks, took): Encoded) -> Result<()> {
        self.encoding += took;
        let chunks = chunks?;
        let mut rg = self.file.next_row_group()?;
        for c in chunks {
            c.append_to_row_group(&mut rg)?;
        }
        rg.close()?;
        Ok(())
    }

    /// Time this shard's writer has waited so far for row groups encoding on the pool.
    pub fn waited(&self) -> std::time::Duration {
        self.waited
    }

    /// Time the row groups spliced so far took to encode and compress (summed over threads).
    pub fn encoding(&self) -> std::time::Duration {
        self.encoding
    }

    /// Encode the last (short) row group and splice every group still in flight (what
    /// [`Self::finish`] does first; call it before to read the final [`Self::waited`] and
    /// [`Self::encoding`]).
    pub fn drain(&mut self) -> Result<()> {
        if self.group_rows > 0 {
            self.dispatch()?;
        }
        while !self.pending.is_empty() {
            self.splice_oldest()?;
        }
        Ok(())
    }

    /// The complete file's bytes, its rows and tokens.
    pub fn finish(mut self) -> Result<(Vec<u8>, u64, u64)> {
        self.drain()?;
        let (rows, tokens) = (self.rows, self.tokens);
        Ok((self.file.into_inner()?, rows, tokens))
    }

    /// The complete file as shard number `n`.
    pub fn into_shard(self, n: usize) -> Result<EncodedShard> {
        let (bytes, rows, tokens) = self.finish()?;
        Ok(EncodedShard {
            files: vec![(shard_name(n), bytes)],
            rows,
            tokens,
            mds: None,
        })
    }
}

/// Encode the batch as a complete parquet file in memory at `zstd_level` (deterministic bytes,
/// whatever `row_groups` says).
pub fn encode(batch: &RowBatch, zstd_level: u8, row_groups: RowGroups) -> Result<Vec<u8>> {
    let mut s = Streaming::new(batch, zstd_level, row_groups)?;
    s.write(batch)?;
    Ok(s.finish()?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Row groups on the pool, a few in flight (the tests pick inline with `on_pool`).
    const RG: RowGroups = RowGroups {
        on_pool: true,
        pending: 4,
    };
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::UInt32Type;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    /// The bytes of one serial `ArrowWriter` encoding, fed in [`CHUNK_ROWS`] chunks.
    fn serial_bytes(batch: &RowBatch) -> Vec<u8> {
        let rb = to_record_batch(batch).unwrap();
        let mut w = ArrowWriter::try_new(Vec::new(), rb.schema(), Some(props(ZSTD_LEVEL).unwrap()))
            .unwrap();
        let mut at = 0;
        while at < rb.num_rows() {
            let len = CHUNK_ROWS.min(rb.num_rows() - at);
            w.write(&rb.slice(at, len)).unwrap();
            at += len;
        }
        w.into_inner().unwrap()
    }

    /// Rows `a..b` of a batch.
    fn slice(b: &RowBatch, a: usize, e: usize) -> RowBatch {
        RowBatch {
            input_ids: b.input_ids[a..e].to_vec(),
            columns: b
                .columns
                .iter()
                .map(|(n, c)| {
                    let c = match c {
                        Column::U32List(v) => Column::U32List(v[a..e].to_vec()),
                        Column::U32(v) => Column::U32(v[a..e].to_vec()),
                        Column::Str(v) => Column::Str(v[a..e].to_vec()),
                    };
                    (n.clone(), c)
                })
                .collect(),
        }
    }

    #[test]
    fn parallel_row_groups_give_the_serial_bytes() {
        // Three full row groups and a short one, rows of varying length.
        let n = 3 * ROW_GROUP_ROWS + 100;
        let rows: Vec<Vec<u32>> = (0..n as u32)
            .map(|r| {
                (0..(8 + r % 13))
                    .map(|t| r.wrapping_mul(2654435761) ^ t)
                    .collect()
            })
            .collect();
        let batch = RowBatch {
            input_ids: rows.clone(),
            columns: vec![
                (
                    "source".into(),
                    Column::Str(rows.iter().map(|r| format!("s{}", r[0] % 5)).collect()),
                ),
                ("n".into(), Column::U32(rows.iter().map(|r| r[1]).collect())),
            ],
        };
        let serial = serial_bytes(&batch);
        assert_eq!(
            encode(&batch, ZSTD_LEVEL, RG).unwrap(),
            serial,
            "parallel encoding from a plain thread"
        );
        // On the pool or on this thread (a small pool's way), whatever this machine's cores.
        for on in [true, false] {
            let mut s = Streaming::new(&batch, ZSTD_LEVEL, RG).unwrap().on_pool(on);
            s.write(&batch).unwrap();
            assert_eq!(
                s.finish().unwrap().0,
                serial,
                "row groups on the pool: {on}"
            );
        }
        // From inside the pool (encoded inline there).
        let inline = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap()
            .install(|| encode(&batch, ZSTD_LEVEL, RG).unwrap());
        assert_eq!(inline, serial, "encoding on a pool thread");
        // Streamed in odd multiples of CHUNK_ROWS that straddle row groups.
        let mut s = Streaming::new(&batch, ZSTD_LEVEL, RG).unwrap();
        let mut at = 0;
        for k in [3usize, 17, 1, 20] {
            let len = k * CHUNK_ROWS;
            s.write(&slice(&batch, at, at + len)).unwrap();
            at += len;
        }
        s.write(&slice(&batch, at, n)).unwrap();
        assert_eq!(s.finish().unwrap().0, serial, "streamed across row groups");
        let meta = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(serial)).unwrap();
        assert_eq!(meta.metadata().num_row_groups(), 4);
    }

    #[test]
    fn streamed_chunks_give_the_bytes_of_one_encoding() {
        let rows: Vec<Vec<u32>> = (0..300u32)
            .map(|r| (0..16).map(|t| r * 31 + t * 7).collect())
            .collect();
        let batch = |rs: &[Vec<u32>]| RowBatch {
            input_ids: rs.to_vec(),
            columns: vec![(
                "source".into(),
                Column::Str(rs.iter().map(|r| format!("s{}", r[0] % 3)).collect()),
            )],
        };
        let whole = encode(&batch(&rows), ZSTD_LEVEL, RG).unwrap();
        let mut s = Streaming::new(&batch(&rows[..1]), ZSTD_LEVEL, RG).unwrap();
        for c in rows[..4 * CHUNK_ROWS].chunks(CHUNK_ROWS) {
            s.write(&batch(c)).unwrap();
        }
        s.write(&batch(&rows[4 * CHUNK_ROWS..])).unwrap();
        let (bytes, n, tokens) = s.finish().unwrap();
        assert_eq!((n, tokens), (300, 300 * 16));
        assert!(bytes == whole, "streamed shard differs from one encoding");
        // A short chunk may only be the last.
        let mut s = Streaming::new(&batch(&rows[..1]), ZSTD_LEVEL, RG).unwrap();
        s.write(&batch(&rows[..10])).unwrap();
        assert!(s.write(&batch(&rows[..10])).is_err());
    }

    #[test]
    fn roundtrip() {
        let batch = RowBatch {
            input_ids: vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8]],
            columns: vec![
                (
                    "doc_offsets".into(),
                    Column::U32List(vec![vec![0, 2, 4], vec![0, 4]]),
                ),
                ("source".into(), Column::Str(vec!["a".into(), "b".into()])),
            ],
        };
        let bytes = encode(&batch, ZSTD_LEVEL, RG).unwrap();
        assert_eq!(
            bytes,
            encode(&batch, ZSTD_LEVEL, RG).unwrap(),
            "deterministic"
        );
        let r = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
            .unwrap()
            .build()
            .unwrap();
        let rbs: Vec<_> = r.map(|b| b.unwrap()).collect();
        let rb = &rbs[0];
        let ids = rb.column(0).as_list::<i32>();
        assert_eq!(ids.len(), 2);
        let v = ids.value(1);
        assert_eq!(v.as_primitive::<UInt32Type>().values(), &[5, 6, 7, 8]);
        let src = rb.column_by_name("source").unwrap().as_string::<i32>();
        assert_eq!(src.value(1), "b");
    }

    /// `--zstd-level` reaches the pages: the levels' outputs differ, and each reads back to the
    /// same rows (on a batch this small, level 19 need not be the smaller file).
    #[test]
    fn the_zstd_level_is_the_pages_level() {
        let row: Vec<u32> = (0..4096u32).map(|i| (i * 7919) % 1000).collect();
        let batch = RowBatch {
            input_ids: vec![row.clone(); 64],
            columns: Vec::new(),
        };
        let fast = encode(&batch, 1, RG).unwrap();
        let small = encode(&batch, 19, RG).unwrap();
        assert_ne!(fast, small, "the level changed nothing");
        for bytes in [fast, small] {
            let r = ParquetRecordBatchReaderBuilder::try_new(bytes::Bytes::from(bytes))
                .unwrap()
                .build()
                .unwrap();
            let rows: usize = r
                .map(|b| {
                    let b = b.unwrap();
                    let ids = b.column(0).as_list::<i32>();
                    for k in 0..ids.len() {
                        assert_eq!(ids.value(k).as_primitive::<UInt32Type>().values(), &row[..]);
                    }
                    ids.len()
                })
                .sum();
            assert_eq!(rows, 64);
        }
    }
}
