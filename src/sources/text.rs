//! Why plain text is an input: corpora often lie as `.txt` files (books, scraped pages,
//! notes). A `.txt` (`.txt.gz`, `.txt.zst`) file is one document — or, with
//! `pack --paragraphs`, one document per blank-line-separated paragraph — handed on as the
//! row `{"text": …}`, so `--text-column text` (the default) reads it. Row numbers are the
//! paragraph's index (0 for a whole file). Each document is bounded while it is read
//! (`--max-row-bytes`): never more than the bound is held.

use std::io::{BufRead, BufReader, Read};

use anyhow::{anyhow, Result};
use serde_json::Value;

use super::records::OnRecord;
use crate::bounded::Bound;

/// A `.txt` input: the whole file one document, or (`paragraphs`) one per paragraph.
pub struct Text {
    pub paragraphs: bool,
    pub bound: Bound,
}

impl super::RowReader for Text {
    fn values(&self, at: super::RowsOf, f: &mut OnRecord) -> Result<()> {
        let input = super::codec::open(at.path, at.name)?;
        for_each(input, at.name, self.paragraphs, self.bound, at.start_row, f)
    }
}

fn row(text: String) -> Value {
    serde_json::json!({ "text": text })
}

fn utf8(name: &str, b: Vec<u8>, what: &str) -> Result<String> {
    String::from_utf8(b).map_err(|e| {
        anyhow!(
            "{name}: {what}: not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        )
    })
}

/// The documents of a text stream (`name` in errors) from `start_row` on.
pub fn for_each(
    input: impl Read,
    name: &str,
    paragraphs: bool,
    bound: Bound,
    start_row: u64,
    f: &mut OnRecord,
) -> Result<()> {
    let mut r = BufReader::with_capacity(1 << 20, input);
    if !paragraphs {
        let mut b = Vec::new();
        let n = (&mut r)
            .take(bound.limit.saturating_add(1))
            .read_to_end(&mut b)
            .map_err(|e| anyhow!("{name}: reading: {e}"))?;
        if n as u64 > bound.limit {
            return Err(anyhow!(
                "{name}: {}",
                bound.message("the file (one document)")
            ));
        }
        if start_row == 0 {
            f(0, row(utf8(name, b, "row 0")?))?;
        }
        return Ok(());
    }
    let (mut para, mut line) = (Vec::new(), Vec::new());
    let (mut k, mut line_no) = (0u64, 0u64);
    let mut emit = |para: &mut Vec<u8>, k: &mut u64| -> Result<()> {
        while matches!(para.last(), Some(b'\n' | b'\r')) {
            para.pop();
        }
        if *k >= start_row {
            let what = format!("paragraph {k}");
            f(*k, row(utf8(name, std::mem::take(para), &what)?))?;
        }
        para.clear();
        *k += 1;
        Ok(())
    };
    loop {
        line.clear();
        let n = (&mut r)
            .take(bound.limit.saturating_add(1))
            .read_until(b'\n', &mut line)
            .map_err(|e| anyhow!("{name}: reading line {}: {e}", line_no + 1))?;
        if n == 0 {
            break;
        }
        line_no += 1;
        if line.iter().all(|b| b.is_ascii_whitespace()) {
            if !para.is_empty() {
                emit(&mut para, &mut k)?;
            }
            continue;
        }
        para.extend_from_slice(&line);
        if para.len() as u64 > bound.limit {
            return Err(anyhow!(
                "{name}: {}",
                bound.message(&format!("paragraph {k} (ending after line {line_no})"))
            ));
        }
    }
    if !para.is_empty() {
        emit(&mut para, &mut k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(text: &str, paragraphs: bool, start: u64) -> Vec<(u64, String)> {
        let mut got = vec![];
        for_each(
            text.as_bytes(),
            "f",
            paragraphs,
            Bound::new(1 << 20, "--max-row-bytes"),
            start,
            &mut |r, v| {
                got.push((r, v["text"].as_str().unwrap().to_string()));
                Ok(())
            },
        )
        .unwrap();
        got
    }

    #[test]
    fn a_file_or_its_paragraphs() {
        let t = "One line.\nTwo line.\n\n\n  \nThird para.\r\n\nlast";
        assert_eq!(all(t, false, 0), vec![(0, t.to_string())]);
        assert_eq!(
            all(t, true, 0),
            vec![
                (0, "One line.\nTwo line.".to_string()),
                (1, "Third para.".to_string()),
                (2, "last".to_string())
            ]
        );
        assert_eq!(all(t, true, 2), vec![(2, "last".to_string())]);
        let e = for_each(
            &b"abcdef"[..],
            "f",
            false,
            Bound::new(3, "--max-row-bytes"),
            0,
            &mut |_, _| Ok(()),
        )
        .unwrap_err();
        assert!(format!("{e}").contains("--max-row-bytes"), "{e}");
    }
}
