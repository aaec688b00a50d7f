//! Streaming readers: each input format turns one file into rows rendered by the source's
//! text template, in file order, with bounded memory — never a whole file in memory.
//!
//! [`RowReader`] is the one reader over every input format ([`parquet`], JSON array and JSON
//! lines ([`records`]); [`reader`] picks it): rows as JSON objects ([`RowReader::values`], for
//! decontam, inspect, audit and lineage) or rendered by a template ([`RowReader::rendered`],
//! for pack). [`records`] streams both JSON layouts with a bound per record ([`crate::bounded`]
//! opens regular files only and holds the bounds); [`template`] renders a row;
//! [`codec`] reads `.gz` / `.zst` forms of any of them; [`files`] expands `--input` paths and
//! local manifest sources into files; [`local`] pins local manifest sources.
//! [`parquet`] decodes a file's row groups on several threads when it has several
//! (`parquet_par`), delivering rows in file order all the same.
//! Every reader calls a sink with `(row, Outcome)` for each row from `start_row` on (rows are
//! 0-based: parquet row, JSON array element, JSONL line). Errors name the file and the row.
//! A sink may stop the read early by returning [`Stop`].
//! [`ranged`] reads a remote file (a Hub file, a bucket object) by byte ranges, and
//! [`read_remote_rows`] gives its rows exactly as [`read_rows`] gives a local file's;
//! [`bucket`] expands `--input s3://…` URLs into the objects read that way.

pub mod bucket;
pub mod codec;
pub mod columns;
pub mod files;
pub mod local;
pub mod parquet;
pub mod parquet_batch;
mod parquet_par;
pub mod ranged;
pub mod records;
pub mod template;
pub mod text;

use std::path::Path;

use anyhow::Result;

pub use crate::bounded::{Bound, ReadBounds};
pub use crate::tuning::{Decoding, PIECE_BYTES};
pub use template::{Outcome, Template};

use crate::manifest::Format;

/// Returned by a sink to end a read early (budget reached); not a failure.
#[derive(Debug, Clone, Copy)]
pub struct Stop;

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stopped")
    }
}
impl std::error::Error for Stop {}

/// True when `e` is a [`Stop`].
pub fn is_stop(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Stop>().is_some()
}

/// The row callback.
pub type Sink<'a> = dyn FnMut(u64, Outcome) -> Result<()> + 'a;

/// The default bound on one input row's bytes (a JSON line or array element) before it is
/// parsed: twice pack's default `--max-doc-bytes`, as JSON escapes can double a text.
pub const ROW_BYTES: u64 = 64 << 20;

/// One input format, read from a local file (plain, `.gz` or `.zst`; a regular file only)
/// row by row in file order from `start_row` on, holding one row at a time. Rows are 0-based
/// (parquet row, JSON array element, JSONL line); errors name the file (`name`) and the row.
pub trait RowReader {
    /// Each row as a JSON object.
    fn values(&self, at: RowsOf, f: &mut records::OnRecord) -> Result<()>;

    /// Each row rendered by `tpl` (a format may render without building JSON values).
    fn rendered(&self, at: RowsOf, tpl: &Template, sink: &mut Sink) -> Result<()> {
        self.values(at, &mut |row, v| render_row(at.name, tpl, sink, row, &v))
    }
}

/// Which rows a reader gives: those of the file `path` from `start_row` on; `name` is the
/// file as errors show it.
#[derive(Clone, Copy)]
pub struct RowsOf<'a> {
    pub path: &'a Path,
    pub name: &'a str,
    pub start_row: u64,
}

/// The reader of `format`, holding `bounds` (a JSON row while it is read, a compressed
/// parquet's decompressed copy) and how parquet is decoded.
pub fn reader(format: Format, bounds: ReadBounds, decoding: Decoding) -> Box<dyn RowReader> {
    match format {
        Format::Parquet => Box::new(parquet::Parquet(bounds.decompressed, decoding)),
        Format::Json => Box::new(records::Json(records::Layout::Array, bounds.row)),
        Format::Jsonl => Box::new(records::Json(records::Layout::Lines, bounds.row)),
        Format::Text => Box::new(text::Text {
            paragraphs: bounds.paragraphs,
            bound: bounds.row,
        }),
    }
}

/// Read the rows `at` names in `format`, calling `sink` for each. Returns normally at end of
/// file or when the sink returned [`Stop`].
pub fn read_rows(
    at: RowsOf,
    format: Format,
    bounds: ReadBounds,
    decoding: Decoding,
    tpl: &Template,
    sink: &mut Sink,
) -> Result<()> {
    match reader(format, bounds, decoding).rendered(at, tpl, sink) {
        Err(e) if is_stop(&e) => Ok(()),
        r => r,
    }
}

/// Which rows of a remote file [`read_remote_rows`] gives: `file`'s from `start_row` on,
/// its requests awaited on `rt`; `name` is the file as errors show it (its URL).
pub struct RemoteRows<'a> {
    pub rt: &'a tokio::runtime::Runtime,
    pub file: ranged::RangedFile,
    pub name: &'a str,
    pub start_row: u64,
}

