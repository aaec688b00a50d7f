//! Shard files read back by `decontam`, `audit` and `mcq`: parquet (our footer and page
//! reader through the parquet crate), MDS `index.json` and shard bytes, Megatron `.idx`.
//! Seeds come from the project's own shard writers and dataset fixtures.

use std::path::{Path, PathBuf};

use anyhow::Result;
use dlm_data::mcq::sft::SftRow;
use dlm_data::mcq::sft_shards::{read_megatron, to_batch};
use dlm_data::provenance::Provenance;
use dlm_data::shards::megatron::read_idx as megatron_idx;
use dlm_data::shards::ShardFormat;
use dlm_data::shards::{index, mds, mds_read, megatron, parquet as pq, Dtype, RowBatch};
use dlm_data::sources::{parquet as src_pq, RowReader, RowsOf, Template};

use crate::driver::Target;
use crate::mutate::{self, Rng, Text};

fn sft_rows() -> Vec<SftRow> {
    (0..5u32)
        .map(|i| SftRow {
            id: format!("sciq-train-{i:06}"),
            prov: Provenance {
                source: "sciq".into(),
                repo: "allenai/sciq".into(),
                commit: "2c94ad3e1aafab77146f384e23536f97a4849815".into(),
                file: "data/train-00000-of-00001.parquet".into(),
                row: i as u64,
            },
            input_ids: (0..10 + 3 * i).map(|t| (t * 37 + i) % 500).collect(),
            prompt_len: 4 + i,
        })
        .collect()
}

fn sft_batch(format: ShardFormat) -> Result<RowBatch> {
    let rows = sft_rows();
    to_batch(&rows.iter().collect::<Vec<_>>(), format)
}

/// A parquet file: the SFT shard our writer emits and a fixture dataset file (text column).
pub struct Parquet {
    seeds: Vec<Vec<u8>>,
    path: PathBuf,
}

