//! SFT rows as parquet shards (`shard-00000.parquet`, zstd): columns `id: utf8`,
//! `input_ids: list<uint32>`, `prompt_len: uint32`, `length: uint32`, and the row's
//! provenance `source, repo, commit, file: utf8`, `row: uint64`. Each shard is written to a
//! temp name and renamed, so a shard that exists is complete.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow::array::{
    ArrayRef, ListBuilder, RecordBatch, StringArray, UInt32Array, UInt32Builder, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use super::sft::SftRow;
use super::shard_index::ShardEntry;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new(
            "input_ids",
            DataType::List(Arc::new(Field::new("item", DataType::UInt32, true))),
            false,
        ),
        Field::new("prompt_len", DataType::UInt32, false),
        Field::new("length", DataType::UInt32, false),
        Field::new("source", DataType::Utf8, false),
        Field::new("repo", DataType::Utf8, false),
        Field::new("commit", DataType::Utf8, false),
        Field::new("file", DataType::Utf8, false),
        Field::new("row", DataType::UInt64, false),
    ]))
}

fn batch(rows: &[&SftRow]) -> Result<RecordBatch> {
    let ids = StringArray::from_iter_values(rows.iter().map(|r| r.id.as_str()));
    let mut lb = ListBuilder::new(UInt32Builder::new());
    for r in rows {
        lb.values().append_slice(&r.input_ids);
        lb.append(true);
    }
    let plen = UInt32Array::from_iter_values(rows.iter().map(|r| r.prompt_len));
    let len = UInt32Array::from_iter_values(rows.iter().map(|r| r.input_ids.len() as u32));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(ids),
        Arc::new(lb.finish()),
        Arc::new(plen),
        Arc::new(len),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.prov.source.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.prov.repo.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.prov.commit.as_str()),
        )),
        Arc::new(StringArray::from_iter_values(
            rows.iter().map(|r| r.prov.file.as_str()),
        )),
        Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.prov.row),
        )),
    ];
    Ok(RecordBatch::try_new(schema(), cols)?)
}

/// Write `rows` into `dir` as shards of at most `rows_per_shard` rows.
pub fn write_shards(
    dir: &Path,
    rows: &[&SftRow],
    rows_per_shard: usize,
) -> Result<Vec<ShardEntry>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3)?))
        .set_max_row_group_row_count(Some(8192))
        .build();
    let mut entries = Vec::new();
    for (k, chunk) in rows.chunks(rows_per_shard.max(1)).enumerate() {
        let name = format!("shard-{k:05}.parquet");
        let path = dir.join(&name);
        let tmp = crate::util::temp_path(&path);
        {
            let f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
            let mut w = ArrowWriter::try_new(f, schema(), Some(props.clone()))?;
            for sub in chunk.chunks(8192) {
                w.write(&batch(sub)?)?;
            }
            let f = w.into_inner()?;
            f.sync_all()?;
        }
        crate::util::commit_rename(&tmp, &path)?;
        entries.push(ShardEntry {
            sha256: crate::util::sha256_file(&path)?,
            bytes: std::fs::metadata(&path)?.len(),
            rows: chunk.len() as u64,
            tokens: chunk.iter().map(|r| r.input_ids.len() as u64).sum(),
            file: name,
            extra_files: Default::default(),
        });
    }
    Ok(entries)
}

/// Read an SFT shard back (tests, decontam).
pub fn read_shard(path: &Path) -> Result<Vec<SftRow>> {
    use arrow::array::AsArray;
    use arrow::datatypes::{UInt32Type, UInt64Type};
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let reader =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)?.build()?;
    let mut out = Vec::new();
    for b in reader {
        let b = b?;
        let col = |n: &str| {
            b.column_by_name(n)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("{}: no column {n}", path.display()))
        };
        let ids = col("id")?;
        let ids = ids.as_string::<i32>();
        let toks = col("input_ids")?;
        let toks = toks.as_list::<i32>();
        let plen = col("prompt_len")?;
        let plen = plen.as_primitive::<UInt32Type>();
        let strs: Vec<_> = ["source", "repo", "commit", "file"]
            .iter()
            .map(|n| col(n))
            .collect::<Result<_>>()?;
        let rowc = col("row")?;
        let rowc = rowc.as_primitive::<UInt64Type>();
        for i in 0..b.num_rows() {
            let v = toks.value(i);
            let v = v.as_primitive::<UInt32Type>();
            out.push(SftRow {
                id: ids.value(i).to_string(),
                prov: crate::provenance::Provenance {
                    source: strs[0].as_string::<i32>().value(i).to_string(),
                    repo: strs[1].as_string::<i32>().value(i).to_string(),
                    commit: strs[2].as_string::<i32>().value(i).to_string(),
                    file: strs[3].as_string::<i32>().value(i).to_string(),
                    row: rowc.value(i),
                },
                input_ids: (0..v.len()).map(|j| v.value(j)).collect(),
                prompt_len: plen.value(i),
            });
        }
    }
    Ok(out)
}
