//! Why soft labels survive kills and workers byte for byte: `--top-k`'s sidecar
//! (`OUT.topk.parquet`) is written through distill's parts protocol. Each committed unit's rows
//! go to `OUT.parts/IIIII-of-NNNNN.topk-KKKKKKKK.parquet` (atomic, before the unit's commit
//! line, so a committed unit always has its file; a unit redone after a kill rewrites the same
//! bytes); [`finalize`] (distill's own end and `merge`) streams them, in prompt order, into the
//! sidecar: `id` string, `position` int32 (index into `response_ids`, continued into
//! `tail_ids`), `ids` list<uint32> most probable first, `logprobs` list<float32>, `logsumexp`
//! float32; one row group per prompt, its committed positions in order
//! (docs/formats/distilled-json.md#top-k-sidecar).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use arrow::array::{
    Array, AsArray, Float32Array, Float32Builder, Int32Array, ListBuilder, RecordBatch,
    StringArray, UInt32Builder,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::sampling::trajectory::RowTrace;

/// `OUT.topk.parquet` for `--out OUT`.
pub fn sidecar_path(out: &Path) -> PathBuf {
    let mut s = out.as_os_str().to_owned();
    s.push(".topk.parquet");
    PathBuf::from(s)
}

/// The unit file of batch `k` committed in `part` (`….jsonl` → `….topk-KKKKKKKK.parquet`).
pub fn unit_path(part: &Path, k: usize) -> PathBuf {
    part.with_extension(format!("topk-{k:08}.parquet"))
}

/// The sidecar's schema (the contract of issue 55).
pub fn schema() -> SchemaRef {
    let item = |t| Arc::new(Field::new_list_field(t, true));
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("position", DataType::Int32, false),
        Field::new("ids", DataType::List(item(DataType::UInt32)), false),
        Field::new("logprobs", DataType::List(item(DataType::Float32)), false),
        Field::new("logsumexp", DataType::Float32, false),
    ]))
}

fn props() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(3).expect("level 3")))
        .build()
}

/// One prompt's rows: its committed positions in order.
fn prompt_batch(id: &str, t: &RowTrace) -> Result<RecordBatch> {
    let mut pos = Vec::new();
    let mut ids = ListBuilder::new(UInt32Builder::new());
    let mut lps = ListBuilder::new(Float32Builder::new());
    let mut lse = Vec::new();
    for (p, tk) in t.top_k.iter().enumerate() {
        let Some(tk) = tk else { continue };
        pos.push(i32::try_from(p).context("position beyond i32")?);
        ids.values().append_slice(&tk.ids);
        ids.append(true);
        lps.values().append_slice(&tk.logprobs);
        lps.append(true);
        lse.push(tk.logsumexp);
    }
    anyhow::ensure!(!pos.is_empty(), "prompt {id:?}: no committed position");
    let n = pos.len();
    Ok(RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(StringArray::from(vec![id; n])),
            Arc::new(Int32Array::from(pos)),
            Arc::new(ids.finish()),
            Arc::new(lps.finish()),
            Arc::new(Float32Array::from(lse)),
        ],
    )?)
}

/// Write one unit's rows (`(id, trace)` per prompt, in unit order) to `path`, atomically;
/// returns the file's sha256 (for the unit's commit line).
pub fn write_unit(path: &Path, rows: &[(&str, &RowTrace)]) -> Result<String> {
    let mut buf = Vec::new();
    let mut w = ArrowWriter::try_new(&mut buf, schema(), Some(props()))?;
    for (id, t) in rows {
        w.write(&prompt_batch(id, t)?)?;
        w.flush()?; // one row group per prompt
    }
    w.close()?;
    if let Err(e) = crate::util::atomic_write(path, &buf) {
        let _ = std::fs::remove_file(crate::util::temp_path(path));
        return Err(e);
    }
    Ok(crate::util::sha256_hex(&buf))
}

/// Check a unit file against the sha256 its commit line names.
pub fn check_unit(file: &Path, sha256: Option<&str>) -> Result<()> {
    let Some(want) = sha256 else {
        anyhow::bail!(
            "{}: its unit's commit line names no topk_sha256",
            file.display()
        );
    };
    let got = crate::util::sha256_file(file).with_context(|| {
        format!(
            "{}: the top-k rows of a committed unit are missing (rerun distill to redo it)",
            file.display()
        )
    })?;
    anyhow::ensure!(
        got == want,
        "{}: sha256 {got} differs from its commit line's topk_sha256 {want}",
        file.display()
    );
    Ok(())
}

/// One prompt's row group in a unit file, and the record it belongs to.
pub struct Source {
    pub file: PathBuf,
    /// What its unit's commit line says the file's sha256 is.
    pub sha256: Option<String>,
    pub row_group: usize,
    pub id: String,
}

