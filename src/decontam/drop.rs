//! `--drop OUT`: the scanned data without the contaminated documents. prompts.jsonl → the
//! other lines byte-identical; shards → every row a contaminated document touches removed,
//! shards rewritten in their own format (parquet here, MDS and Megatron through
//! [`super::rewrite`]), index.json recomputed (sha256, bytes, rows, tokens) and
//! written last, so a copy with an index is complete.

use std::collections::{BTreeSet, HashSet};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use arrow::array::{Array, AsArray, BooleanArray};
use arrow::compute::filter_record_batch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::targets::{Kind, Target};
use crate::shards::index::{self as shard_index, ShardEntry};
use crate::shards::outdir::{self, Claim};
use crate::shards::ShardFormat;

/// What a drop removed.
pub struct Dropped {
    pub documents: u64,
    pub rows: u64,
}

/// Write the filtered copy of `target` to `out`, leaving out documents in `bad`.
pub fn write(target: &Target, bad: &HashSet<usize>, out: &Path, force: bool) -> Result<Dropped> {
    match &target.kind {
        Kind::Prompts { lines } => {
            claim_file(out, &target.path, force)?;
            let mut buf = Vec::new();
            for (i, l) in lines.iter().enumerate() {
                if !bad.contains(&i) {
                    buf.extend_from_slice(l.as_bytes());
                    buf.push(b'\n');
                }
            }
            crate::util::atomic_write(out, &buf)?;
            Ok(Dropped {
                documents: bad.len() as u64,
                rows: bad.len() as u64,
            })
        }
        Kind::Shards { dir, index, spans } => {
            if out == dir.as_path() {
                return Err(crate::error::usage(
                    "--drop must name a new directory, not the scanned one",
                ));
            }
            // Replace only what an earlier dlm-data run there journaled; never the input.
            let mut claim = Claim::new("decontam --drop", force)
                .inputs([dir.as_path()])
                .inputs(index_tokenizer(index).as_deref());
            if let Some(old) = outdir::own_index(out) {
                claim = claim
                    .remove(outdir::journal_files(&old))
                    .remove([crate::shards::outdir::DECONTAM_REPORT]);
            }
            claim.apply(out)?;
            std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
            let mut drop_rows: Vec<BTreeSet<u64>> = vec![BTreeSet::new(); index.shards.len()];
            for d in bad {
                let s = spans[*d];
                for r in s.first..=s.last {
                    drop_rows[s.shard].insert(r);
                }
            }
            let mut shards = Vec::new();
            let mut mds_entries = Vec::new();
            let mut dropped_rows = 0;
            for (si, sh) in index.shards.iter().enumerate() {
                crate::signals::check()?;
                if index.format == ShardFormat::Parquet {
                    let (entry, n) =
                        filter_shard(&dir.join(&sh.file), &out.join(&sh.file), &drop_rows[si])?;
                    dropped_rows += n;
                    shards.push(ShardEntry {
                        file: sh.file.clone(),
                        ..entry
                    });
                } else {
                    let (w, n) = super::rewrite::rewrite(index, dir, out, si, &drop_rows[si])?;
                    dropped_rows += n;
                    shards.push(w.entry);
                    mds_entries.extend(w.mds);
                }
            }
            let mut new = index.clone();
            let rows: u64 = shards.iter().map(|s| s.rows).sum();
            let tokens: u64 = shards.iter().map(|s| s.tokens).sum();
            new.shards = shards;
            new.totals.rows = rows;
            new.totals.tokens = tokens;
            new.totals.documents = new.totals.documents.saturating_sub(bad.len() as u64);
            new.totals.extra.insert(
                "dropped_contaminated_documents".into(),
                (bad.len() as u64).into(),
            );
            new.totals
                .extra
                .insert("dropped_contaminated_rows".into(), dropped_rows.into());
            new.extra.insert(
                "decontam_filtered_from".into(),
                serde_json::json!({"path": dir.display().to_string(), "index_sha256": target.sha256}),
            );
            let mds = (index.format == ShardFormat::Mds).then_some(mds_entries.as_slice());
            shard_index::save(out, &new, mds)?;
            Ok(Dropped {
                documents: bad.len() as u64,
                rows: dropped_rows,
            })
        }
    }
}