impl Target for Parquet {
    fn setup(work: &Path) -> Result<Self> {
        let mut seeds = vec![pq::encode(
            &sft_batch(ShardFormat::Parquet)?,
            pq::ZSTD_LEVEL,
            pq::RowGroups::INLINE,
        )?];
        // A text dataset in the fixture repos' layout (fineweb-edu, `text` column).
        let root = work.join("hub");
        std::fs::create_dir_all(&root)?;
        for r in dlm_data::fixtures::datasets::write_hub_fixtures(&root)? {
            for e in walk(&r.dir) {
                if e.extension().is_some_and(|x| x == "parquet") && seeds.len() < 3 {
                    let b = std::fs::read(&e)?;
                    if b.len() < 256 << 10 && has_text_column(&e) {
                        seeds.push(b);
                    }
                }
            }
        }
        Ok(Parquet {
            seeds,
            path: work.join("in.parquet"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn mutate(&self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        // Mostly the footer: `<thrift FileMetaData> <u32 len> PAR1` at the end.
        let n = input.len();
        if n < 12 {
            return None;
        }
        let flen = u32::from_le_bytes(input[n - 8..n - 4].try_into().ok()?) as usize;
        let start = n.saturating_sub(8 + flen);
        let (from, keep_len) = if rng.chance(4) {
            (0, false)
        } else {
            (start, rng.chance(2))
        };
        let region = &input[from..n - 8];
        let mut m = mutate::havoc(rng, region, region, &[]);
        let mut out = input[..from].to_vec();
        out.append(&mut m);
        let new_len = if keep_len {
            flen as u32
        } else {
            (out.len() - start.min(out.len())) as u32
        };
        out.extend_from_slice(&new_len.to_le_bytes());
        out.extend_from_slice(b"PAR1");
        Some(out)
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let counts = src_pq::row_counts(&self.path, "in.parquet")?;
        let _ = counts.iter().sum::<u64>();
        // decontam's generic row reader (any column types), then the text source reader.
        let _ = dlm_data::decontam::rows::read_rows(&self.path);
        let tpl = Template::parse("{text}")?;
        let mut rows = 0u64;
        let mut sink = |_row: u64, _o: dlm_data::sources::Outcome| -> Result<()> {
            rows += 1;
            Ok(())
        };
        let at = RowsOf {
            path: &self.path,
            name: "in.parquet",
            start_row: 0,
        };
        let _ = src_pq::Parquet(
            dlm_data::sources::codec::TEMP_MAX,
            dlm_data::sources::Decoding::SERIAL,
        )
        .rendered(at, &tpl, &mut sink);
        Ok(())
    }
}

fn has_text_column(p: &Path) -> bool {
    let tpl = Template::parse("{text}").unwrap();
    let mut sink = |_r: u64, _o: dlm_data::sources::Outcome| -> Result<()> { Ok(()) };
    src_pq::Parquet(
        dlm_data::sources::codec::TEMP_MAX,
        dlm_data::sources::Decoding::SERIAL,
    )
    .rendered(
        RowsOf {
            path: p,
            name: "x",
            start_row: 0,
        },
        &tpl,
        &mut sink,
    )
    .is_ok()
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(walk(&p));
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn sample_index(format: &str, mds_shards: Option<&[serde_json::Value]>) -> Result<String> {
    let idx = index::Index {
        version: 1,
        tool: index::Index::tool_name(),
        tool_build: None,
        kind: index::Kind::Sft,
        format: serde_json::from_value(serde_json::json!(format))?,
        seq_len: 2048,
        dtype: dlm_data::shards::Dtype::U32,
        tokenizer: index::TokenizerInfo {
            path: "/work/tokenizer/tokenizer.json".into(),
            sha256: "ab".repeat(32),
            eos_token: "</s>".into(),
            eos_id: 2,
            vocab_size: 512,
        },
        shards: vec![index::ShardEntry {
            file: mds::raw_name(0) + ".zstd",
            sha256: "cd".repeat(32),
            bytes: 1234,
            rows: 5,
            tokens: 80,
            extra_files: Default::default(),
        }],
        totals: index::Totals {
            rows: 5,
            tokens: 80,
            documents: 5,
            ..Default::default()
        },
        provenance: vec![index::ProvenanceRange {
            source: "sciq".into(),
            repo: "allenai/sciq".into(),
            commit: "2c94ad3e1aafab77146f384e23536f97a4849815".into(),
            file: "data/train-00000-of-00001.parquet".into(),
            split: "train".into(),
            role: "train".into(),
            row_start: 0,
            row_end: 5,
            documents: 5,
            out_row_start: None,
            out_row_end: None,
        }],
        manifest: Some("manifests/mcq.toml".into()),
        lock_sha256: Some("ef".repeat(32)),
        complete: true,
        args: None,
        extra: Default::default(),
    };
    index::to_json(&idx, mds_shards)
}

/// `index.json` in the MDS layout (`{"version": 2, "shards": [...], "dlm_data": {...}}`) and
/// the plain one.
pub struct MdsIndex(Vec<Vec<u8>>);

impl Target for MdsIndex {
    const TEXT: Option<Text> = Some(Text::JsonDoc);
    fn setup(_work: &Path) -> Result<Self> {
        let (_, entry) = mds::encode(&sft_batch(ShardFormat::Mds)?, Dtype::U32)?;
        Ok(MdsIndex(vec![
            sample_index("mds", Some(&[entry]))?.into_bytes(),
            sample_index("parquet", None)?.into_bytes(),
        ]))
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.0.clone()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let text = std::str::from_utf8(input)?;
        let idx = index::parse(text, Path::new("index.json"))?;
        let _ = index::to_json(&idx, None)?;
        Ok(())
    }
}

/// An MDS shard (`shard.NNNNN.mds.zstd`): zstd frame around the raw sample layout.
pub struct MdsShard {
    seeds: Vec<Vec<u8>>,
    path: PathBuf,
}

impl Target for MdsShard {
    fn setup(work: &Path) -> Result<Self> {
        let mut seeds = Vec::new();
        for dt in [Dtype::U32, Dtype::U16] {
            let (raw, _) = mds::encode(&sft_batch(ShardFormat::Mds)?, dt)?;
            seeds.push(zstd::encode_all(&raw[..], 3)?);
        }
        Ok(MdsShard {
            seeds,
            path: work.join(mds::raw_name(0) + ".zstd"),
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn mutate(&self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        // Mutate the decompressed sample layout so the decoder (not zstd) sees the damage.
        let raw = zstd::decode_all(input).ok()?;
        let m = mutate::havoc(rng, &raw, &raw, &[]);
        zstd::encode_all(&m[..], 1).ok()
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        std::fs::write(&self.path, input)?;
        let samples = mds_read::read(&self.path)?;
        let _ = samples.len();
        Ok(())
    }
}

/// A Megatron `.idx` (with its `.bin` and sidecar as the writer left them).
pub struct MegatronIdx {
    seeds: Vec<Vec<u8>>,
    bin: PathBuf,
}

impl Target for MegatronIdx {
    fn setup(work: &Path) -> Result<Self> {
        let batch = sft_batch(ShardFormat::Megatron)?;
        let (bin, idx) = megatron::encode(&batch, Dtype::U32)?;
        let bin_path = work.join(megatron::prefix(0) + ".bin");
        std::fs::write(&bin_path, bin)?;
        let (_, idx16) = megatron::encode(&batch, Dtype::U16)?;
        Ok(MegatronIdx {
            seeds: vec![idx, idx16],
            bin: bin_path,
        })
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        self.seeds.clone()
    }
    fn mutate(&self, rng: &mut Rng, input: &[u8]) -> Option<Vec<u8>> {
        // Rewrite one of the u64 header counts or one table entry with an edge value.
        let mut b = input.to_vec();
        if b.len() < 34 {
            return None;
        }
        let v = *rng.pick(mutate::INTERESTING);
        match rng.below(3) {
            0 => b[18..26].copy_from_slice(&v.to_le_bytes()),
            1 => b[26..34].copy_from_slice(&v.to_le_bytes()),
            _ => {
                let at = 34 + 4 * rng.below((b.len() - 34) / 4);
                let w = if rng.chance(2) { 4 } else { 8 };
                let end = (at + w).min(b.len());
                b[at..end].copy_from_slice(&v.to_le_bytes()[..end - at]);
            }
        }
        Some(b)
    }
    fn run(&self, input: &[u8]) -> Result<()> {
        let idx = self.bin.with_extension("idx");
        std::fs::write(&idx, input)?;
        let (lens, docs) = megatron_idx(&idx)?;
        let _ = (lens.len(), docs.len());
        read_megatron(&self.bin, dlm_data::shards::Dtype::U32)?;
        Ok(())
    }
}
