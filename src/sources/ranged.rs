//! Why one ranged reader: a Hub file (`pack --stream`, `--input hf://…`) and a bucket object
//! (`--input s3://…`) are both read in place by byte ranges, never downloaded whole. A
//! [`RangeSource`] says how one remote file answers a range; [`RangedFile`] over it is a
//! parquet `AsyncFileReader` (the footer by one request, then only the projected column
//! chunks; the footer's bytes kept for later reads inside them) and, through [`RangeRead`],
//! a sequential `Read` of bounded chunks (JSON, JSON Lines, text, any codec). Both count the
//! bytes and requests they used ([`ReadCount`]), what download.log and the `--json` summary
//! report.

use std::io::Read;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::Result;
use bytes::Bytes;
use futures::future::BoxFuture;
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::AsyncFileReader;
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// Bytes per request for sequential reads (one chunk in memory at a time).
pub const CHUNK: u64 = 8 << 20;
/// Footer prefetch: one request covers the footer of typical files (a larger footer costs
/// one more request). The fetched tail is kept and serves later reads that fall inside it.
const FOOTER_HINT: usize = 16 << 10;

/// One remote file's bytes by range (its own retries, checks and error messages).
pub trait RangeSource: Send + Sync + 'static {
    /// Exactly the bytes `[start, end)` (`end` at most the file's size).
    fn fetch(&self, start: u64, end: u64) -> BoxFuture<'_, Result<Bytes>>;
}

/// Bytes and requests a remote file's reads used.
#[derive(Debug, Default)]
pub struct ReadCount {
    pub bytes: AtomicU64,
    pub requests: AtomicU64,
}

impl ReadCount {
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }
}

/// A remote file of `size` bytes read by range.
#[derive(Clone)]
pub struct RangedFile {
    source: Arc<dyn RangeSource>,
    pub size: u64,
    pub count: Arc<ReadCount>,
    /// The file's last bytes (offset, bytes) once read (at most the footer prefetch).
    tail: Option<(u64, Bytes)>,
}

impl RangedFile {
    pub fn new(source: Arc<dyn RangeSource>, size: u64, count: Arc<ReadCount>) -> RangedFile {
        RangedFile {
            source,
            size,
            count,
            tail: None,
        }
    }

    /// Bytes `[start, end)` (clipped to the size), counted.
    pub async fn range(&self, start: u64, end: u64) -> Result<Bytes> {
        let end = end.min(self.size);
        let b = self.source.fetch(start, end).await?;
        self.count.requests.fetch_add(1, Ordering::Relaxed);
        self.count
            .bytes
            .fetch_add(b.len() as u64, Ordering::Relaxed);
        Ok(b)
    }
}

fn perr(e: anyhow::Error) -> ParquetError {
    ParquetError::General(format!("{e:#}"))
}

impl AsyncFileReader for RangedFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        Box::pin(async move {
            if let Some((off, t)) = self.tail.clone() {
                let tail_end = off + t.len() as u64;
                if range.start >= off && range.end <= tail_end {
                    return Ok(t.slice((range.start - off) as usize..(range.end - off) as usize));
                }
                if range.start < off && range.end > off && range.end <= tail_end {
                    // Only the part before the tail goes over the network.
                    let head = self.range(range.start, off).await.map_err(perr)?;
                    let mut v = Vec::with_capacity((range.end - range.start) as usize);
                    v.extend_from_slice(&head);
                    v.extend_from_slice(&t[..(range.end - off) as usize]);
                    return Ok(Bytes::from(v));
                }
            }
            let b = self.range(range.start, range.end).await.map_err(perr)?;
            if range.end >= self.size && b.len() <= FOOTER_HINT && self.tail.is_none() {
                self.tail = Some((range.start, b.clone()));
            }
            Ok(b)
        })
    }

    fn get_metadata<'a>(
        &'a mut self,
        _options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        Box::pin(async move {
            let size = self.size;
            let md = ParquetMetaDataReader::new()
                .with_prefetch_hint(Some(FOOTER_HINT))
                .load_and_finish(self, size)
                .await?;
            Ok(Arc::new(md))
        })
    }
}

/// A `Read` over a remote file in [`CHUNK`]-sized ranges (one chunk in memory at a time),
/// each range awaited on `rt`.
pub struct RangeRead<'a> {
    file: &'a RangedFile,
    rt: &'a tokio::runtime::Runtime,
    pos: u64,
    buf: Bytes,
}

impl<'a> RangeRead<'a> {
    pub fn new(file: &'a RangedFile, rt: &'a tokio::runtime::Runtime) -> Self {
        RangeRead {
            file,
            rt,
            pos: 0,
            buf: Bytes::new(),
        }
    }
}

impl Read for RangeRead<'_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        if self.buf.is_empty() {
            let size = self.file.size;
            if self.pos >= size {
                return Ok(0);
            }
            let end = (self.pos + CHUNK).min(size);
            self.buf = self
                .rt
                .block_on(self.file.range(self.pos, end))
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            if self.buf.is_empty() {
                return Err(std::io::Error::other(format!(
                    "an empty answer for bytes {}-{end}",
                    self.pos
                )));
            }
            self.pos = end;
        }
        let n = out.len().min(self.buf.len());
        out[..n].copy_from_slice(&self.buf[..n]);
        let _ = self.buf.split_to(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file in memory, answering every range.
    struct Mem(Bytes);

    impl RangeSource for Mem {
        fn fetch(&self, start: u64, end: u64) -> BoxFuture<'_, Result<Bytes>> {
            let b = self.0.slice(start as usize..end as usize);
            Box::pin(async move { Ok(b) })
        }
    }

    #[test]
    fn chunks_in_order_and_the_footer_kept() {
        let data: Vec<u8> = (0..2 * CHUNK as usize + 123)
            .map(|i| (i % 251) as u8)
            .collect();
        let n = data.len() as u64;
        let count = Arc::new(ReadCount::default());
        let f = RangedFile::new(Arc::new(Mem(Bytes::from(data.clone()))), n, count.clone());
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut out = Vec::new();
        RangeRead::new(&f, &rt).read_to_end(&mut out).unwrap();
        assert!(out == data);
        assert_eq!((count.requests(), count.bytes()), (3, n));

        // The file's last bytes, once read, serve reads inside them; a read straddling their
        // start fetches only the part before.
        let mut g = f.clone();
        let at = |a: u64, b: u64| data[a as usize..b as usize].to_vec();
        assert_eq!(
            rt.block_on(g.get_bytes(n - 100..n)).unwrap(),
            at(n - 100, n)
        );
        let (r, b) = (count.requests(), count.bytes());
        assert_eq!(
            rt.block_on(g.get_bytes(n - 50..n - 10)).unwrap(),
            at(n - 50, n - 10)
        );
        assert_eq!((count.requests(), count.bytes()), (r, b));
        assert_eq!(
            rt.block_on(g.get_bytes(n - 150..n - 20)).unwrap(),
            at(n - 150, n - 20)
        );
        assert_eq!((count.requests(), count.bytes()), (r + 1, b + 50));
    }
}
