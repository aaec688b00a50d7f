//! Why one JSON record reader: pack (`.json` / `.jsonl` inputs), inspect and audit
//! (`distilled.json`, `prompts.jsonl`), decontam's benchmark files and lineage all read "a JSON
//! array of objects, or one object per line", and each must hold one record at a time, never
//! the file, and refuse a record over its bound *while* reading it.
//!
//! [`for_each`] streams either [`Layout`] from any reader, calling back with `(row, object)`:
//! the row is the 0-based array element or line number (blank lines are counted, never
//! records). A record over the [`Bound`] ends the read with an error naming the file, the row,
//! the limit and the flag that raises it, after reading at most the limit (plus one byte).

use std::cell::RefCell;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use anyhow::{anyhow, Result};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde_json::Value;

use super::{Sink, Template};
use crate::bounded::{Bound, Capped, Counter};

/// How records lie in a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One top-level JSON array of objects.
    Array,
    /// One object per line (JSON Lines).
    Lines,
}

/// A JSON input in one layout, each record bounded: the [`super::RowReader`] of `.json` and
/// `.jsonl` files.
pub struct Json(pub Layout, pub Bound);

impl super::RowReader for Json {
    fn values(&self, at: super::RowsOf, f: &mut OnRecord) -> Result<()> {
        let input = open(at.path, at.name)?;
        for_each(input, at.name, self.0, self.1, at.start_row, f)
    }

    fn rendered(&self, at: super::RowsOf, tpl: &Template, sink: &mut Sink) -> Result<()> {
        let input = open(at.path, at.name)?;
        rendered(input, at.name, self.0, self.1, tpl, at.start_row, sink)
    }
}

/// What a scan hands on: a record, or (a [`Bound`] that skips) a JSON Lines row over the
/// bound, read past without being held, and why.
enum Event {
    Record(Value),
    Oversize(String),
}

/// The record callback: `(row, object)`.
pub type OnRecord<'a> = dyn FnMut(u64, Value) -> Result<()> + 'a;

/// A file's records as a stream (plain, `.gz` or `.zst`), opened as a regular file only.
pub fn open(path: &Path, name: &str) -> Result<Box<dyn Read + Send>> {
    super::codec::open(path, name)
}

/// The layout of `path` from its content: an array when its first non-blank byte is `[`.
pub fn sniff(path: &Path, name: &str) -> Result<Layout> {
    let mut r = BufReader::new(open(path, name)?);
    loop {
        let buf = r.fill_buf().map_err(|e| anyhow!("{name}: reading: {e}"))?;
        let Some(&b) = buf.first() else {
            return Ok(Layout::Lines);
        };
        if b.is_ascii_whitespace() {
            r.consume(1);
            continue;
        }
        return Ok(if b == b'[' {
            Layout::Array
        } else {
            Layout::Lines
        });
    }
}

/// Every record of `path` (its layout sniffed), from `start_row` on.
pub fn for_each_in(
    path: &Path,
    name: &str,
    bound: Bound,
    start_row: u64,
    f: &mut OnRecord,
) -> Result<()> {
    let layout = sniff(path, name)?;
    for_each(open(path, name)?, name, layout, bound, start_row, f)
}

/// Stream the records of `input` (`name` in errors) laid out as `layout`, from `start_row`.
pub fn for_each(
    input: impl Read,
    name: &str,
    layout: Layout,
    bound: Bound,
    start_row: u64,
    f: &mut OnRecord,
) -> Result<()> {
    scan(
        input,
        name,
        layout,
        bound,
        start_row,
        &mut |row, e| match e {
            Event::Record(v) => f(row, v),
            Event::Oversize(why) => Err(anyhow!("{name}: {why}")),
        },
    )
}

fn scan(
    input: impl Read,
    name: &str,
    layout: Layout,
    bound: Bound,
    start_row: u64,
    f: &mut dyn FnMut(u64, Event) -> Result<()>,
) -> Result<()> {
    let at = Scan {
        name,
        bound,
        start_row,
    };
    match layout {
        Layout::Lines => lines(input, at, f),
        Layout::Array => array(input, at, &mut |row, v| f(row, Event::Record(v))),
    }
}

/// What both layouts' readers are told: the name in errors, the record bound, the first row.
struct Scan<'a> {
    name: &'a str,
    bound: Bound,
    start_row: u64,
}

/// [`for_each`], each record rendered by `tpl` into `sink`: pack's JSON array and JSON lines
/// inputs, local or read from the Hub by range (`--stream`).
pub fn rendered(
    input: impl Read,
    name: &str,
    layout: Layout,
    bound: Bound,
    tpl: &Template,
    start_row: u64,
    sink: &mut Sink,
) -> Result<()> {
    scan(
        input,
        name,
        layout,
        bound,
        start_row,
        &mut |row, e| match e {
            Event::Record(v) => super::render_row(name, tpl, sink, row, &v),
            Event::Oversize(why) => sink(row, super::Outcome::Oversize(why)),
        },
    )
}

/// Consume the rest of the current line (through its `\n`) without holding it.
fn skip_line(r: &mut impl BufRead, name: &str, row: u64) -> Result<()> {
    loop {
        let buf = r
            .fill_buf()
            .map_err(|e| anyhow!("{name}: reading line {}: {e}", row + 1))?;
        if buf.is_empty() {
            return Ok(());
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                r.consume(i + 1);
                return Ok(());
            }
            None => {
                let n = buf.len();
                r.consume(n);
            }
        }
    }
}

