//! Reading `prompts.jsonl` (written by `mcq`): one object per line with at least `id` and
//! `prompt`; with `options` (≤ 10) and `gold` (a letter among them) it is an MCQ item.
//! Provenance fields (`source`, `repo`, `commit`, `file`, `row`) are carried through as they
//! are. Errors name the file and the 1-based line number.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::teacher::tokenizer::LETTERS;

/// One prompt, in file order.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptItem {
    pub id: String,
    pub prompt: String,
    /// Answer options (MCQ items only).
    pub options: Option<Vec<String>>,
    pub gold: Option<String>,
    /// `source`, `repo`, `commit`, `file`, `row` as found (null when absent).
    pub provenance: [Value; 5],
    /// 1-based line in the prompts file.
    pub line: usize,
}

pub const PROVENANCE_FIELDS: [&str; 5] = ["source", "repo", "commit", "file", "row"];

fn parse_line(text: &str) -> Result<PromptItem> {
    let v: Value = serde_json::from_str(text).context("invalid JSON")?;
    let obj = v.as_object().context("not a JSON object")?;
    let s = |k: &str| -> Result<String> {
        match obj.get(k) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => anyhow::bail!("`{k}` is not a string: {other}"),
            None => anyhow::bail!("missing `{k}`"),
        }
    };
    let id = s("id")?;
    if id.is_empty() {
        anyhow::bail!("empty `id`");
    }
    let prompt = s("prompt")?;
    let options = match obj.get("options") {
        None | Some(Value::Null) => None,
        Some(Value::Array(a)) => {
            if a.is_empty() || a.len() > LETTERS.len() {
                anyhow::bail!("`options` has {} entries (1..=10 allowed)", a.len());
            }
            Some(
                a.iter()
                    .enumerate()
                    .map(|(i, o)| {
                        o.as_str()
                            .map(str::to_string)
                            .with_context(|| format!("options[{i}] is not a string"))
                    })
                    .collect::<Result<Vec<_>>>()?,
            )
        }
        Some(other) => anyhow::bail!("`options` is not a list: {other}"),
    };
    let gold = match obj.get("gold") {
        None | Some(Value::Null) => None,
        Some(Value::String(g)) => {
            let n = options.as_ref().map_or(0, |o| o.len());
            if !LETTERS[..n].contains(&g.as_str()) {
                anyhow::bail!("`gold` {g:?} is not one of the item's {n} option letters");
            }
            Some(g.clone())
        }
        Some(other) => anyhow::bail!("`gold` is not a string: {other}"),
    };
    let provenance = PROVENANCE_FIELDS.map(|k| obj.get(k).cloned().unwrap_or(Value::Null));
    Ok(PromptItem {
        id,
        prompt,
        options,
        gold,
        provenance,
        line: 0,
    })
}

/// Longest prompts.jsonl line accepted (bytes): the one bound every reader holds.
pub use crate::mcq::prompts::MAX_LINE_BYTES;

/// Read every prompt of `path`; blank lines are skipped, duplicate ids refused.
pub fn read_prompts(path: &Path) -> Result<Vec<PromptItem>> {
    let mut out = Vec::new();
    for_each_prompt(path, MAX_LINE_BYTES, &mut |item| {
        out.push(item);
        Ok(())
    })?;
    Ok(out)
}

/// [`read_prompts`] one prompt at a time, through the one bounded reader
/// ([`crate::mcq::prompts::for_each_line`]: a regular file only, a line over `max_line`
/// refused before it is read whole): memory holds one line and the ids seen.
pub fn for_each_prompt(
    path: &Path,
    max_line: u64,
    f: &mut dyn FnMut(PromptItem) -> Result<()>,
) -> Result<()> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    crate::mcq::prompts::for_each_line(path, max_line, &mut |n, line| {
        let mut item = parse_line(line)?;
        item.line = n;
        if let Some(prev) = seen.insert(item.id.clone(), n) {
            anyhow::bail!("id {:?} already used on line {prev}", item.id);
        }
        f(item)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Result<Vec<PromptItem>> {
        let (_d, p) = crate::testkit::temp_file("prompts.jsonl", text);
        read_prompts(&p)
    }

    #[test]
    fn reads_plain_and_mcq_items() {
        let v = read(concat!(
            r#"{"id":"a","prompt":"Why?"}"#,
            "\n\n",
            r#"{"id":"b","prompt":"Q","options":["x","y","z"],"gold":"C","source":"sciq","row":3}"#,
            "\n"
        ))
        .unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].options, None);
        assert_eq!(v[1].line, 3);
        assert_eq!(v[1].gold.as_deref(), Some("C"));
        assert_eq!(v[1].provenance[0], Value::from("sciq"));
        assert_eq!(v[1].provenance[4], Value::from(3));
        assert_eq!(v[1].provenance[1], Value::Null);
    }

    fn read_prompts_bounded(p: &Path, max: u64) -> Result<Vec<PromptItem>> {
        let mut out = vec![];
        for_each_prompt(p, max, &mut |i| {
            out.push(i);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn overlong_line_is_refused_by_number_before_reading_it_whole() {
        let (_d, p) = crate::testkit::temp_path("prompts.jsonl");
        let long = format!("{{\"id\":\"b\",\"prompt\":\"{}\"}}", "x".repeat(200));
        std::fs::write(&p, format!("{{\"id\":\"a\",\"prompt\":\"p\"}}\r\n{long}\n")).unwrap();
        let e = read_prompts_bounded(&p, 100).unwrap_err();
        assert!(
            format!("{e:#}").contains("prompts.jsonl:2: line longer than"),
            "{e:#}"
        );
        // Without a final newline too; and a line at the limit is read.
        std::fs::write(&p, &long).unwrap();
        assert!(read_prompts_bounded(&p, 100).is_err());
        assert_eq!(
            read_prompts_bounded(&p, long.len() as u64).unwrap().len(),
            1
        );
    }

    #[test]
    fn errors_name_the_line() {
        for (text, needle) in [
            ("{\"id\":\"a\",\"prompt\":\"p\"}\n{\"id\":\"b\"\n", ":2: invalid JSON"),
            ("{\"prompt\":\"p\"}\n", ":1: missing `id`"),
            (
                "{\"id\":\"a\",\"prompt\":\"p\"}\n{\"id\":\"a\",\"prompt\":\"q\"}\n",
                "already used on line 1",
            ),
            (
                "{\"id\":\"a\",\"prompt\":\"p\",\"options\":[\"x\",\"y\"],\"gold\":\"C\"}\n",
                ":1: `gold` \"C\"",
            ),
            (
                "{\"id\":\"a\",\"prompt\":\"p\",\"options\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\"]}\n",
                "11 entries",
            ),
        ] {
            let e = read(text).unwrap_err();
            assert!(format!("{e:#}").contains(needle), "{needle}: {e:#}");
        }
    }
}
