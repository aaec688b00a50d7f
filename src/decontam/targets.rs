//! The side being checked: `prompts.jsonl` (one document per item: prompt + options), or a
//! shard directory (`index.json`), decoded back to text with the tokenizer it names — SFT
//! shards one document per row, pretraining shards split at EOS into their documents, each
//! remembering the rows it spans so `--drop` can remove exactly those.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int32Type, Int64Type, UInt16Type, UInt32Type, UInt64Type};
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

/// Read prompts.jsonl (lines parsed in parallel); errors name the line.
pub fn load_prompts(path: &Path) -> Result<Target> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let sha256 = crate::util::sha256_hex(&bytes);
    let text =
        String::from_utf8(bytes).map_err(|e| anyhow!("{}: not UTF-8 ({e})", path.display()))?;
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_string)
        .collect();
    let parsed: Vec<(String, Origin)> = lines
        .par_iter()
        .enumerate()
        .map(|(i, l)| -> Result<(String, Origin)> {
            let r: PromptRecord = serde_json::from_str(l).with_context(|| {
                format!("{} line {}: not a prompt record", path.display(), i + 1)
            })?;
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
    let (texts, origins) = parsed.into_iter().unzip();
    Ok(Target {
        kind: Kind::Prompts { lines },
        path: path.to_path_buf(),
        sha256,
        bytes: text.len() as u64,
        texts,
        origins,
    })
}

fn ids_of(col: &dyn Array, i: usize) -> Option<Vec<u32>> {
    let v = match col.data_type() {
        DataType::List(_) => col.as_list::<i32>().value(i),
        DataType::LargeList(_) => col.as_list::<i64>().value(i),
        DataType::FixedSizeList(_, _) => col.as_fixed_size_list().value(i),
        _ => return None,
    };
    let n = v.len();
    Some(match v.data_type() {
        DataType::UInt32 => v.as_primitive::<UInt32Type>().values().to_vec(),
        DataType::Int32 => v
            .as_primitive::<Int32Type>()
            .values()
            .iter()
            .map(|x| *x as u32)
            .collect(),
        DataType::UInt16 => v
            .as_primitive::<UInt16Type>()
            .values()
            .iter()
            .map(|x| *x as u32)
            .collect(),
        DataType::Int64 => v
            .as_primitive::<Int64Type>()
            .values()
            .iter()
            .map(|x| *x as u32)
            .collect(),
        DataType::UInt64 => v
            .as_primitive::<UInt64Type>()
            .values()
            .iter()
            .map(|x| *x as u32)
            .collect(),
        _ => return None,
    })
    .filter(|x: &Vec<u32>| x.len() == n)
}

/// The token column of a shard: `input_ids`, else `tokens`, else the first list column.
fn token_column(schema: &arrow::datatypes::Schema) -> Option<String> {
    for name in ["input_ids", "tokens", "ids"] {
        if schema.column_with_name(name).is_some() {
            return Some(name.to_string());
        }
    }
    schema
        .fields()
        .iter()
        .find(|f| matches!(f.data_type(), DataType::List(_) | DataType::LargeList(_)))
        .map(|f| f.name().clone())
}

/// Decode a shard directory back into documents.
pub fn load_shards(dir: &Path, tokenizer_override: Option<&Path>) -> Result<Target> {
    let index = shard_index::load(dir)?;
    if !matches!(index.format.as_str(), "parquet" | "mds" | "megatron") {
        return Err(crate::error::usage(format!(
            "{}: format {:?} cannot be scanned (parquet, mds and megatron shards only)",
            dir.display(),
            index.format
        )));
    }
    let tok_path = tokenizer_override
        .map(crate::mcq::tokenizer::resolve)
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
        // Pretraining Megatron rows are seq_len tokens; SFT rows (one `.idx` document each)
        // go through the row path below.
        if index.format == "megatron" && index.kind != shard_index::Kind::Sft {
            let (docs, spans_m) = megatron_docs(&path, &index, si)?;
            let decoded: Vec<String> = docs
                .par_iter()
                .map(|(ids, _)| {
                    tok.decode(ids, true)
                        .map_err(|e| anyhow!("{}: decode: {e}", path.display()))
                })
                .collect::<Result<_>>()?;
            for ((text, (_, first)), span) in decoded.into_iter().zip(docs).zip(spans_m) {
                texts.push(text);
                origins.push(Origin {
                    shard: Some(sh.file.clone()),
                    shard_row: Some(first),
                    ..Origin::default()
                });
                spans.push(span);
            }
            continue;
        }
        // Token ids per row, plus SFT provenance when the shard has it.
        let mut rows: Vec<(Vec<u32>, Option<Origin>)> = match index.format.as_str() {
            "mds" => mds_rows(&path)?,
            "megatron" => crate::mcq::sft_shards::read_megatron(&path, &index.dtype)?
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
                .collect(),
            _ => Vec::new(),
        };
        let parquet = index.format == "parquet";
        let reader = if parquet {
            Some(crate::sources::guarded::open(&path)?)
        } else {
            None
        };
        for b in reader.into_iter().flatten() {
            let b = b.with_context(|| format!("decoding {}", path.display()))?;
            let tc = token_column(&b.schema())
                .ok_or_else(|| anyhow!("{}: no token column", path.display()))?;
            let col = b.column_by_name(&tc).unwrap();
            let sft =
                b.column_by_name("prompt_len").is_some() && b.column_by_name("file").is_some();
            for i in 0..b.num_rows() {
                let ids = ids_of(col.as_ref(), i).ok_or_else(|| {
                    anyhow!(
                        "{} row {}: {tc} is not a list of integers",
                        path.display(),
                        rows.len()
                    )
                })?;
                let o = if sft {
                    let s = |n: &str| {
                        b.column_by_name(n)
                            .and_then(|c| crate::mcq::columns::str_at(c.as_ref(), i))
                            .map(str::to_string)
                    };
                    Some(Origin {
                        id: s("id"),
                        source: s("source"),
                        repo: s("repo"),
                        commit: s("commit"),
                        file: s("file"),
                        row: b
                            .column_by_name("row")
                            .and_then(|c| crate::mcq::columns::int_at(c.as_ref(), i))
                            .map(|x| x as u64),
                        ..Origin::default()
                    })
                } else {
                    None
                };
                rows.push((ids, o));
            }
        }
        // Documents: SFT → one per row; pretraining → EOS-delimited runs across rows.
        let mut docs: Vec<(Vec<u32>, Origin, RowSpan)> = Vec::new();
        if rows.first().map(|r| r.1.is_some()).unwrap_or(false) {
            for (r, (ids, o)) in rows.into_iter().enumerate() {
                let mut o = o.unwrap_or_default();
                o.shard = Some(sh.file.clone());
                o.shard_row = Some(r as u64);
                docs.push((
                    ids,
                    o,
                    RowSpan {
                        shard: si,
                        first: r as u64,
                        last: r as u64,
                    },
                ));
            }
        } else {
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
                            let o = Origin {
                                shard: Some(sh.file.clone()),
                                shard_row: Some(first),
                                ..Origin::default()
                            };
                            docs.push((
                                std::mem::take(&mut cur),
                                o,
                                RowSpan {
                                    shard: si,
                                    first,
                                    last: r as u64,
                                },
                            ));
                        }
                    } else {
                        cur.push(t);
                    }
                }
            }
            if !cur.is_empty() {
                let last = last_row;
                let o = Origin {
                    shard: Some(sh.file.clone()),
                    shard_row: Some(first),
                    ..Origin::default()
                };
                docs.push((
                    cur,
                    o,
                    RowSpan {
                        shard: si,
                        first,
                        last,
                    },
                ));
            }
        }
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