/// Stream `sources` (one per prompt, in prompt order) into `OUT.topk.parquet`, atomically;
/// an unchanged sidecar keeps its bytes and mtime. A missing unit file, or a row group that is
/// not its record's, is an error naming the file.
pub fn finalize(out: &Path, sources: &[Source]) -> Result<PathBuf> {
    let path = sidecar_path(out);
    let tmp = crate::util::temp_path(&path);
    let r = (|| -> Result<()> {
        let f = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        let mut w = ArrowWriter::try_new(f, schema(), Some(props()))?;
        let mut checked = std::collections::HashSet::new();
        for s in sources {
            if checked.insert(&s.file) {
                check_unit(&s.file, s.sha256.as_deref())?;
            }
            let f = File::open(&s.file).with_context(|| {
                format!(
                    "{}: the top-k rows of a committed unit are missing (rerun distill to redo it)",
                    s.file.display()
                )
            })?;
            let b = ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("reading {}", s.file.display()))?;
            let groups = b.metadata().num_row_groups();
            anyhow::ensure!(
                s.row_group < groups,
                "{}: {groups} row groups, the unit's record {} needs row group {}",
                s.file.display(),
                s.id,
                s.row_group
            );
            for batch in b.with_row_groups(vec![s.row_group]).build()? {
                let batch = batch.with_context(|| format!("reading {}", s.file.display()))?;
                let ids = batch.column(0).as_string::<i32>();
                if let Some(bad) = (0..ids.len()).find(|&i| ids.value(i) != s.id) {
                    anyhow::bail!(
                        "{}: row group {} holds id {:?}, its record is {:?}",
                        s.file.display(),
                        s.row_group,
                        ids.value(bad),
                        s.id
                    );
                }
                w.write(&batch)?;
            }
            w.flush()?;
        }
        let mut f = w.into_inner()?;
        f.flush()?;
        f.sync_all()?;
        Ok(())
    })();
    if let Err(e) = r {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if std::fs::read(&path).ok() == std::fs::read(&tmp).ok() {
        std::fs::remove_file(&tmp)?;
    } else {
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("renaming {} to {}", tmp.display(), path.display()))?;
    }
    Ok(path)
}

fn open(path: &Path) -> Result<ParquetRecordBatchReaderBuilder<File>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let b = ParquetRecordBatchReaderBuilder::try_new(f)
        .with_context(|| format!("{}: not a parquet file", path.display()))?;
    anyhow::ensure!(
        b.schema().fields() == schema().fields(),
        "{}: not a top-k sidecar (schema {:?})",
        path.display(),
        b.schema()
    );
    Ok(b)
}

/// The rows of row group `g` (record `g`'s, in a finished sidecar); None past the last.
pub fn read_group(path: &Path, g: usize) -> Result<Option<Vec<SidecarRow>>> {
    let b = open(path)?;
    if g >= b.metadata().num_row_groups() {
        return Ok(None);
    }
    let mut rows = Vec::new();
    for batch in b.with_row_groups(vec![g]).build()? {
        rows_of(&batch?, &mut rows);
    }
    Ok(Some(rows))
}

fn rows_of(batch: &RecordBatch, rows: &mut Vec<SidecarRow>) {
    let id = batch.column(0).as_string::<i32>();
    let pos = batch
        .column(1)
        .as_primitive::<arrow::datatypes::Int32Type>();
    let ids = batch.column(2).as_list::<i32>();
    let lps = batch.column(3).as_list::<i32>();
    let lse = batch
        .column(4)
        .as_primitive::<arrow::datatypes::Float32Type>();
    for i in 0..batch.num_rows() {
        rows.push(SidecarRow {
            id: id.value(i).to_string(),
            position: pos.value(i),
            ids: ids
                .value(i)
                .as_primitive::<arrow::datatypes::UInt32Type>()
                .values()
                .to_vec(),
            logprobs: lps
                .value(i)
                .as_primitive::<arrow::datatypes::Float32Type>()
                .values()
                .to_vec(),
            logsumexp: lse.value(i),
        });
    }
}

/// Every row of a sidecar (audit, tests) and each row's row group.
pub fn read(path: &Path) -> Result<Vec<(usize, SidecarRow)>> {
    let b = open(path)?;
    let groups: Vec<usize> = b
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows() as usize)
        .collect();
    let mut rows = Vec::new();
    for batch in b.build()? {
        rows_of(&batch?, &mut rows);
    }
    let mut out = Vec::with_capacity(rows.len());
    let mut it = rows.into_iter();
    for (g, n) in groups.into_iter().enumerate() {
        for _ in 0..n {
            out.push((g, it.next().context("row group sizes beyond the rows")?));
        }
    }
    Ok(out)
}

/// One sidecar row.
#[derive(Debug, Clone, PartialEq)]
pub struct SidecarRow {
    pub id: String,
    pub position: i32,
    pub ids: Vec<u32>,
    pub logprobs: Vec<f32>,
    pub logsumexp: f32,
}
