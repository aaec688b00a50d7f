//! Arrow record batches of a parquet file turned into rendered rows, what the serial, the
//! parallel ([`super::parquet_par`]) and the streamed readers share: the template's columns
//! projected and resolved by name, each batch rendered into the sink, and the serial read.
//!
//! A decode error (e.g. invalid UTF-8) is located exactly: the failing batch is re-read one
//! row at a time so the message names the row.
//!
//! Only text is packed as text: a template field must be a string column (utf8, large_utf8,
//! utf8_view, a dictionary of those) or a binary column holding UTF-8 (each value checked; the
//! first invalid one is named by row). Any other type (int64, list<string>, struct, ...) is
//! refused naming the column and its type, never stringified.

use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::DataType;
use parquet::arrow::ProjectionMask;

use super::{Sink, Template};

/// Rows per record batch: small, because OpenCodeReasoning rows average ~50 KB.
pub(super) const BATCH_ROWS: usize = 256;

fn open(
    path: &Path,
    name: &str,
    tpl: &Template,
    start_row: u64,
    batch_rows: usize,
) -> Result<impl Iterator<Item = std::result::Result<RecordBatch, arrow::error::ArrowError>>> {
    let b = crate::shards::guarded::builder(path).with_context(|| name.to_string())?;
    let mask = projection(b.schema(), b.parquet_schema(), tpl, name)?;
    let b = b
        .with_projection(mask)
        .with_batch_size(batch_rows)
        .with_offset(start_row as usize);
    crate::shards::guarded::build(b, path).with_context(|| name.to_string())
}

/// Only the template's root columns, found by name.
pub(super) fn projection(
    schema: &arrow::datatypes::Schema,
    pschema: &parquet::schema::types::SchemaDescriptor,
    tpl: &Template,
    name: &str,
) -> Result<ProjectionMask> {
    let mut roots = Vec::new();
    for col in tpl.root_columns() {
        match schema.index_of(&col) {
            Ok(i) => roots.push(i),
            Err(_) => {
                let have: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                return Err(anyhow!(
                    "{name}: missing column {col:?} named by the text template (columns: {})",
                    have.join(", ")
                ));
            }
        }
    }
    Ok(ProjectionMask::roots(pschema, roots))
}

/// Resolve a field path in a batch to a Utf8 array plus the arrays whose nulls also null it.
/// `first_row` is the file row of the batch's first row (for errors).
fn resolve(
    batch: &RecordBatch,
    path: &[String],
    name: &str,
    first_row: u64,
) -> Result<(Vec<ArrayRef>, ArrayRef)> {
    let mut chain: Vec<ArrayRef> = Vec::new();
    let mut cur: ArrayRef = batch
        .column_by_name(&path[0])
        .ok_or_else(|| anyhow!("{name}: missing column {:?}", path[0]))?
        .clone();
    for p in &path[1..] {
        let s = cur.as_struct_opt().ok_or_else(|| {
            anyhow!(
                "{name}: column {:?} is not a struct (template field {})",
                cur.data_type(),
                path.join(".")
            )
        })?;
        let child = s
            .column_by_name(p)
            .ok_or_else(|| anyhow!("{name}: missing field {} (template)", path.join(".")))?
            .clone();
        chain.push(cur);
        cur = child;
    }
    let field = path.join(".");
    if !is_text_type(cur.data_type()) {
        return Err(anyhow!(
            "{name}: column {field:?} has type {}, not text (utf8, large_utf8, utf8_view or binary holding UTF-8); name a string column",
            cur.data_type()
        ));
    }
    if let Some((i, e)) = first_invalid_binary(cur.as_ref()) {
        return Err(anyhow!(
            "{name}: row {}: column {field:?} ({}): invalid UTF-8 ({e})",
            first_row + i as u64,
            cur.data_type()
        ));
    }
    let text = match cur.data_type() {
        DataType::Utf8 => cur,
        _ => arrow::compute::cast(&cur, &DataType::Utf8).map_err(|e| {
            anyhow!(
                "{name}: rows from {first_row}: column {field:?} ({}) cannot be read as text: {e}",
                cur.data_type()
            )
        })?,
    };
    Ok((chain, text))
}

/// String types, binary types (checked for UTF-8), and dictionaries of them.
fn is_text_type(t: &DataType) -> bool {
    match t {
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => true,
        DataType::Dictionary(_, v) => is_text_type(v),
        _ => false,
    }
}

/// The first non-null value of a binary array that is not UTF-8: (index, error).
fn first_invalid_binary(a: &dyn Array) -> Option<(usize, std::str::Utf8Error)> {
    fn check<'a>(
        a: &dyn Array,
        get: impl Fn(usize) -> &'a [u8],
    ) -> Option<(usize, std::str::Utf8Error)> {
        (0..a.len()).find_map(|i| {
            if a.is_null(i) {
                return None;
            }
            std::str::from_utf8(get(i)).err().map(|e| (i, e))
        })
    }
    match a.data_type() {
        DataType::Binary => {
            let b = a.as_binary::<i32>();
            check(a, |i| b.value(i))
        }
        DataType::LargeBinary => {
            let b = a.as_binary::<i64>();
            check(a, |i| b.value(i))
        }
        DataType::BinaryView => {
            let b = a.as_binary_view();
            check(a, |i| b.value(i))
        }
        DataType::Dictionary(_, v) if matches!(**v, DataType::Binary | DataType::LargeBinary) => {
            // Check the dictionary's values once; name the first row that uses a bad one.
            let values = arrow::compute::cast(a, v).ok()?;
            first_invalid_binary(values.as_ref())
        }
        _ => None,
    }
}

