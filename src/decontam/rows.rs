//! Benchmark rows as JSON values, whatever their source format: parquet record batches
//! (strings, integers, floats, booleans, lists, structs) or JSON lines / a JSON array; and the
//! `text` template of a manifest source (`{question}\n{choices}`, nested `{train.question}`)
//! rendered over them, lists joined by newlines.

use std::path::Path;

use anyhow::{anyhow, Result};
use serde_json::Value;

/// The bounds on one benchmark row (a JSON line or array element) while it is read, and on
/// a compressed parquet's decompressed copy.
const BOUNDS: crate::bounded::ReadBounds = crate::bounded::ReadBounds {
    paragraphs: false,
    row: crate::bounded::Bound::new(
        crate::sources::ROW_BYTES,
        "a benchmark row is at most that; no flag raises it",
    ),
    decompressed: crate::sources::codec::TEMP_MAX,
};

/// Every row of a parquet, JSONL or JSON-array file (chosen by extension, optionally `.gz` /
/// `.zst`), through the one [`crate::sources::RowReader`]; a regular file only.
pub fn read_rows(path: &Path) -> Result<Vec<Value>> {
    if crate::sources::files::format_of_name(path).is_none() {
        return Err(crate::error::usage(format!(
            "{}: unknown benchmark format (use .parquet, .jsonl or .json, or a manifest .toml)",
            path.display()
        )));
    }
    let mut out = Vec::new();
    crate::sources::read_values(path, BOUNDS, &mut |_, v| {
        out.push(v);
        Ok(())
    })?;
    Ok(out)
}

fn push_value(v: &Value, out: &mut String) {
    match v {
        Value::Null => {}
        Value::String(s) => out.push_str(s),
        Value::Array(a) => {
            for (k, x) in a.iter().enumerate() {
                if k > 0 {
                    out.push('\n');
                }
                push_value(x, out);
            }
        }
        Value::Object(m) => {
            for (k, x) in m.values().enumerate() {
                if k > 0 {
                    out.push('\n');
                }
                push_value(x, out);
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

/// All string content of a row, fields in order, joined by newlines (for local files).
pub fn all_text(row: &Value) -> String {
    let mut s = String::new();
    push_value(row, &mut s);
    s
}

/// Render a manifest `text` template (`{col}`, `{a.b}`, the escapes of
/// [`crate::sources::Template`], which parses it) over a row, lists joined by newlines. A
/// placeholder naming a missing field is an error naming it.
pub fn render(template: &str, row: &Value) -> Result<String> {
    let tpl = crate::sources::Template::parse(template)?;
    tpl.render_with(|path, out| {
        let mut v = row;
        for part in path {
            v = v.get(part).ok_or_else(|| {
                anyhow!(
                    "text template {template:?}: no field {:?} in the row",
                    path.join(".")
                )
            })?;
        }
        push_value(v, out);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_nested_and_lists() {
        let row = serde_json::json!({"train": {"question": "Q?"}, "choices": ["a", "b"], "n": 3});
        assert_eq!(
            render("{train.question} | {choices} {n}", &row).unwrap(),
            "Q? | a\nb 3"
        );
        assert!(render("{nope}", &row)
            .unwrap_err()
            .to_string()
            .contains("nope"));
        assert_eq!(all_text(&row), "Q?\na\nb\n3");
    }
}
