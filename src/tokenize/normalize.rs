//! The normalizer stage of the fast tokenizer: tokenizer.json's `normalizer` (none, NFC, or a
//! `Sequence` of NFC / Prepend / Replace(String)) parsed into steps and applied, exactly as the
//! `tokenizers` crate does for those shapes ([`super::fast`] composes it with the others).

use std::borrow::Cow;

use anyhow::{bail, Context, Result};
use unicode_normalization_alignments::UnicodeNormalization;

use super::json::ty;

#[derive(Clone, Debug)]
pub(super) enum NormStep {
    Nfc,
    Prepend(String),
    Replace(String, String),
}

pub(super) fn parse_norm(v: Option<&serde_json::Value>, out: &mut Vec<NormStep>) -> Result<()> {
    let Some(v) = v else { return Ok(()) };
    match ty(v) {
        "Sequence" => {
            for n in v
                .get("normalizers")
                .and_then(|x| x.as_array())
                .context("normalizer Sequence")?
            {
                parse_norm(Some(n), out)?;
            }
        }
        "NFC" => out.push(NormStep::Nfc),
        "Prepend" => out.push(NormStep::Prepend(
            v.get("prepend")
                .and_then(|x| x.as_str())
                .context("Prepend")?
                .to_string(),
        )),
        "Replace" => {
            let Some(p) = v
                .get("pattern")
                .and_then(|p| p.get("String"))
                .and_then(|s| s.as_str())
            else {
                bail!("Replace with a regex pattern");
            };
            if p.is_empty() {
                bail!("Replace of an empty string");
            }
            let c = v
                .get("content")
                .and_then(|x| x.as_str())
                .context("Replace")?;
            out.push(NormStep::Replace(p.to_string(), c.to_string()));
        }
        t => bail!("normalizer {t}"),
    }
    Ok(())
}

/// The first byte at or after `i` that is not ASCII (`b.len()` if none), eight bytes at a
/// time: a document with one non-ASCII char was walked byte by byte (5 % of a Qwen2-shaped
/// tokenizing thread on code, perf).
#[inline]
pub(super) fn next_non_ascii(b: &[u8], mut i: usize) -> usize {
    while let Some(w) = b.get(i..i + 8) {
        let high = u64::from_le_bytes(w.try_into().expect("8 bytes")) & 0x8080_8080_8080_8080;
        if high != 0 {
            return i + (high.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < b.len() && b[i] < 0x80 {
        i += 1;
    }
    i
}

/// NFC, exactly as the crate computes it (same tables), over the chunks that can change:
/// a boundary before an ASCII character is never crossed by canonical reordering or
/// composition (ASCII chars are starters that never compose with what precedes them).
pub(super) fn nfc(s: &str) -> Cow<'_, str> {
    if s.is_ascii() {
        return Cow::Borrowed(s);
    }
    let b = s.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    loop {
        i = next_non_ascii(b, i);
        if i == b.len() {
            break;
        }
        let start = if i > 0 { i - 1 } else { 0 };
        let mut end = i;
        while end < b.len() && b[end] >= 0x80 {
            end += 1;
        }
        let chunk = &s[start..end];
        // Most non-ASCII runs are NFC already (quick check "yes": no char that composes or
        // reorders), and then NFC leaves them as they are: no normalized copy to build.
        if unicode_normalization_alignments::is_nfc_quick(chunk.chars())
            == unicode_normalization_alignments::IsNormalized::Yes
        {
            i = end;
            continue;
        }
        let normed: String = chunk.nfc().map(|(c, _)| c).collect();
        if normed != chunk {
            let o = out.get_or_insert_with(|| String::with_capacity(s.len()));
            o.push_str(&s[copied..start]);
            o.push_str(&normed);
            copied = end;
        }
        i = end;
    }
    match out {
        None => Cow::Borrowed(s),
        Some(mut o) => {
            o.push_str(&s[copied..]);
            Cow::Owned(o)
        }
    }
}

pub(super) fn apply_norm<'a>(steps: &[NormStep], s: &'a str) -> Cow<'a, str> {
    let mut cur = Cow::Borrowed(s);
    for st in steps {
        cur = match st {
            NormStep::Nfc => match nfc(&cur) {
                Cow::Borrowed(_) => cur,
                Cow::Owned(o) => Cow::Owned(o),
            },
            NormStep::Prepend(p) => {
                if cur.is_empty() {
                    cur
                } else {
                    Cow::Owned(format!("{p}{cur}"))
                }
            }
            NormStep::Replace(p, c) => {
                if cur.contains(p.as_str()) {
                    Cow::Owned(cur.replace(p.as_str(), c))
                } else {
                    cur
                }
            }
        };
    }
    cur
}

/// The normalizer steps as the path description names them.
pub(super) fn norm_desc(norm: &[NormStep]) -> String {
    let names: Vec<&str> = norm
        .iter()
        .map(|n| match n {
            NormStep::Nfc => "NFC",
            NormStep::Prepend(_) => "Prepend",
            NormStep::Replace(..) => "Replace",
        })
        .collect();
    format!("normalizer {names:?}")
}