/// A Megatron `.bin` (raw little-endian tokens of the index's dtype) split at EOS into
/// documents; rows are `seq_len` tokens, as `pack` writes them.
fn megatron_docs(
    bin: &Path,
    index: &ShardIndex,
    shard: usize,
) -> Result<(Vec<(Vec<u32>, u64)>, Vec<RowSpan>)> {
    let bytes = std::fs::read(bin).with_context(|| format!("reading {}", bin.display()))?;
    let toks: Vec<u32> = match index.dtype.as_str() {
        "uint16" => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect(),
        "uint32" | "int32" => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
        other => bail!("{}: unsupported dtype {other:?}", bin.display()),
    };
    let seq = index.seq_len.max(1);
    let eos = index.tokenizer.eos_id;
    let (mut docs, mut spans) = (Vec::new(), Vec::new());
    let mut start = 0usize;
    for (i, &t) in toks.iter().enumerate() {
        if t == eos || i + 1 == toks.len() {
            let end = if t == eos { i } else { i + 1 };
            if end > start {
                let first = start as u64 / seq;
                let last = (end as u64 - 1) / seq;
                docs.push((toks[start..end].to_vec(), first));
                spans.push(RowSpan { shard, first, last });
            }
            start = i + 1;
        }
    }
    Ok((docs, spans))
}

/// MDS samples as rows; SFT samples (with `prompt_len` and `file`) carry their provenance.
fn mds_rows(path: &Path) -> Result<Vec<(Vec<u32>, Option<Origin>)>> {
    use crate::shards::mds_read::Value;
    crate::shards::mds_read::read(path)?
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let ids = match s.get("input_ids") {
                Some(Value::Ids(v)) => v.clone(),
                _ => bail!("{} sample {i}: no input_ids array", path.display()),
            };
            let st = |k: &str| match s.get(k) {
                Some(Value::Str(x)) => Some(x.clone()),
                _ => None,
            };
            let sft = s.contains_key("prompt_len") && s.contains_key("file");
            let o = sft.then(|| Origin {
                id: st("id"),
                source: st("source"),
                repo: st("repo"),
                commit: st("commit"),
                file: st("file"),
                row: match s.get("row") {
                    Some(Value::U32(r)) => Some(*r as u64),
                    _ => None,
                },
                ..Origin::default()
            });
            Ok((ids, o))
        })
        .collect()
}
