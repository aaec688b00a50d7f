//! The side being checked: `prompts.jsonl` (one document per item: prompt + options), or a
//! shard directory (`index.json`), decoded back to text with the tokenizer it names — SFT
//! shards one document per row, pretraining shards split at EOS into their documents, each
//! remembering the rows it spans so `--drop` can remove exactly those.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::mcq::prompts::PromptRecord;
use crate::shards::index::{self as shard_index, Index as ShardIndex};

/// Where a scanned document came from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Origin {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repo: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row: Option<u64>,
    /// Shard file (relative to the shard directory) and first row of the document in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_row: Option<u64>,
}

/// Rows of a shard a document occupies (inclusive range), for `--drop`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RowSpan {
    pub shard: usize,
    pub first: u64,
    pub last: u64,
}

pub enum Kind {
    /// The raw lines, kept to write the filtered copy byte-identically.
    Prompts { lines: Vec<String> },
    Shards {
        dir: PathBuf,
        index: ShardIndex,
        spans: Vec<RowSpan>,
    },
}

pub struct Target {
    pub kind: Kind,
    pub path: PathBuf,
    /// sha256 of prompts.jsonl, or of the shard directory's index.json.
    pub sha256: String,
    /// Bytes read (the prompts file, or the shard files).
    pub bytes: u64,
    pub texts: Vec<String>,
    pub origins: Vec<Origin>,
}

impl Target {
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            Kind::Prompts { .. } => "prompts",
            Kind::Shards { .. } => "shards",
        }
    }
}

/// Read prompts.jsonl through the one bounded reader
/// ([`crate::mcq::prompts::for_each_line`]), the records parsed in parallel; errors name
/// `file:line`.
pub fn load_prompts(path: &Path) -> Result<Target> {
    let sha256 = crate::util::sha256_file(path)?;
    let mut numbered: Vec<(usize, String)> = Vec::new();
    let bytes = crate::mcq::prompts::for_each_line(
        path,
        crate::mcq::prompts::MAX_LINE_BYTES,
        &mut |n, l| {
            numbered.push((n, l.to_string()));
            Ok(())
        },
    )?;
    let parsed: Vec<(String, Origin)> = numbered
        .par_iter()
        .map(|(n, l)| -> Result<(String, Origin)> {
            let r: PromptRecord = serde_json::from_str(l)
                .with_context(|| format!("{}:{n}: not a prompt record", path.display()))?;
            let mut t = r.prompt;
            for o in &r.options {
                t.push('\n');
                t.push_str(o);
            }
            Ok((
                t,
                Origin {
                    id: Some(r.id),
                    source: Some(r.source),
                    repo: Some(r.repo),
                    commit: Some(r.commit),
                    file: Some(r.file),
                    row: Some(r.row),
                    ..Origin::default()
                },
            ))
        })
        .collect::<Result<_>>()?;
    let lines = numbered.into_iter().map(|(_, l)| l).collect();
    let (texts, origins) = parsed.into_iter().unzip();
    Ok(Target {
        kind: Kind::Prompts { lines },
        path: path.to_path_buf(),
        sha256,
        bytes,
        texts,
        origins,
    })
}

/// Decode a shard directory back into documents.
pub fn load_shards(dir: &Path, tokenizer_override: Option<&Path>) -> Result<Target> {
    let index = shard_index::load(dir)?;
    let tok = shard_tokenizer(dir, &index, tokenizer_override)?;
    let eos = index.tokenizer.eos_id;
    let mut texts = Vec::new();
    let mut origins = Vec::new();
    let mut spans = Vec::new();
    let mut bytes = 0u64;
    for (si, sh) in index.shards.iter().enumerate() {
        let path = dir.join(&sh.file);
        bytes += std::fs::metadata(&path)
            .with_context(|| format!("{}: shard listed in index.json is missing", path.display()))?
            .len();
        let batch = index.read_shard(dir, si)?;
        let rows = rows_with_origin(batch, &index, &path)?;
        // Documents: SFT → one per row; pretraining → EOS-delimited runs across rows.
        let docs = if rows.first().map(|r| r.1.is_some()).unwrap_or(false) {
            sft_documents(rows, si, &sh.file)
        } else {
            eos_documents(rows, si, &sh.file, eos)
        };
        let decoded: Vec<String> = docs
            .par_iter()
            .map(|(ids, _, _)| {
                tok.decode(ids, true)
                    .map_err(|e| anyhow!("{}: decode: {e}", path.display()))
            })
            .collect::<Result<_>>()?;
        for (text, (_, o, span)) in decoded.into_iter().zip(docs) {
            texts.push(text);
            origins.push(o);
            spans.push(span);
        }
    }
    Ok(Target {
        sha256: crate::util::sha256_file(&dir.join("index.json"))?,
        kind: Kind::Shards {
            dir: dir.to_path_buf(),
            index,
            spans,
        },
        path: dir.to_path_buf(),
        bytes,
        texts,
        origins,
    })
}

