//! SFT rows ↔ the shared shard writers of [`crate::shards`]: one [`RowBatch`] per shard with
//! `input_ids` (prompt ++ answer ++ EOS) and the per-row columns `id`, `prompt_len`, `length`,
//! `source`, `repo`, `commit`, `file: utf8`, `row: uint32`. Megatron has no per-row columns,
//! so there each row is one document of two sequences, prompt and answer (`doc_offsets`
//! `[0, prompt_len, length]`): `prompt_len` is the first sequence length in the `.idx`, and
//! the per-row columns go to a `part-NNNNN.rows.jsonl` sidecar (one JSON object per row,
//! listed in the shard's `extra_files`, so `audit` re-hashes it).
//! [`read_dir`] reads any of the three formats back (tests, decontam).

use std::path::Path;

use anyhow::{anyhow, bail, ensure, Context, Result};

use super::sft::SftRow;
use crate::shards::ShardFormat;
use crate::shards::{mds_read, Column, RowBatch};

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

/// Every SFT row of the shard directory `dir`, in order. Megatron rows without a sidecar
/// carry no id or provenance (empty strings, row 0).
pub fn read_dir(dir: &Path) -> Result<Vec<SftRow>> {
    let idx = crate::shards::index::load_complete(dir)?;
    let mut out = Vec::new();
    for sh in &idx.shards {
        let path = dir.join(&sh.file);
        let rows = match idx.format.as_str() {
            "parquet" => read_parquet(&path)?,
            "mds" => read_mds(&path)?,
            "megatron" => read_megatron(&path, &idx.dtype)?,
            f => bail!("{}: unknown format {f:?}", dir.display()),
        };
        ensure!(
            rows.len() as u64 == sh.rows,
            "{}: {} rows, index.json says {}",
            path.display(),
            rows.len(),
            sh.rows
        );
        out.extend(rows);
    }
    Ok(out)
}

fn read_parquet(path: &Path) -> Result<Vec<SftRow>> {
    use crate::mcq::columns::{int_at, str_at};
    use arrow::array::AsArray;
    use arrow::datatypes::UInt32Type;
    let reader = crate::sources::guarded::open(path)?;
    let mut out = Vec::new();
    for b in reader {
        let b = b?;
        let col = |n: &str| {
            b.column_by_name(n)
                .cloned()
                .ok_or_else(|| anyhow!("{}: no column {n}", path.display()))
        };
        let toks = col("input_ids")?;
        let toks = toks.as_list::<i32>();
        let named: Vec<_> = [
            "id",
            "source",
            "repo",
            "commit",
            "file",
            "prompt_len",
            "row",
        ]
        .iter()
        .map(|n| col(n))
        .collect::<Result<_>>()?;
        for i in 0..b.num_rows() {
            let s = |k: usize| {
                str_at(named[k].as_ref(), i)
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("{} row {i}: bad string column", path.display()))
            };
            let n = |k: usize| {
                int_at(named[k].as_ref(), i)
                    .ok_or_else(|| anyhow!("{} row {i}: bad integer column", path.display()))
            };
            let v = toks.value(i);
            let v = v.as_primitive::<UInt32Type>();
            out.push(SftRow {
                id: s(0)?,
                prov: crate::provenance::Provenance {
                    source: s(1)?,
                    repo: s(2)?,
                    commit: s(3)?,
                    file: s(4)?,
                    row: n(6)? as u64,
                },
                input_ids: v.values().to_vec(),
                prompt_len: n(5)? as u32,
            });
        }
    }
    Ok(out)
}

fn read_mds(path: &Path) -> Result<Vec<SftRow>> {
    use mds_read::Value;
    mds_read::read(path)?
        .into_iter()
        .enumerate()
        .map(|(i, mut s)| {
            let mut take = |k: &str| {
                s.remove(k)
                    .ok_or_else(|| anyhow!("{} sample {i}: no column {k}", path.display()))
            };
            let (Value::Ids(ids), Value::U32(pl), Value::U32(row)) =
                (take("input_ids")?, take("prompt_len")?, take("row")?)
            else {
                bail!("{} sample {i}: wrong column types", path.display());
            };
            let mut st = |k: &str| match take(k)? {
                Value::Str(x) => Ok(x),
                _ => Err(anyhow!(
                    "{} sample {i}: {k} is not a string",
                    path.display()
                )),
            };
            Ok(SftRow {
                id: st("id")?,
                prov: crate::provenance::Provenance {
                    source: st("source")?,
                    repo: st("repo")?,
                    commit: st("commit")?,
                    file: st("file")?,
                    row: row as u64,
                },
                input_ids: ids,
                prompt_len: pl,
            })
        })
        .collect()
}

