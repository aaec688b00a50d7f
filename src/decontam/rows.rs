//! Benchmark rows as JSON values, whatever their source format: parquet record batches
//! (strings, integers, floats, booleans, lists, structs) or JSON lines / a JSON array; and the
//! `text` template of a manifest source (`{question}\n{choices}`, nested `{train.question}`)
//! rendered over them, lists joined by newlines.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Float64Type};
use serde_json::{Map, Value};

use crate::mcq::columns::{int_at, str_at};

fn value_at(col: &dyn Array, i: usize) -> Value {
    if col.is_null(i) {
        return Value::Null;
    }
    if let Some(s) = str_at(col, i) {
        return Value::String(s.to_string());
    }
    if let Some(n) = int_at(col, i) {
        return Value::from(n);
    }
    match col.data_type() {
        DataType::Boolean => Value::Bool(col.as_boolean().value(i)),
        DataType::Float64 => Value::from(col.as_primitive::<Float64Type>().value(i)),
        DataType::Float32 => Value::from(col.as_primitive::<Float32Type>().value(i) as f64),
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            let v = match col.data_type() {
                DataType::List(_) => col.as_list::<i32>().value(i),
                DataType::LargeList(_) => col.as_list::<i64>().value(i),
                _ => col.as_fixed_size_list().value(i),
            };
            Value::Array((0..v.len()).map(|j| value_at(v.as_ref(), j)).collect())
        }
        DataType::Struct(_) => {
            let s = col.as_struct();
            let mut m = Map::new();
            for (f, c) in s.fields().iter().zip(s.columns()) {
                m.insert(f.name().clone(), value_at(c.as_ref(), i));
            }
            Value::Object(m)
        }
        _ => Value::Null,
    }
}

fn batch_rows(b: &RecordBatch, out: &mut Vec<Value>) {
    let schema = b.schema();
    for i in 0..b.num_rows() {
        let mut m = Map::new();
        for (f, c) in schema.fields().iter().zip(b.columns()) {
            m.insert(f.name().clone(), value_at(c.as_ref(), i));
        }
        out.push(Value::Object(m));
    }
}

/// Every row of a parquet, JSONL or JSON-array file (chosen by extension).
pub fn read_rows(path: &Path) -> Result<Vec<Value>> {
    let name = path.to_string_lossy().to_ascii_lowercase();
    let mut out = Vec::new();
    if name.ends_with(".parquet") {
        for b in crate::shards::guarded::open(path)? {
            batch_rows(
                &b.with_context(|| format!("decoding {}", path.display()))?,
                &mut out,
            );
        }
    } else if name.ends_with(".jsonl") || name.ends_with(".ndjson") {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        for (i, line) in BufReader::new(f).lines().enumerate() {
            let line = line.with_context(|| format!("reading {}", path.display()))?;
            if line.trim().is_empty() {
                continue;
            }
            out.push(
                serde_json::from_str(&line)
                    .with_context(|| format!("{} line {}: not JSON", path.display(), i + 1))?,
            );
        }
    } else if name.ends_with(".json") {
        let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        match serde_json::from_reader(BufReader::new(f))
            .with_context(|| format!("{}: not JSON", path.display()))?
        {
            Value::Array(a) => out = a,
            _ => bail!("{}: expected a JSON array of objects", path.display()),
        }
    } else {
        return Err(crate::error::usage(format!(
            "{}: unknown benchmark format (use .parquet, .jsonl or .json, or a manifest .toml)",
            path.display()
        )));
    }
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

/// Render a manifest `text` template (`{col}`, `{a.b}`) over a row. A placeholder naming a
/// missing field is an error naming it.
pub fn render(template: &str, row: &Value) -> Result<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find('{') {
        out.push_str(&rest[..i]);
        let tail = &rest[i + 1..];
        let end = tail
            .find('}')
            .ok_or_else(|| anyhow!("text template {template:?}: unclosed '{{'"))?;
        let path = &tail[..end];
        let mut v = row;
        for part in path.split('.') {
            v = v.get(part).ok_or_else(|| {
                anyhow!("text template {template:?}: no field {path:?} in the row")
            })?;
        }
        push_value(v, &mut out);
        rest = &tail[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
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