/// The tokenizer the shards were written with (`--tokenizer` when the recorded path is not
/// reachable here), checked against the sha256 index.json records.
fn shard_tokenizer(
    dir: &Path,
    index: &ShardIndex,
    tokenizer_override: Option<&Path>,
) -> Result<tokenizers::Tokenizer> {
    let tok_path = tokenizer_override
        .map(crate::tokenize::files::locate)
        .unwrap_or_else(|| PathBuf::from(&index.tokenizer.path));
    let tok = tokenizers::Tokenizer::from_file(&tok_path).map_err(|e| {
        anyhow!(
            "{}: tokenizer {} named in index.json cannot be loaded ({e}); pass --tokenizer",
            dir.display(),
            tok_path.display()
        )
    })?;
    let tok_sha = crate::util::sha256_file(&tok_path)?;
    if tok_sha != index.tokenizer.sha256 {
        bail!(
            "{}: tokenizer {} has sha256 {tok_sha}, index.json says {}",
            dir.display(),
            tok_path.display(),
            index.tokenizer.sha256
        );
    }
    Ok(tok)
}

/// A document's ids, where it came from, and the rows it spans.
type Doc = (Vec<u32>, Origin, RowSpan);

/// SFT shards: one document per row, with the row's own provenance.
fn sft_documents(rows: Vec<(Vec<u32>, Option<Origin>)>, si: usize, file: &str) -> Vec<Doc> {
    rows.into_iter()
        .enumerate()
        .map(|(r, (ids, o))| {
            let mut o = o.unwrap_or_default();
            o.shard = Some(file.to_string());
            o.shard_row = Some(r as u64);
            let span = RowSpan {
                shard: si,
                first: r as u64,
                last: r as u64,
            };
            (ids, o, span)
        })
        .collect()
}

/// Pretraining shards: documents are the EOS-delimited runs of ids, across rows (the last
/// run needs no EOS).
fn eos_documents(
    rows: Vec<(Vec<u32>, Option<Origin>)>,
    si: usize,
    file: &str,
    eos: u32,
) -> Vec<Doc> {
    let mut docs: Vec<Doc> = Vec::new();
    let origin = |first: u64| Origin {
        shard: Some(file.to_string()),
        shard_row: Some(first),
        ..Origin::default()
    };
    let mut cur: Vec<u32> = Vec::new();
    let mut first = 0u64;
    let last_row = rows.len().saturating_sub(1) as u64;
    for (r, (ids, _)) in rows.into_iter().enumerate() {
        for t in ids {
            if cur.is_empty() {
                first = r as u64;
            }
            if t == eos {
                if !cur.is_empty() {
                    let span = RowSpan {
                        shard: si,
                        first,
                        last: r as u64,
                    };
                    docs.push((std::mem::take(&mut cur), origin(first), span));
                }
            } else {
                cur.push(t);
            }
        }
    }
    if !cur.is_empty() {
        let span = RowSpan {
            shard: si,
            first,
            last: last_row,
        };
        docs.push((cur, origin(first), span));
    }
    docs
}

/// A shard's rows (ids) with, for SFT rows, their provenance: parquet and MDS from the row's
/// columns, Megatron from its `.rows.jsonl` sidecar. Pretraining rows carry none.
fn rows_with_origin(
    batch: crate::shards::RowBatch,
    index: &ShardIndex,
    path: &Path,
) -> Result<Vec<(Vec<u32>, Option<Origin>)>> {
    use crate::shards::{Column, ShardFormat};
    if index.format == ShardFormat::Megatron && index.kind == shard_index::Kind::Sft {
        return Ok(crate::mcq::sft_shards::rows_of(&batch, index.format, path)?
            .into_iter()
            .map(|r| {
                let o = if r.id.is_empty() {
                    Origin::default()
                } else {
                    Origin {
                        id: Some(r.id),
                        source: Some(r.prov.source),
                        repo: Some(r.prov.repo),
                        commit: Some(r.prov.commit),
                        file: Some(r.prov.file),
                        row: Some(r.prov.row),
                        ..Origin::default()
                    }
                };
                (r.input_ids, Some(o))
            })
            .collect());
    }
    let sft = batch.column("prompt_len").is_some() && batch.column("file").is_some();
    let s = |n: &str, i: usize| match batch.column(n) {
        Some(Column::Str(v)) => Some(v[i].clone()),
        _ => None,
    };
    let origins: Vec<Option<Origin>> = (0..batch.rows())
        .map(|i| {
            sft.then(|| Origin {
                id: s("id", i),
                source: s("source", i),
                repo: s("repo", i),
                commit: s("commit", i),
                file: s("file", i),
                row: match batch.column("row") {
                    Some(Column::U32(v)) => Some(v[i] as u64),
                    _ => None,
                },
                ..Origin::default()
            })
        })
        .collect();
    Ok(batch.input_ids.into_iter().zip(origins).collect())
}
