//! JSON Lines input: one object per line, read line by line (through [`super::records`]).
//! Row = 0-based line number; blank lines are no documents. Errors name the line.

use std::io::Read;

use anyhow::Result;

use super::records::{self, Layout};
use super::{render_json, Bound, Sink, Template};

/// Rows of JSON lines from any reader (a Hub file read by range with `--stream`).
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
        Layout::Lines,
        row_max,
        start_row,
        &mut |row, v| {
            let o = render_json(tpl, &v).map_err(|e| anyhow::anyhow!("{name}: row {row}: {e}"))?;
            sink(row, o)
        },
    )
}
