//! Why every parquet reader of outside bytes opens its file here: parquet-rs still panics on
//! some corrupt pages and footers (a divide by zero on a byte-array page with no values, found
//! by the fuzzer). [`open`] builds the reader under [`crate::util::no_panic`] and [`Batches`]
//! runs each `next()` under it, so such a file ends in an error naming it — never a panic —
//! wherever it is read (sources, mcq, sft shards, decontam, merge).

use std::fs::File;
use std::path::Path;

use anyhow::{Context, Result};
use arrow::array::RecordBatch;
use arrow::error::ArrowError;
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

/// Open `path` as parquet (footer read under the guard); `what` names it in errors.
pub fn builder(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let f = crate::bounded::open_regular(path)?;
    let what = path.display().to_string();
    crate::util::no_panic(&what, || {
        ParquetRecordBatchReaderBuilder::try_new(f)
            .with_context(|| format!("{what}: not a readable parquet file"))
    })
}

/// Build `b` into guarded batches named by `path`.
pub fn build(b: ParquetRecordBatchReaderBuilder<File>, path: &Path) -> Result<Batches> {
    let what = path.display().to_string();
    let inner = crate::util::no_panic(&what, || {
        b.build().with_context(|| format!("reading {what}"))
    })?;
    Ok(Batches {
        inner: Some(inner),
        what,
    })
}

/// Every record batch of `path`, all columns: [`builder`] then [`build`].
pub fn open(path: &Path) -> Result<Batches> {
    build(builder(path)?, path)
}

/// Record batches whose decoder panics come back as one error (then the end).
pub struct Batches {
    inner: Option<ParquetRecordBatchReader>,
    what: String,
}

impl Iterator for Batches {
    type Item = std::result::Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let r = self.inner.as_mut()?;
        match crate::util::no_panic(&self.what, || Ok(r.next())) {
            Ok(item) => item,
            Err(e) => {
                // The reader's state after a panic is unknown: stop here.
                self.inner = None;
                Some(Err(ArrowError::ExternalError(e.into())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fuzzer's corrupt page (tests/fuzz/corpus): parquet-rs panics decoding it.
    fn corrupt() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fuzz/corpus/parquet_footer/byte-array-page-div-by-zero.parquet")
    }

    #[test]
    fn a_decoder_panic_is_an_error_naming_the_file_then_the_end() {
        let p = corrupt();
        // The unguarded reader really panics on it (else this test proves nothing).
        let raw = std::panic::catch_unwind(|| {
            let r = ParquetRecordBatchReaderBuilder::try_new(File::open(corrupt()).unwrap())
                .unwrap()
                .build()
                .unwrap();
            r.count()
        });
        assert!(
            raw.is_err(),
            "parquet-rs no longer panics on the corpus file"
        );
        let mut b = open(&p).unwrap();
        let mut errs = vec![];
        for item in b.by_ref() {
            if let Err(e) = item {
                errs.push(e.to_string());
            }
        }
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(
            errs[0].contains("byte-array-page-div-by-zero.parquet")
                && errs[0].contains("corrupt file"),
            "{}",
            errs[0]
        );
        assert!(b.next().is_none());
    }

    #[test]
    fn not_parquet_is_an_error_naming_the_file() {
        let (_d, p) = crate::testkit::temp_file("x.parquet", b"not parquet at all");
        let e = format!("{:#}", open(&p).err().unwrap());
        assert!(
            e.contains("x.parquet") && e.contains("not a readable parquet"),
            "{e}"
        );
    }
}