fn lines(input: impl Read, at: Scan, f: &mut dyn FnMut(u64, Event) -> Result<()>) -> Result<()> {
    let (name, bound, start_row) = (at.name, at.bound, at.start_row);
    let mut r = BufReader::with_capacity(1 << 20, input);
    let mut line = Vec::new();
    let mut row = 0u64;
    loop {
        line.clear();
        let n = (&mut r)
            .take(bound.limit.saturating_add(1))
            .read_until(b'\n', &mut line)
            .map_err(|e| anyhow!("{name}: reading line {}: {e}", row + 1))?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && n as u64 > bound.limit {
            let why = bound.message(&format!("row {row} (line {})", row + 1));
            if !bound.skip {
                return Err(anyhow!("{name}: {why}"));
            }
            skip_line(&mut r, name, row)?;
            if row >= start_row {
                f(row, Event::Oversize(why))?;
            }
            row += 1;
            continue;
        }
        if row >= start_row && !line.iter().all(|b| b.is_ascii_whitespace()) {
            let v: Value = serde_json::from_slice(&line).map_err(|e| {
                anyhow!("{name}: row {row} (line {}): malformed JSON: {e}", row + 1)
            })?;
            if !v.is_object() {
                return Err(anyhow!(
                    "{name}: row {row} (line {}): not a JSON object",
                    row + 1
                ));
            }
            f(row, Event::Record(v))?;
        }
        row += 1;
    }
}

struct Elements<'a, 'b> {
    start_row: u64,
    f: &'a mut OnRecord<'b>,
    /// Index of the element being parsed.
    row: &'a RefCell<u64>,
    /// Bytes read for the element being parsed (reset before each).
    count: Counter,
    /// The callback's own error, carried through serde.
    failure: &'a RefCell<Option<anyhow::Error>>,
}

impl<'de> Visitor<'de> for Elements<'_, '_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "a JSON array of objects")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        loop {
            let row = *self.row.borrow();
            self.count.reset();
            if row < self.start_row {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(());
                }
            } else {
                match seq.next_element::<Value>()? {
                    None => return Ok(()),
                    Some(v) => {
                        if !v.is_object() {
                            *self.failure.borrow_mut() =
                                Some(anyhow!("element is not an object (found {})", kind(&v)));
                            return Err(serde::de::Error::custom("record"));
                        }
                        if let Err(e) = (self.f)(row, v) {
                            *self.failure.borrow_mut() = Some(e);
                            return Err(serde::de::Error::custom("record"));
                        }
                    }
                }
            }
            *self.row.borrow_mut() += 1;
        }
    }
}

impl<'de> DeserializeSeed<'de> for Elements<'_, '_> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn array(input: impl Read, at: Scan, f: &mut OnRecord) -> Result<()> {
    let (name, bound, start_row) = (at.name, at.bound, at.start_row);
    let capped = Capped::new(BufReader::with_capacity(1 << 20, input), bound, "");
    let (count, over) = (capped.counter(), capped.over_flag());
    let mut de = serde_json::Deserializer::from_reader(capped);
    let row = RefCell::new(0u64);
    let failure = RefCell::new(None);
    let seed = Elements {
        start_row,
        f,
        row: &row,
        count: count.clone(),
        failure: &failure,
    };
    let res = seed.deserialize(&mut de);
    let row = row.into_inner();
    if let Some(e) = failure.into_inner() {
        if super::is_stop(&e) {
            return Err(e);
        }
        return Err(e.context(format!("{name}: row {row} (array element)")));
    }
    if over.get() {
        return Err(anyhow!(
            "{name}: {}",
            bound.message(&format!("row {row} (array element)"))
        ));
    }
    match res {
        Ok(()) => {
            count.reset();
            de.end()
                .map_err(|e| anyhow!("{name}: trailing data after the JSON array: {e}"))
        }
        Err(e) => Err(anyhow!(
            "{name}: row {row} (array element): malformed JSON: {e}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &[u8], layout: Layout, limit: u64) -> Result<Vec<(u64, Value)>> {
        let mut got = vec![];
        for_each(
            text,
            "f",
            layout,
            Bound::new(limit, "--max-x"),
            0,
            &mut |r, v| {
                got.push((r, v));
                Ok(())
            },
        )?;
        Ok(got)
    }

    #[test]
    fn both_layouts_stream_and_refuse_an_oversized_record() {
        let l = all(b"{\"a\":1}\n\n{\"a\":22}\n", Layout::Lines, 9).unwrap();
        assert_eq!(l.iter().map(|x| x.0).collect::<Vec<_>>(), vec![0, 2]);
        let e = all(b"{\"a\":1}\n{\"a\":\"long\"}\n", Layout::Lines, 9).unwrap_err();
        let m = format!("{e}");
        assert!(m.contains("row 1 (line 2)") && m.contains("--max-x"), "{m}");
        let a = all(b"[{\"a\":1}, {\"a\":2}]", Layout::Array, 9).unwrap();
        assert_eq!(a.len(), 2);
        let e = all(b"[{\"a\":1}, {\"a\":\"longer\"}]", Layout::Array, 10).unwrap_err();
        let m = format!("{e}");
        assert!(
            m.contains("row 1 (array element)") && m.contains("--max-x"),
            "{m}"
        );
        let e = all(b"[1]", Layout::Array, 10).unwrap_err();
        assert!(format!("{e:#}").contains("not an object"), "{e:#}");
    }
}
