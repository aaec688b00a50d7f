//! `prompts.jsonl` (contract 5): one JSON object per item — `id, source, repo, commit, file,
//! row, prompt, options, gold` — the input of `distill`, `decontam` and `audit`, and the one
//! bounded reader of its lines every command uses ([`for_each_line`]).

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::item::{letter_index, McqItem, LETTERS};
use super::template::Templates;

/// One line of prompts.jsonl.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PromptRecord {
    pub id: String,
    pub source: String,
    pub repo: String,
    pub commit: String,
    pub file: String,
    pub row: u64,
    pub prompt: String,
    pub options: Vec<String>,
    pub gold: String,
    /// Source options left out because they were blank (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blank_options: Vec<String>,
}

impl PromptRecord {
    pub fn from_item(item: &McqItem, templates: &Templates) -> PromptRecord {
        PromptRecord {
            id: item.id.clone(),
            source: item.prov.source.clone(),
            repo: item.prov.repo.clone(),
            commit: item.prov.commit.clone(),
            file: item.prov.file.clone(),
            row: item.prov.row,
            prompt: templates.prompt(item),
            options: item.options.clone(),
            gold: item.gold_letter().to_string(),
            blank_options: item.blank_options.clone(),
        }
    }

    /// Check the record's own invariants: options count, gold letter among them.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.id.is_empty() {
            return Err("empty id".into());
        }
        if self.options.len() < 2 || self.options.len() > LETTERS.len() {
            return Err(format!("{} options (need 2 to 10)", self.options.len()));
        }
        match letter_index(&self.gold) {
            Some(g) if g < self.options.len() => Ok(()),
            _ => Err(format!(
                "gold {:?} is not one of the {} option letters",
                self.gold,
                self.options.len()
            )),
        }
    }
}

/// The bytes [`write`](fn@write) puts on disk for `records`.
pub fn encode(records: &[PromptRecord]) -> Vec<u8> {
    let mut buf = Vec::new();
    for r in records {
        // Serialising plain strings and numbers into memory cannot fail.
        serde_json::to_writer(&mut buf, r).expect("prompt record serialises");
        buf.push(b'\n');
    }
    buf
}

/// Write records as JSON lines, atomically (temp file + rename).
pub fn write(path: &Path, records: &[PromptRecord]) -> Result<()> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    let tmp = crate::util::temp_path(path);
    let written = (|| -> Result<()> {
        let f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = BufWriter::new(f);
        for r in records {
            serde_json::to_writer(&mut w, r)
                .with_context(|| format!("writing {}", tmp.display()))?;
            w.write_all(b"\n")
                .with_context(|| format!("writing {}", tmp.display()))?;
        }
        let f = w
            .into_inner()
            .map_err(|e| anyhow!("writing {}: {}", tmp.display(), e.error()))?;
        f.sync_all()
            .with_context(|| format!("fsync {}", tmp.display()))?;
        crate::util::commit_rename(&tmp, path)
    })();
    if written.is_err() {
        // A full disk (or any failure) leaves no hidden temp file behind.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Whether `path` is a prompts.jsonl this tool wrote: every line a valid prompt record
/// (contract 5, each carrying its own provenance). Such a file may be replaced by a rerun.
pub fn is_own_file(path: &Path) -> bool {
    read(path).is_ok()
}

/// Longest prompts.jsonl line any reader accepts (bytes): a longer one is refused naming its
/// line before it is read whole (a prompt that long could never fit a teacher's context).
pub const MAX_LINE_BYTES: u64 = 64 << 20;

/// The one prompts.jsonl reader (distill, audit, mcq, decontam, inspect): `f(line, text)` for
/// each non-blank line of `path` in file order (1-based, without its `\n` / `\r\n`) — a regular
/// file only, one line held at a time, a line over `max_line` bytes refused before it is read
/// whole. Every error names `file:line`: the reader's own (unreadable, too long, not UTF-8)
/// and `f`'s, prefixed with it. Returns the bytes read (the file's size).
pub fn for_each_line(
    path: &Path,
    max_line: u64,
    f: &mut dyn FnMut(usize, &str) -> Result<()>,
) -> Result<u64> {
    let file = crate::bounded::open_regular(path)?;
    let mut r = BufReader::with_capacity(1 << 20, file);
    let mut buf = Vec::new();
    let mut bytes = 0u64;
    for n in 1.. {
        buf.clear();
        let got = (&mut r)
            .take(max_line + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("{}:{n}: cannot read line", path.display()))?;
        if got == 0 {
            break;
        }
        bytes += got as u64;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        } else if got as u64 > max_line {
            bail!(
                "{}:{n}: line longer than {} (not a prompt)",
                path.display(),
                crate::bounded::human(max_line)
            );
        }
        let line = std::str::from_utf8(&buf)
            .with_context(|| format!("{}:{n}: not UTF-8", path.display()))?;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        f(n, line).with_context(|| format!("{}:{n}", path.display()))?;
    }
    Ok(bytes)
}

/// One line as a prompt record, its own invariants checked ([`PromptRecord::validate`]).
pub fn parse_record(line: &str) -> Result<PromptRecord> {
    let r: PromptRecord =
        serde_json::from_str(line).map_err(|e| anyhow!("not a prompt record ({e})"))?;
    if let Err(e) = r.validate() {
        bail!("{} ({})", e, r.id);
    }
    Ok(r)
}

/// Read and validate prompts.jsonl (ids unique); errors name the file and 1-based line.
pub fn read(path: &Path) -> Result<Vec<PromptRecord>> {
    let mut out = Vec::new();
    let mut ids = std::collections::HashMap::new();
    for_each_line(path, MAX_LINE_BYTES, &mut |n, line| {
        let r = parse_record(line)?;
        if let Some(prev) = ids.insert(r.id.clone(), n) {
            bail!("duplicate id {:?} (first on line {prev})", r.id);
        }
        out.push(r);
        Ok(())
    })?;
    Ok(out)
}
