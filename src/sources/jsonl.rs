//! JSON Lines input: one object per line, read line by line. Row = 0-based line number;
//! blank lines are no documents. Errors name the line.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{anyhow, Context, Result};

use super::{render_json, Sink, Template};

pub fn read(
    path: &Path,
    name: &str,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()> {
    // Plain, or `.gz` / `.zst` decompressed as a stream.
    let f = super::codec::open(path, name)?;
    read_from(f, name, tpl, start_row, sink)
}

/// The same over any reader (a local file, or a Hub file read by range with `--stream`).
pub fn read_from(
    input: impl Read,
    name: &str,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()> {
    let mut r = BufReader::with_capacity(1 << 20, input);
    let mut line = Vec::new();
    let mut row = 0u64;
    loop {
        line.clear();
        let n = r
            .read_until(b'\n', &mut line)
            .with_context(|| format!("{name}: reading line {}", row + 1))?;
        if n == 0 {
            return Ok(());
        }
        if row >= start_row && !line.iter().all(|b| b.is_ascii_whitespace()) {
            let v: serde_json::Value = serde_json::from_slice(&line).map_err(|e| {
                anyhow!("{name}: row {row} (line {}): malformed JSON: {e}", row + 1)
            })?;
            if !v.is_object() {
                return Err(anyhow!(
                    "{name}: row {row} (line {}): not a JSON object",
                    row + 1
                ));
            }
            sink(row, render_json(tpl, &v))?;
        }
        row += 1;
    }
}
