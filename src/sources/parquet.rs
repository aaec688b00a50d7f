//! Parquet input: record batches with column projection (only the template's columns),
//! columns found by name (cosmopedia's order differs between files), nested struct fields
//! (`train.question`), Utf8 / LargeUtf8 / Utf8View strings. Memory is bounded by one row
//! group's projected column chunk plus one small batch. A file is read on several threads
//! where it has pieces enough ([`super::parquet_par`]), else serially; a Hub file streamed by
//! HTTP Range ([`read_async`]) decodes its batches the same way ([`super::parquet_batch`]).

use std::path::Path;

use anyhow::{anyhow, Context, Result};

use super::parquet_batch::{emit_batch, projection, read_serial, BATCH_ROWS};
use super::{RowsOf, Sink, Template};

/// The parquet [`super::RowReader`]: rendered straight from the Arrow columns (no JSON
/// values) for pack; as JSON objects for the other readers. A compressed file's temporary
/// copy is bounded by the first field; the second says how many threads decode its pieces.
pub struct Parquet(pub super::Bound, pub super::Decoding);

impl super::RowReader for Parquet {
    fn values(&self, at: RowsOf, f: &mut super::records::OnRecord) -> Result<()> {
        let (name, start_row) = (at.name, at.start_row);
        let plain = super::codec::plain_file(at.path, name, self.0)?;
        let mut row = 0u64;
        for b in crate::shards::guarded::open(plain.path())? {
            let b = b.with_context(|| format!("decoding {name}"))?;
            let mut vals = Vec::with_capacity(b.num_rows());
            super::columns::batch_rows(&b, &mut vals);
            for v in vals {
                if row >= start_row {
                    f(row, v)?;
                }
                row += 1;
            }
        }
        Ok(())
    }

    fn rendered(&self, at: RowsOf, tpl: &Template, sink: &mut Sink) -> Result<()> {
        // A `.parquet.gz` / `.parquet.zst` is read from a decompressed temporary copy.
        let plain = super::codec::plain_file(at.path, at.name, self.0)?;
        let at = RowsOf {
            path: plain.path(),
            ..at
        };
        crate::util::no_panic(at.name, || {
            // Several row groups (or one large one) from the cursor on: decoded on several
            // threads.
            if let Some(r) = super::parquet_par::try_read(at, self.1, tpl, sink) {
                return r;
            }
            read_serial(at, tpl, sink)
        })
    }
}

/// Number of rows and row groups of a parquet file (footer only).
pub fn row_counts(path: &Path, name: &str) -> Result<Vec<u64>> {
    let b = crate::shards::guarded::builder(path).with_context(|| name.to_string())?;
    Ok(b.metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows() as u64)
        .collect())
}

/// The same rows from an async reader (a Hub file read by HTTP Range with `--stream`): the
/// footer, then only the projected column chunks of the row groups from `start_row` on.
/// A decode error names the file and the first row of the failing batch.
pub fn read_async<R>(
    rt: &tokio::runtime::Runtime,
    input: R,
    name: &str,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()>
where
    R: parquet::arrow::async_reader::AsyncFileReader + Unpin + Send + 'static,
{
    use futures::StreamExt;
    crate::util::no_panic(name, || {
        rt.block_on(async {
            let b = parquet::arrow::ParquetRecordBatchStreamBuilder::new(input)
                .await
                .map_err(|e| anyhow!("{name}: not a readable parquet file ({e})"))?;
            let mask = projection(b.schema(), b.parquet_schema(), tpl, name)?;
            let mut stream = b
                .with_projection(mask)
                .with_batch_size(BATCH_ROWS)
                .with_offset(start_row as usize)
                .build()
                .with_context(|| format!("{name}: reading parquet"))?;
            let mut row = start_row;
            while let Some(b) = stream.next().await {
                let batch = b.map_err(|e| anyhow!("{name}: rows from {row}: {e}"))?;
                emit_batch(&batch, row, name, tpl, sink)?;
                row += batch.num_rows() as u64;
            }
            Ok(())
        })
    })
}
