//! Shard writers, one module per format, and the `index.json` every output carries.
//!
//! A writer takes a [`RowBatch`] — rows of token ids plus per-row metadata columns — and
//! writes one shard durably: a temp name in the output directory, fsync, rename. Only then
//! does the caller record it in the index (the progress journal). `pack` writes rows of
//! `input_ids` + `doc_offsets` + `source`; the SFT set reuses the same writers with its own
//! columns (e.g. a `prompt_len`).

pub mod card;
pub mod guarded;
pub mod index;
pub mod index_schema;
pub mod mds;
pub mod mds_read;
pub mod megatron;
pub mod outdir;
pub mod parquet;
pub mod settings;
pub mod staged;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use anyhow::{Context, Result};

pub use index::ShardEntry;

/// Output shard format.
#[derive(
    clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum ShardFormat {
    Parquet,
    Mds,
    Megatron,
}

impl ShardFormat {
    pub fn name(self) -> &'static str {
        match self {
            ShardFormat::Parquet => "parquet",
            ShardFormat::Mds => "mds",
            ShardFormat::Megatron => "megatron",
        }
    }
}

/// One metadata column of a [`RowBatch`].
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    /// A list of u32 per row (e.g. `doc_offsets`).
    U32List(Vec<Vec<u32>>),
    /// A u32 per row (e.g. `prompt_len`).
    U32(Vec<u32>),
    /// A string per row (e.g. `source`).
    Str(Vec<String>),
}

impl Column {
    pub fn len(&self) -> usize {
        match self {
            Column::U32List(v) => v.len(),
            Column::U32(v) => v.len(),
            Column::Str(v) => v.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// An empty column of the same kind (a schema without rows).
    pub fn empty_like(&self) -> Column {
        match self {
            Column::U32List(_) => Column::U32List(Vec::new()),
            Column::U32(_) => Column::U32(Vec::new()),
            Column::Str(_) => Column::Str(Vec::new()),
        }
    }
}

/// Rows of token ids (`input_ids`) plus named metadata columns, in row order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RowBatch {
    pub input_ids: Vec<Vec<u32>>,
    /// Column name → values; every column has one value per row.
    pub columns: Vec<(String, Column)>,
}

impl RowBatch {
    pub fn rows(&self) -> usize {
        self.input_ids.len()
    }
    pub fn tokens(&self) -> u64 {
        self.input_ids.iter().map(|r| r.len() as u64).sum()
    }
    /// A column by name.
    pub fn column(&self, name: &str) -> Option<&Column> {
        self.columns.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }
    fn check(&self) -> Result<()> {
        for (n, c) in &self.columns {
            anyhow::ensure!(
                c.len() == self.rows(),
                "column {n}: {} values for {} rows",
                c.len(),
                self.rows()
            );
        }
        Ok(())
    }
}

/// Token id width on disk (MDS and Megatron; parquet is always uint32). Recorded in
/// `index.json` as `"uint32"` / `"uint16"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Dtype {
    /// Megatron's `.idx` code for these ids is int32 (4); older readers wrote that name.
    #[serde(rename = "uint32", alias = "int32")]
    U32,
    #[serde(rename = "uint16")]
    U16,
}

impl Dtype {
    pub fn name(self) -> &'static str {
        match self {
            Dtype::U32 => "uint32",
            Dtype::U16 => "uint16",
        }
    }
    pub fn size(self) -> usize {
        match self {
            Dtype::U32 => 4,
            Dtype::U16 => 2,
        }
    }
}

/// A shard as written: its index entry, plus the MosaicML index entry for MDS.
#[derive(Debug, Clone)]
pub struct WrittenShard {
    pub entry: ShardEntry,
    pub mds: Option<serde_json::Value>,
}

/// Write `bytes` durably as `dir/name` (`name` may sit in a subdirectory, e.g. `data/`, made
/// if missing): temp file beside it, fsync, rename, fsync dir. Returns (sha256, size).
pub(crate) fn write_durable(dir: &Path, name: &str, bytes: &[u8]) -> Result<(String, u64)> {
    let path = dir.join(name);
    let (parent, base) = match name.rsplit_once('/') {
        Some((sub, base)) => {
            let p = dir.join(sub);
            if !p.is_dir() {
                std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
                crate::util::fsync_dir(&p);
            }
            (p, base)
        }
        None => (dir.to_path_buf(), name),
    };
    let tmp = parent.join(format!(".{base}.tmp"));
    let written = (|| -> Result<()> {
        let mut f =
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
        f.write_all(bytes)
            .with_context(|| format!("writing {}", tmp.display()))?;
        f.sync_all()
            .with_context(|| format!("fsync {}", tmp.display()))?;
        crate::util::commit_rename(&tmp, &path)
    })();
    if let Err(e) = written {
        // A full disk (or any failure) leaves no temp file behind.
        let _ = std::fs::remove_file(&tmp);
        return Err(e.context(format!("writing {}", path.display())));
    }
    Ok((crate::util::sha256_hex(bytes), bytes.len() as u64))
}

