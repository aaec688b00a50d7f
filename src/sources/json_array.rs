//! One top-level JSON array of objects (MetaMathQA's 400 MB `MetaMathQA-395K.json`), parsed
//! element by element from a buffered reader: memory holds one element, never the file.
//! Errors name the element index (the row) and serde_json's line/column.

use std::cell::RefCell;
use std::fmt;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{anyhow, Result};
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, SeqAccess, Visitor};

use super::{render_json, Sink, Template};

struct Elements<'a, 'b> {
    tpl: &'a Template,
    start_row: u64,
    sink: &'a mut Sink<'b>,
    /// Index of the element being parsed.
    row: &'a RefCell<u64>,
    /// The sink's own error, carried through serde.
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
            if row < self.start_row {
                if seq.next_element::<IgnoredAny>()?.is_none() {
                    return Ok(());
                }
            } else {
                match seq.next_element::<serde_json::Value>()? {
                    None => return Ok(()),
                    Some(v) => {
                        if !v.is_object() {
                            *self.failure.borrow_mut() =
                                Some(anyhow!("element is not an object (found {})", kind(&v)));
                            return Err(serde::de::Error::custom("sink"));
                        }
                        if let Err(e) = (self.sink)(row, render_json(self.tpl, &v)) {
                            *self.failure.borrow_mut() = Some(e);
                            return Err(serde::de::Error::custom("sink"));
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

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

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
    let mut de = serde_json::Deserializer::from_reader(BufReader::with_capacity(1 << 20, input));
    let row = RefCell::new(0u64);
    let failure = RefCell::new(None);
    let seed = Elements {
        tpl,
        start_row,
        sink,
        row: &row,
        failure: &failure,
    };
    let res = seed.deserialize(&mut de);
    if let Some(e) = failure.into_inner() {
        if super::is_stop(&e) {
            return Err(e);
        }
        return Err(e.context(format!("{name}: row {} (array element)", row.into_inner())));
    }
    match res {
        Ok(()) => de
            .end()
            .map_err(|e| anyhow!("{name}: trailing data after the JSON array: {e}")),
        Err(e) => Err(anyhow!(
            "{name}: row {} (array element): malformed JSON: {e}",
            row.into_inner()
        )),
    }
}
