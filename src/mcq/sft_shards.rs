//! SFT rows ↔ the shared shard writers of [`crate::shards`]: one [`RowBatch`] per shard with
//! `input_ids` (prompt ++ answer ++ EOS) and the per-row columns `id`, `prompt_len`, `length`,
//! `source`, `repo`, `commit`, `file: utf8`, `row: uint32`. Megatron has no per-row columns,
//! so there each row is one document of two sequences, prompt and answer (`doc_offsets`
//! `[0, prompt_len, length]`): `prompt_len` is the first sequence length in the `.idx`, and
//! the per-row columns go to a `part-NNNNN.rows.jsonl` sidecar (one JSON object per row,
//! listed in the shard's `extra_files`, so `audit` re-hashes it).
//! [`read_dir`] reads any of the three formats back through [`crate::shards::ShardReader`]
//! (tests, decontam).

use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};

use super::sft::SftRow;
use crate::shards::{Column, Dtype, RowBatch, ShardFormat};

/// The shard batch for `rows`.
pub fn to_batch(rows: &[&SftRow], format: ShardFormat) -> Result<RowBatch> {
    let strs =
        |f: &dyn Fn(&SftRow) -> &str| Column::Str(rows.iter().map(|r| f(r).to_string()).collect());
    let row_col = rows
        .iter()
        .map(|r| {
            u32::try_from(r.prov.row)
                .map_err(|_| anyhow!("{}: source row {} over 2^32", r.id, r.prov.row))
        })
        .collect::<Result<Vec<u32>>>()?;
    let mut columns = vec![
        ("id".to_string(), strs(&|r| r.id.as_str())),
        (
            "prompt_len".into(),
            Column::U32(rows.iter().map(|r| r.prompt_len).collect()),
        ),
        (
            "length".into(),
            Column::U32(rows.iter().map(|r| r.input_ids.len() as u32).collect()),
        ),
        ("source".into(), strs(&|r| r.prov.source.as_str())),
        ("repo".into(), strs(&|r| r.prov.repo.as_str())),
        ("commit".into(), strs(&|r| r.prov.commit.as_str())),
        ("file".into(), strs(&|r| r.prov.file.as_str())),
        ("row".into(), Column::U32(row_col)),
    ];
    if format == ShardFormat::Megatron {
        columns.push((
            "doc_offsets".into(),
            Column::U32List(
                rows.iter()
                    .map(|r| vec![0, r.prompt_len, r.input_ids.len() as u32])
                    .collect(),
            ),
        ));
    }
    Ok(RowBatch {
        input_ids: rows.iter().map(|r| r.input_ids.clone()).collect(),
        columns,
    })
}

/// `part-NNNNN.rows.jsonl` beside `part-NNNNN.bin`.
pub fn sidecar_name(bin_file: &str) -> String {
    format!("{}.rows.jsonl", bin_file.trim_end_matches(".bin"))
}

/// Write the Megatron sidecar of `rows` for the shard whose `.bin` is `bin_file`; returns
/// (file name, sha256).
pub fn write_sidecar(dir: &Path, bin_file: &str, rows: &[&SftRow]) -> Result<(String, String)> {
    let mut buf = Vec::new();
    for r in rows {
        serde_json::to_writer(
            &mut buf,
            &serde_json::json!({"id": r.id, "source": r.prov.source, "repo": r.prov.repo,
                "commit": r.prov.commit, "file": r.prov.file, "row": r.prov.row,
                "prompt_len": r.prompt_len, "length": r.input_ids.len()}),
        )?;
        buf.push(b'\n');
    }
    let name = sidecar_name(bin_file);
    let (sha, _) = crate::shards::write_durable(dir, &name, &buf)?;
    Ok((name, sha))
}

/// Every SFT row of the shard directory `dir`, in order, read through the index's
/// [`crate::shards::ShardReader`]. Megatron rows without a sidecar carry no id or provenance
/// (empty strings, row 0).
pub fn read_dir(dir: &Path) -> Result<Vec<SftRow>> {
    let idx = crate::shards::index::load_complete(dir)?;
    let mut out = Vec::new();
    for (k, sh) in idx.shards.iter().enumerate() {
        let batch = idx.read_shard(dir, k)?;
        out.extend(rows_of(&batch, idx.format, &dir.join(&sh.file))?);
    }
    Ok(out)
}