pub(super) fn emit_batch(
    batch: &RecordBatch,
    first_row: u64,
    name: &str,
    tpl: &Template,
    sink: &mut Sink,
) -> Result<()> {
    let mut cols = Vec::new();
    for f in tpl.fields() {
        cols.push(resolve(batch, f, name, first_row)?);
    }
    let mut vals: Vec<Option<&str>> = vec![None; cols.len()];
    for i in 0..batch.num_rows() {
        for (k, (chain, text)) in cols.iter().enumerate() {
            let null = text.is_null(i) || chain.iter().any(|a| a.is_null(i));
            vals[k] = if null {
                None
            } else {
                Some(text.as_string::<i32>().value(i))
            };
        }
        let out = tpl.render(&vals);
        sink(first_row + i as u64, out)?;
    }
    Ok(())
}

/// The first row whose raw bytes in one of the template's string columns are not UTF-8,
/// read with the low-level column reader (no validation, dictionary pages included).
fn first_invalid_utf8(path: &Path, tpl: &Template) -> Option<(u64, String)> {
    let wanted: Vec<String> = tpl.fields().iter().map(|f| f.join(".")).collect();
    first_invalid_utf8_in(path, &wanted)
}

/// [`first_invalid_utf8`] over the named leaf columns (`a.b` for nested fields; all string
/// leaf columns when `wanted` is empty): (row, what).
pub fn first_invalid_utf8_in(path: &Path, wanted: &[String]) -> Option<(u64, String)> {
    let what = path.display().to_string();
    crate::util::no_panic(&what, || Ok(scan_utf8(path, wanted)))
        .ok()
        .flatten()
}

fn scan_utf8(path: &Path, wanted: &[String]) -> Option<(u64, String)> {
    use parquet::column::reader::ColumnReader;
    use parquet::file::reader::{FileReader, SerializedFileReader};
    let r = SerializedFileReader::new(File::open(path).ok()?).ok()?;
    let mut base = 0u64;
    for g in 0..r.num_row_groups() {
        let rg = r.get_row_group(g).ok()?;
        let rows = rg.metadata().num_rows() as u64;
        for (ci, col) in rg.metadata().schema_descr().columns().iter().enumerate() {
            let cpath = col.path().string();
            let is_text = col.converted_type() == parquet::basic::ConvertedType::UTF8
                || matches!(
                    col.logical_type_ref(),
                    Some(parquet::basic::LogicalType::String)
                );
            let skip = if wanted.is_empty() {
                !is_text
            } else {
                !wanted.contains(&cpath)
            };
            if skip || col.max_rep_level() > 0 {
                continue;
            }
            let Ok(ColumnReader::ByteArrayColumnReader(mut cr)) = rg.get_column_reader(ci) else {
                continue;
            };
            let max_def = col.max_def_level();
            let mut row = base;
            loop {
                let mut defs = Vec::new();
                let mut vals = Vec::new();
                let Ok((recs, _, _)) = cr.read_records(4096, Some(&mut defs), None, &mut vals)
                else {
                    break;
                };
                if recs == 0 {
                    break;
                }
                let mut v = vals.iter();
                for k in 0..recs {
                    let present = max_def == 0 || defs.get(k).copied() == Some(max_def);
                    if present {
                        if let Some(b) = v.next() {
                            if let Err(e) = std::str::from_utf8(b.data()) {
                                return Some((row, format!("column {cpath}: invalid UTF-8 ({e})")));
                            }
                        }
                    }
                    row += 1;
                }
            }
        }
        base += rows;
    }
    None
}

/// Find the exact failing row at or after `from`: invalid UTF-8 by a raw scan, other decode
/// errors by re-reading one row per batch.
pub(super) fn locate_error(
    path: &Path,
    name: &str,
    tpl: &Template,
    from: u64,
    first: &str,
) -> anyhow::Error {
    if first.to_ascii_lowercase().contains("utf") {
        if let Some((row, what)) = first_invalid_utf8(path, tpl) {
            return anyhow!("{name}: row {row}: {what}");
        }
    }
    if let Ok(it) = open(path, name, tpl, from, 1) {
        for (k, b) in it.enumerate() {
            if let Err(e) = b {
                return anyhow!("{name}: row {}: {e}", from + k as u64);
            }
            if k > BATCH_ROWS * 2 {
                break;
            }
        }
    }
    anyhow!("{name}: rows from {from}: {first}")
}

/// The rows from `start_row` on, decoded on this thread.
pub(super) fn read_serial(at: super::RowsOf, tpl: &Template, sink: &mut Sink) -> Result<()> {
    let super::RowsOf {
        path,
        name,
        start_row,
    } = at;
    let mut row = start_row;
    for b in open(path, name, tpl, start_row, BATCH_ROWS)? {
        let batch = match b {
            Ok(b) => b,
            Err(e) => return Err(locate_error(path, name, tpl, row, &e.to_string())),
        };
        emit_batch(&batch, row, name, tpl, sink)?;
        row += batch.num_rows() as u64;
    }
    Ok(())
}
