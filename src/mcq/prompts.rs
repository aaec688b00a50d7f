//! `prompts.jsonl` (contract 5): one JSON object per item — `id, source, repo, commit, file,
//! row, prompt, options, gold` — the input of `distill`, `decontam` and `audit`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
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

/// The bytes [`write`] puts on disk for `records`.
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

/// Read and validate prompts.jsonl; errors name the file and 1-based line.
pub fn read(path: &Path) -> Result<Vec<PromptRecord>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut out = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line.with_context(|| format!("reading {}", path.display()))?;
        if line.trim().is_empty() {
            continue;
        }
        let r: PromptRecord = serde_json::from_str(&line)
            .with_context(|| format!("{} line {}: not a prompt record", path.display(), i + 1))?;
        if let Err(e) = r.validate() {
            bail!("{} line {}: {e}", path.display(), i + 1);
        }
        if !ids.insert(r.id.clone()) {
            bail!("{} line {}: duplicate id {:?}", path.display(), i + 1, r.id);
        }
        out.push(r);
    }
    Ok(out)
}