/// The SFT rows of one shard's batch (`path` names the shard in errors; a Megatron shard's
/// sidecar is read beside it).
pub fn rows_of(b: &RowBatch, format: ShardFormat, path: &Path) -> Result<Vec<SftRow>> {
    if format == ShardFormat::Megatron {
        return megatron_rows(b, path);
    }
    let col = |n: &str| {
        b.column(n)
            .ok_or_else(|| anyhow!("{}: no column {n}", path.display()))
    };
    let strs = |n: &str| match col(n)? {
        Column::Str(v) => Ok(v),
        _ => Err(anyhow!("{}: column {n} is not a string", path.display())),
    };
    let ints = |n: &str| match col(n)? {
        Column::U32(v) => Ok(v),
        _ => Err(anyhow!("{}: column {n} is not uint32", path.display())),
    };
    let (id, source, repo, commit, file) = (
        strs("id")?,
        strs("source")?,
        strs("repo")?,
        strs("commit")?,
        strs("file")?,
    );
    let (prompt_len, row) = (ints("prompt_len")?, ints("row")?);
    Ok((0..b.rows())
        .map(|i| SftRow {
            id: id[i].clone(),
            prov: crate::provenance::Provenance {
                source: source[i].clone(),
                repo: repo[i].clone(),
                commit: commit[i].clone(),
                file: file[i].clone(),
                row: row[i] as u64,
            },
            input_ids: b.input_ids[i].clone(),
            prompt_len: prompt_len[i],
        })
        .collect())
}

/// Megatron SFT rows: each `.idx` document is prompt and answer (two sequences); id and
/// provenance come from the `.rows.jsonl` sidecar when present.
fn megatron_rows(b: &RowBatch, bin: &Path) -> Result<Vec<SftRow>> {
    let Some(Column::U32List(offs)) = b.column("doc_offsets") else {
        bail!("{}: no sequence boundaries", bin.display());
    };
    let mut out = Vec::with_capacity(b.rows());
    for (ids, o) in b.input_ids.iter().zip(offs) {
        ensure!(
            o.len() == 3,
            "{}: an SFT document has {} sequences, not 2",
            bin.display(),
            o.len() - 1
        );
        out.push(SftRow {
            id: String::new(),
            prov: crate::provenance::Provenance::default(),
            input_ids: ids.clone(),
            prompt_len: o[1],
        });
    }
    let name = bin.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let side = bin.with_file_name(sidecar_name(name));
    if side.exists() {
        let text = std::fs::read_to_string(&side)
            .with_context(|| format!("reading {}", side.display()))?;
        let lines: Vec<&str> = text.lines().collect();
        ensure!(
            lines.len() == out.len(),
            "{}: {} lines for {} rows",
            side.display(),
            lines.len(),
            out.len()
        );
        for (i, (l, r)) in lines.iter().zip(&mut out).enumerate() {
            let v: serde_json::Value = serde_json::from_str(l)
                .with_context(|| format!("{} line {}: not JSON", side.display(), i + 1))?;
            let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            ensure!(
                v["prompt_len"].as_u64() == Some(r.prompt_len as u64),
                "{} line {}: prompt_len disagrees with the .idx",
                side.display(),
                i + 1
            );
            r.id = s("id");
            r.prov = crate::provenance::Provenance {
                source: s("source"),
                repo: s("repo"),
                commit: s("commit"),
                file: s("file"),
                row: v["row"].as_u64().unwrap_or(0),
            };
        }
    }
    Ok(out)
}

/// Rows of one Megatron SFT shard (`part-NNNNN.bin`), with id and provenance from its
/// sidecar when present.
pub fn read_megatron(bin: &Path, dtype: Dtype) -> Result<Vec<SftRow>> {
    megatron_rows(&crate::shards::megatron::read(bin, dtype)?, bin)
}