/// [`read_rows`] of a remote file read by range on `rt`: a plain parquet file through its
/// footer and projected column chunks; every other format (and a `.parquet.gz` /
/// `.parquet.zst`, which needs random access: decompressed into a temporary copy bounded by
/// `--max-decompressed-bytes`) as a stream of bounded sequential ranges, decompressed as it
/// is read. `name` (the file's URL) names it in errors; its codec comes from that name.
pub fn read_remote_rows(
    at: RemoteRows,
    format: Format,
    bounds: ReadBounds,
    decoding: Decoding,
    tpl: &Template,
    sink: &mut Sink,
) -> Result<()> {
    let RemoteRows {
        rt,
        file,
        name,
        start_row,
    } = at;
    let codec = codec::Codec::of(Path::new(name));
    let stream = || codec::decode(ranged::RangeRead::new(&file, rt), codec, name);
    let r = match format {
        Format::Parquet if codec == codec::Codec::Plain => {
            parquet::read_async(rt, file.clone(), name, tpl, start_row, sink)
        }
        Format::Parquet => {
            let copy = codec::decode_to_temp(stream()?, name, bounds.decompressed)?;
            let at = RowsOf {
                path: &copy.path,
                name,
                start_row,
            };
            parquet::Parquet(bounds.decompressed, decoding).rendered(at, tpl, sink)
        }
        Format::Json | Format::Jsonl => records::rendered(
            stream()?,
            name,
            match format {
                Format::Json => records::Layout::Array,
                _ => records::Layout::Lines,
            },
            bounds.row,
            tpl,
            start_row,
            sink,
        ),
        Format::Text => text::for_each(
            stream()?,
            name,
            bounds.paragraphs,
            bounds.row,
            start_row,
            &mut |row, v| render_row(name, tpl, sink, row, &v),
        ),
    };
    match r {
        Err(e) if is_stop(&e) => Ok(()),
        r => r,
    }
}

/// Every row of `path` as a JSON object, in the format its name says; `Err` naming the file
/// for an unknown format (exit 2).
pub fn read_values(path: &Path, bounds: ReadBounds, f: &mut records::OnRecord) -> Result<()> {
    let name = path.display().to_string();
    let format = files::format_of_name(path).ok_or_else(|| {
        crate::error::usage(format!(
            "{name}: unknown format (expected .parquet, .json, .jsonl or .txt, optionally .gz or .zst)"
        ))
    })?;
    let at = RowsOf {
        path,
        name: &name,
        start_row: 0,
    };
    match reader(format, bounds, Decoding::SERIAL).values(at, f) {
        Err(e) if is_stop(&e) => Ok(()),
        r => r,
    }
}

/// Look up a (nested) field in a JSON object and give its text: strings as they are,
/// numbers/bools as JSON, objects/arrays as compact JSON; null or missing as `None`.
pub(crate) fn json_field<'a>(
    obj: &'a serde_json::Value,
    path: &[String],
    scratch: &'a mut Option<String>,
) -> Option<&'a str> {
    let mut v = obj;
    for p in path {
        v = v.get(p)?;
    }
    match v {
        serde_json::Value::Null => None,
        serde_json::Value::String(s) => Some(s.as_str()),
        other => {
            *scratch = Some(other.to_string());
            scratch.as_deref()
        }
    }
}

/// Row `row` of `name` (a JSON object) rendered by `tpl` into `sink`; a render error names
/// the row.
pub(crate) fn render_row(
    name: &str,
    tpl: &Template,
    sink: &mut Sink,
    row: u64,
    v: &serde_json::Value,
) -> Result<()> {
    let o = render_json(tpl, v).map_err(|e| anyhow::anyhow!("{name}: row {row}: {e}"))?;
    sink(row, o)
}

/// Render one JSON object row. With a strict template (own data) an absent field is
/// [`Outcome::Missing`] and a value that is not a string (nor null) an error.
pub(crate) fn render_json(tpl: &Template, obj: &serde_json::Value) -> Result<Outcome> {
    if tpl.is_strict() {
        if let Some(o) = strict_check(tpl, obj)? {
            return Ok(o);
        }
    }
    let n = tpl.fields().len();
    let mut scratch: Vec<Option<String>> = vec![None; n];
    // Two passes so the borrows of `scratch` stay disjoint.
    let mut owned: Vec<Option<String>> = Vec::with_capacity(n);
    for (f, s) in tpl.fields().iter().zip(scratch.iter_mut()) {
        owned.push(json_field(obj, f, s).map(str::to_string));
    }
    let vals: Vec<Option<&str>> = owned.iter().map(|o| o.as_deref()).collect();
    Ok(tpl.render(&vals))
}

/// A strict template's verdict on a row before rendering: `Missing` naming the first absent
/// field and the fields the row has there, an error for a non-string value, else `None`.
fn strict_check(tpl: &Template, obj: &serde_json::Value) -> Result<Option<Outcome>> {
    for path in tpl.fields() {
        let mut v = obj;
        for (k, p) in path.iter().enumerate() {
            match v.get(p) {
                Some(x) => v = x,
                None => {
                    let keys: Vec<String> = v
                        .as_object()
                        .map(|m| m.keys().take(20).map(|k| format!("{k:?}")).collect())
                        .unwrap_or_default();
                    let has = if keys.is_empty() {
                        "none".to_string()
                    } else {
                        keys.join(", ")
                    };
                    let at = path[..=k].join(".");
                    return Ok(Some(Outcome::Missing(format!(
                        "no field {at:?} (fields present: {has})"
                    ))));
                }
            }
        }
        match v {
            serde_json::Value::String(_) | serde_json::Value::Null => {}
            other => anyhow::bail!(
                "field {:?} is {}, not text; name a string field",
                path.join("."),
                records::kind(other)
            ),
        }
    }
    Ok(None)
}
