//! One top-level JSON array of objects (MetaMathQA's 400 MB `MetaMathQA-395K.json`), parsed
//! element by element (through [`super::records`]): memory holds one element, never the file.
//! Errors name the element index (the row) and serde_json's line/column.

use std::io::Read;

use anyhow::Result;

use super::records::{self, Layout};
use super::{render_json, Bound, Sink, Template};

/// Rows of a JSON array from any reader (a Hub file read by range with `--stream`).
pub fn read_from(
    input: impl Read,
    name: &str,
    row_max: Bound,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()> {
    records::for_each(
        input,
        name,
        Layout::Array,
        row_max,
        start_row,
        &mut |row, v| {
            let o = render_json(tpl, &v).map_err(|e| anyhow::anyhow!("{name}: row {row}: {e}"))?;
            sink(row, o)
        },
    )
}