/// A shard encoded in memory, not yet on disk: its files in write order (the first is the
/// shard's `file`, the others its `extra_files`, e.g. Megatron's `.idx`, written last so a
/// present `.idx` means a whole pair).
#[derive(Debug)]
pub struct EncodedShard {
    pub files: Vec<(String, Vec<u8>)>,
    pub rows: u64,
    pub tokens: u64,
    /// MDS: the shard's MosaicML index entry.
    pub mds: Option<serde_json::Value>,
}

impl EncodedShard {
    /// Write the files durably into `dir`, in order; what the index records.
    pub fn commit(self, dir: &Path) -> Result<WrittenShard> {
        let mut files = self.files.into_iter();
        let (name, bytes) = files
            .next()
            .ok_or_else(|| anyhow::anyhow!("an encoded shard without files"))?;
        let (sha256, len) = write_durable(dir, &name, &bytes)?;
        let mut extra_files = BTreeMap::new();
        for (n, b) in files {
            let (sha, _) = write_durable(dir, &n, &b)?;
            extra_files.insert(n, sha);
        }
        Ok(WrittenShard {
            entry: ShardEntry {
                file: name,
                sha256,
                bytes: len,
                rows: self.rows,
                tokens: self.tokens,
                extra_files,
            },
            mds: self.mds,
        })
    }
}

/// Writes shards of one format: shard number `n` of `batch`, encoded in memory (any thread),
/// then written durably into `dir` (in shard order, by whoever journals them).
pub trait ShardWriter: Send + Sync {
    fn encode(&self, n: usize, batch: &RowBatch) -> Result<EncodedShard>;
    fn write(&self, dir: &Path, n: usize, batch: &RowBatch) -> Result<WrittenShard> {
        self.encode(n, batch)?.commit(dir)
    }
}

/// Reads shards of one format back into the [`RowBatch`] a writer took: `input_ids` plus the
/// per-row columns the format stores (parquet and MDS: every column; Megatron: `doc_offsets`
/// from each `.idx` document's sequences).
pub trait ShardReader: Send + Sync {
    fn read(&self, dir: &Path, entry: &ShardEntry) -> Result<RowBatch>;
}

/// How shards store their rows: the format, the ids' width (MDS and Megatron; parquet's ids
/// are always uint32) and the zstd level of parquet pages (the other formats ignore it) — one
/// value from the run's settings to every writer, merge and rewrite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardCodec {
    pub format: ShardFormat,
    pub dtype: Dtype,
    pub zstd_level: u8,
}

impl ShardCodec {
    /// The writer of these shards (parquet row groups encoded as `row_groups` says).
    pub fn writer(self, row_groups: parquet::RowGroups) -> Box<dyn ShardWriter> {
        match self.format {
            ShardFormat::Parquet => Box::new(parquet::Parquet {
                zstd_level: self.zstd_level,
                row_groups,
            }),
            ShardFormat::Mds => Box::new(mds::Mds { dtype: self.dtype }),
            ShardFormat::Megatron => Box::new(megatron::Megatron { dtype: self.dtype }),
        }
    }
}

impl ShardFormat {
    /// The reader of this format, ids stored as `dtype`.
    pub fn reader(self, dtype: Dtype) -> Box<dyn ShardReader> {
        match self {
            ShardFormat::Parquet => Box::new(parquet::ParquetReader),
            ShardFormat::Mds => Box::new(mds::Mds { dtype }),
            ShardFormat::Megatron => Box::new(megatron::Megatron { dtype }),
        }
    }
}

/// Write shard number `n` of `batch` as `codec` says into `dir` ([`ShardCodec::writer`]),
/// parquet row groups encoded as `row_groups` says.
pub fn write_shard(
    codec: ShardCodec,
    row_groups: parquet::RowGroups,
    dir: &Path,
    n: usize,
    batch: &RowBatch,
) -> Result<WrittenShard> {
    batch.check()?;
    codec.writer(row_groups).write(dir, n, batch)
}