/// `.idx` of a Megatron shard: (sequence lengths, document indices).
pub fn megatron_idx(idx_path: &Path) -> Result<(Vec<u32>, Vec<u64>)> {
    let b = std::fs::read(idx_path).with_context(|| format!("reading {}", idx_path.display()))?;
    let bad = || anyhow!("{}: not a Megatron .idx", idx_path.display());
    ensure!(
        b.len() >= 34 && &b[..9] == crate::shards::megatron::MAGIC,
        bad()
    );
    let s = u64::from_le_bytes(b[18..26].try_into().unwrap());
    let d = u64::from_le_bytes(b[26..34].try_into().unwrap());
    // Checked: a hostile header must not overflow into a length that matches.
    let want = 12u64
        .checked_mul(s)
        .zip(8u64.checked_mul(d))
        .and_then(|(a, c)| a.checked_add(c)?.checked_add(34));
    ensure!(want == Some(b.len() as u64), bad());
    let (s, d) = (s as usize, d as usize);
    let lens: Vec<u32> = (0..s)
        .map(|i| i32::from_le_bytes(b[34 + 4 * i..38 + 4 * i].try_into().unwrap()))
        .map(|l| {
            u32::try_from(l)
                .map_err(|_| anyhow!("{}: negative sequence length {l}", idx_path.display()))
        })
        .collect::<Result<_>>()?;
    let p = 34 + 12 * s;
    let docs: Vec<u64> = (0..d)
        .map(|i| i64::from_le_bytes(b[p + 8 * i..p + 8 + 8 * i].try_into().unwrap()) as u64)
        .collect();
    // Document indices must walk the sequences in order, and a document's tokens fit u32.
    for (k, w) in docs.windows(2).enumerate() {
        ensure!(
            w[0] <= w[1] && w[1] <= s as u64,
            "{}: document index {} ({}..{}) out of order or past the {s} sequences",
            idx_path.display(),
            k,
            w[0],
            w[1]
        );
        let sum: u64 = lens[w[0] as usize..w[1] as usize]
            .iter()
            .map(|&l| l as u64)
            .sum();
        ensure!(
            sum <= u32::MAX as u64,
            "{}: document {k} has {sum} tokens",
            idx_path.display()
        );
    }
    Ok((lens, docs))
}

/// Rows of one Megatron SFT shard, with id and provenance from its sidecar when present.
pub fn read_megatron(bin: &Path, dtype: &str) -> Result<Vec<SftRow>> {
    let (lens, docs) = megatron_idx(&bin.with_extension("idx"))?;
    let bytes = std::fs::read(bin).with_context(|| format!("reading {}", bin.display()))?;
    let toks: Vec<u32> = match dtype {
        "uint16" => bytes
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]) as u32)
            .collect(),
        _ => bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    for w in docs.windows(2) {
        let seqs = &lens[w[0] as usize..w[1] as usize];
        ensure!(
            seqs.len() == 2,
            "{}: an SFT document has {} sequences, not 2",
            bin.display(),
            seqs.len()
        );
        let n = (seqs[0] + seqs[1]) as usize;
        ensure!(
            at + n <= toks.len(),
            "{}: .bin shorter than .idx says",
            bin.display()
        );
        out.push(SftRow {
            id: String::new(),
            prov: crate::provenance::Provenance {
                source: String::new(),
                repo: String::new(),
                commit: String::new(),
                file: String::new(),
                row: 0,
            },
            input_ids: toks[at..at + n].to_vec(),
            prompt_len: seqs[0],
        });
        at += n;
    }
    ensure!(
        at == toks.len(),
        "{}: .bin longer than .idx says",
        bin.display()
    );
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
