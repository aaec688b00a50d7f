//! The one reader of safetensors headers, shared by `fetch` (architecture.json), `audit`
//! (teacher-architecture, checkpoints) and `distill` (the teacher's weights): a header is
//! believed only when every tensor's shape × dtype size equals its byte range, the ranges are
//! sorted, non-overlapping and inside the file's data section, and no count wraps.
//!
//! [`parse`] works on the header bytes alone (the fuzz target `safetensors_header` drives it);
//! [`read`] takes them from a file with the header length bounded.

use std::io::Read;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde_json::{Map, Value};

/// Largest safetensors header read (real ones are well under 1 MiB).
pub const MAX_HEADER: u64 = 100 << 20;

/// One tensor entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<u64>,
    /// `[start, end)` within the data section.
    pub start: u64,
    pub end: u64,
    /// Product of the shape (checked).
    pub elements: u64,
}

/// Bits per element of a safetensors dtype; `None` for a name safetensors does not define.
pub fn dtype_bits(dtype: &str) -> Option<u64> {
    Some(match dtype {
        "BOOL" | "U8" | "I8" | "F8_E5M2" | "F8_E4M3" | "F8_E8M0" => 8,
        "I16" | "U16" | "F16" | "BF16" => 16,
        "I32" | "U32" | "F32" => 32,
        "I64" | "U64" | "F64" => 64,
        "F4" => 4,
        "F6_E2M3" | "F6_E3M2" => 6,
        _ => return None,
    })
}

/// Check the header JSON `head` of a file whose data section holds `data_len` bytes; the
/// entries come back sorted by start offset. Errors name the tensor and what disagrees.
pub fn parse(head: &[u8], data_len: u64) -> Result<Vec<Entry>> {
    let v: Map<String, Value> = serde_json::from_slice(head)
        .map_err(|e| anyhow!("safetensors header is not a JSON object ({e})"))?;
    let mut out = Vec::with_capacity(v.len());
    for (name, t) in v {
        if name == "__metadata__" {
            continue;
        }
        out.push(entry(name, &t, data_len)?);
    }
    out.sort_by_key(|e| (e.start, e.end));
    for w in out.windows(2) {
        if w[1].start < w[0].end {
            bail!(
                "tensors `{}` [{}, {}) and `{}` [{}, {}) overlap",
                w[0].name,
                w[0].start,
                w[0].end,
                w[1].name,
                w[1].start,
                w[1].end
            );
        }
    }
    Ok(out)
}

fn entry(name: String, t: &Value, data_len: u64) -> Result<Entry> {
    let bad = |why: String| anyhow!("tensor `{name}`: {why}");
    let dtype = t["dtype"]
        .as_str()
        .ok_or_else(|| bad("no dtype".into()))?
        .to_string();
    let bits = dtype_bits(&dtype).ok_or_else(|| bad(format!("unknown dtype {dtype:?}")))?;
    let shape: Vec<u64> = t["shape"]
        .as_array()
        .ok_or_else(|| bad("no shape".into()))?
        .iter()
        .map(|d| {
            d.as_u64()
                .ok_or_else(|| bad("shape is not a list of sizes".into()))
        })
        .collect::<Result<_>>()?;
    let (start, end) = t["data_offsets"]
        .as_array()
        .filter(|a| a.len() == 2)
        .and_then(|a| Some((a[0].as_u64()?, a[1].as_u64()?)))
        .ok_or_else(|| bad("no data_offsets".into()))?;
    if start > end || end > data_len {
        return Err(bad(format!(
            "data_offsets [{start}, {end}] outside the {data_len}-byte data section"
        )));
    }
    let elements = shape
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d))
        .ok_or_else(|| {
            bad(format!(
                "shape {shape:?} has more elements than a u64 counts"
            ))
        })?;
    let bits_total = elements
        .checked_mul(bits)
        .ok_or_else(|| bad(format!("shape {shape:?} of {dtype} overflows a byte count")))?;
    if bits_total % 8 != 0 || bits_total / 8 != end - start {
        return Err(bad(format!(
            "shape {shape:?} of {dtype} is {} bytes, but data_offsets [{start}, {end}] hold {}",
            if bits_total % 8 == 0 {
                (bits_total / 8).to_string()
            } else {
                format!("{bits_total} bits (not whole")
            },
            end - start
        )));
    }
    Ok(Entry {
        name,
        dtype,
        shape,
        start,
        end,
        elements,
    })
}

/// Read and check the header of the safetensors file `path`: (header length, entries).
pub fn read(path: &Path) -> Result<(u64, Vec<Entry>)> {
    let mut f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    let mut n8 = [0u8; 8];
    f.read_exact(&mut n8)
        .with_context(|| format!("{}: no safetensors header", path.display()))?;
    let n = u64::from_le_bytes(n8);
    if n > MAX_HEADER || n > len.saturating_sub(8) {
        bail!(
            "{}: safetensors header length {n} does not fit the file ({len} bytes)",
            path.display()
        );
    }
    let mut head = vec![0u8; n as usize];
    f.read_exact(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    let entries = parse(&head, len - 8 - n).with_context(|| path.display().to_string())?;
    Ok((n, entries))
}

/// [`parse`] on an in-memory file (the teacher's mapped weights): (header length, entries).
pub fn check_bytes(bytes: &[u8]) -> Result<(u64, Vec<Entry>)> {
    let n8: [u8; 8] = bytes
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| anyhow!("no safetensors header"))?;
    let n = u64::from_le_bytes(n8);
    let len = bytes.len() as u64;
    if n > MAX_HEADER || n > len - 8 {
        bail!("safetensors header length {n} does not fit the file ({len} bytes)");
    }
    let head = &bytes[8..8 + n as usize];
    Ok((n, parse(head, len - 8 - n)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(s: &str) -> Result<Vec<Entry>> {
        parse(s.as_bytes(), 64)
    }

    #[test]
    fn shape_times_dtype_must_equal_the_range() {
        head(r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}}"#).unwrap();
        // F32 declared over BF16 bytes.
        let e = head(r#"{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}}"#).unwrap_err();
        assert!(format!("{e:#}").contains("16 bytes"), "{e:#}");
        head(r#"{"w":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}}"#).unwrap();
    }

    #[test]
    fn overlaps_outside_and_wraps_are_refused() {
        let e = head(
            r#"{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},
                "b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}"#,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("overlap"), "{e:#}");
        let e = head(r#"{"w":{"dtype":"U8","shape":[65],"data_offsets":[0,65]}}"#).unwrap_err();
        assert!(format!("{e:#}").contains("outside"), "{e:#}");
        let e = head(
            r#"{"w":{"dtype":"F32","shape":[4294967296,4294967296,1024],"data_offsets":[0,0]}}"#,
        )
        .unwrap_err();
        assert!(format!("{e:#}").contains("u64"), "{e:#}");
        let e = head(r#"{"w":{"dtype":"Q9","shape":[1],"data_offsets":[0,1]}}"#).unwrap_err();
        assert!(format!("{e:#}").contains("unknown dtype"), "{e:#}");
    }
}
