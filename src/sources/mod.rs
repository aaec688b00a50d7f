//! Streaming readers: each input format turns one file into rows rendered by the source's
//! text template, in file order, with bounded memory — never a whole file in memory.
//!
//! One module per format ([`parquet`], [`json_array`], [`jsonl`]); [`template`] renders a row;
//! [`codec`] reads `.gz` / `.zst` forms of any of them; [`files`] expands `--input` paths and
//! local manifest sources into files; [`local`] pins local manifest sources.
//! [`parquet`] decodes a file's row groups on several threads when it has several
//! (`parquet_par`), delivering rows in file order all the same.
//! Every reader calls a sink with `(row, Outcome)` for each row from `start_row` on (rows are
//! 0-based: parquet row, JSON array element, JSONL line). Errors name the file and the row.
//! A sink may stop the read early by returning [`Stop`].

pub mod codec;
pub mod files;
pub mod json_array;
pub mod jsonl;
pub mod local;
pub mod parquet;
mod parquet_par;
pub mod template;

use std::path::Path;

use anyhow::Result;

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

/// Read `path` (shown as `name` in errors) in `format`, calling `sink` for every row from
/// `start_row` on. Returns normally at end of file or when the sink returned [`Stop`].
pub fn read_rows(
    path: &Path,
    name: &str,
    format: Format,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()> {
    let r = match format {
        Format::Parquet => parquet::read(path, name, tpl, start_row, sink),
        Format::Json => json_array::read(path, name, tpl, start_row, sink),
        Format::Jsonl => jsonl::read(path, name, tpl, start_row, sink),
    };
    match r {
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

/// Render one JSON object row.
pub(crate) fn render_json(tpl: &Template, obj: &serde_json::Value) -> Outcome {
    let n = tpl.fields().len();
    let mut scratch: Vec<Option<String>> = vec![None; n];
    // Two passes so the borrows of `scratch` stay disjoint.
    let mut owned: Vec<Option<String>> = Vec::with_capacity(n);
    for (f, s) in tpl.fields().iter().zip(scratch.iter_mut()) {
        owned.push(json_field(obj, f, s).map(str::to_string));
    }
    let vals: Vec<Option<&str>> = owned.iter().map(|o| o.as_deref()).collect();
    tpl.render(&vals)
}