/// `--drop FILE` for prompts: never the scanned file; an existing file only when it is a
/// prompts.jsonl this tool wrote (or with `--force`).
fn claim_file(out: &Path, input: &Path, force: bool) -> Result<()> {
    let same = match (std::fs::canonicalize(out), std::fs::canonicalize(input)) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if same {
        return Err(crate::error::usage(format!(
            "--drop {}: that is the scanned file; name a new file",
            out.display()
        )));
    }
    if out.is_dir() {
        return Err(crate::error::usage(format!(
            "--drop {}: is a directory; --prompts needs a file",
            out.display()
        )));
    }
    if out.exists() && !force && !crate::mcq::prompts::is_own_file(out) {
        return Err(crate::error::refused(format!(
            "--drop {}: the file exists and is not a prompts.jsonl dlm-data wrote; refusing to overwrite it (name a new file, or --force)",
            out.display()
        )));
    }
    Ok(())
}

/// The tokenizer an index names (an input of the scan, never removed).
fn index_tokenizer(index: &shard_index::Index) -> Option<std::path::PathBuf> {
    Some(std::path::PathBuf::from(&index.tokenizer.path))
}

fn filter_shard(src: &Path, dst: &Path, drop: &BTreeSet<u64>) -> Result<(ShardEntry, u64)> {
    if let Some(parent) = dst.parent() {
        // Parquet shards sit in `data/`.
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let tmp = crate::util::temp_path(dst);
    let r = filter_shard_to(src, dst, &tmp, drop);
    if r.is_err() {
        // A failed write (a full disk...) leaves no hidden temp file behind.
        let _ = std::fs::remove_file(&tmp);
    }
    r.with_context(|| format!("writing {}", dst.display()))
}

fn filter_shard_to(
    src: &Path,
    dst: &Path,
    tmp: &Path,
    drop: &BTreeSet<u64>,
) -> Result<(ShardEntry, u64)> {
    let reader = crate::shards::guarded::open(src)?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .build();
    let mut writer: Option<ArrowWriter<File>> = None;
    let mut row = 0u64;
    let (mut rows, mut tokens, mut dropped) = (0u64, 0u64, 0u64);
    for b in reader {
        let b = b?;
        let keep: BooleanArray = (0..b.num_rows() as u64)
            .map(|i| Some(!drop.contains(&(row + i))))
            .collect();
        row += b.num_rows() as u64;
        let fb = filter_record_batch(&b, &keep)?;
        dropped += (b.num_rows() - fb.num_rows()) as u64;
        rows += fb.num_rows() as u64;
        let tc = ["input_ids", "tokens", "ids"]
            .iter()
            .find_map(|n| fb.column_by_name(n))
            .ok_or_else(|| anyhow!("{}: no token column", src.display()))?;
        tokens += match tc.data_type() {
            arrow::datatypes::DataType::List(_) => {
                let l = tc.as_list::<i32>();
                (0..l.len()).map(|i| l.value_length(i) as u64).sum::<u64>()
            }
            arrow::datatypes::DataType::LargeList(_) => {
                let l = tc.as_list::<i64>();
                (0..l.len()).map(|i| l.value_length(i) as u64).sum::<u64>()
            }
            _ => 0,
        };
        let w = match &mut writer {
            Some(w) => w,
            None => {
                let file =
                    File::create(tmp).with_context(|| format!("creating {}", tmp.display()))?;
                writer = Some(ArrowWriter::try_new(
                    file,
                    Arc::new(fb.schema().as_ref().clone()),
                    Some(props.clone()),
                )?);
                writer.as_mut().unwrap()
            }
        };
        w.write(&fb)?;
    }
    let w = writer.ok_or_else(|| anyhow!("{}: empty shard", src.display()))?;
    let mut file = w.into_inner()?;
    file.flush()?;
    file.sync_all()?;
    crate::util::commit_rename(tmp, dst)?;
    Ok((
        ShardEntry {
            file: String::new(),
            sha256: crate::util::sha256_file(dst)?,
            bytes: std::fs::metadata(dst)?.len(),
            rows,
            tokens,
            extra_files: Default::default(),
        },
        dropped,
    ))
}
