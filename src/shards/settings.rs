//! The pack settings an output was written with (`index.json`'s `"args"`): every argument and
//! input that changes the output bytes, resolved once from the CLI, saved as written, and read
//! back typed by resume (the fingerprint a rerun must match) and `merge` (how to re-cut parts).

use serde::{Deserialize, Serialize};

use super::{Dtype, ShardFormat};

/// What to do with a document larger than `--max-doc-bytes` (`"Fail"` / `"Skip"` in the
/// index's `args`).
#[derive(
    clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize,
)]
pub enum Oversize {
    /// Stop with an error naming the file and row (default).
    Fail,
    /// Skip it and count it (`totals.skipped_oversize`).
    Skip,
}

/// `index.json`'s `"args"`. Field order is the on-disk key order (byte-identical indexes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackSettings {
    /// Every input unit in plan order: (source, file, bytes).
    pub units: Vec<(String, String, u64)>,
    pub lock_sha256: Option<String>,
    /// `--text-column` (with `--input` only).
    pub text_column: Option<String>,
    pub tokenizer_sha256: String,
    /// EOS / BOS ids appended / prepended to each document.
    pub eos: Option<u32>,
    pub bos: Option<u32>,
    pub seq_len: usize,
    /// `--format` (a worker's parts are parquet whatever this says; `merge` writes this).
    pub format: ShardFormat,
    pub dtype: Dtype,
    /// Flattened: its keys stand here, in its field order.
    #[serde(flatten)]
    pub packing: Packing,
    /// `[index, count]` of `--shard I/N` (`[0, 1]` for one process).
    pub worker: [usize; 2],
    /// `--text` template (with `--input`; absent when `--text-column` names the text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// `--input` runs: every file read, with its sha256 (absent for manifests, whose lock
    /// pins the files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<InputFile>>,
}

/// How documents become rows and shards: the pack flags that change the output bytes beside
/// `--seq-len` and `--format`. Declared once for the run's resolved settings and for
/// `index.json`'s `args` (flattened there: the same keys in the same order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Packing {
    /// `--shuffle-seed`: rows shuffled within each shard.
    pub shuffle_seed: Option<u64>,
    /// `--pad-last`: the last row padded to `--seq-len` instead of dropped.
    pub pad_last: bool,
    /// `--tokens` budget.
    pub tokens: Option<u64>,
    pub shard_bytes: u64,
    pub max_doc_bytes: u64,
    pub max_word_bytes: u64,
    pub on_oversize: Oversize,
    /// `--zstd-level` of parquet shards (absent for MDS and Megatron output, which it does not
    /// set, and in indexes written before it existed, whose shards are zstd-3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zstd_level: Option<u8>,
    /// `--paragraphs`: each blank-line-separated paragraph of a `.txt` input is a document
    /// (absent when off: indexes written before it read whole files, as off does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paragraphs: bool,
}

impl Packing {
    /// The zstd level parquet shards of these settings are (or were) written at.
    pub fn zstd(&self) -> u8 {
        self.zstd_level
            .unwrap_or(crate::shards::parquet::LEGACY_ZSTD_LEVEL)
    }
}

/// One `--input` file as read: absolute path, size and sha256 of its bytes on disk (the
/// compressed bytes for `.gz` / `.zst`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub bytes: u64,
    pub sha256: String,
}

impl PackSettings {
    /// Rows per shard: `--shard-bytes` of uint32 rows of `seq_len` tokens (at least one).
    /// Megatron shards, which hold whole documents, close at the same token count.
    pub fn rows_per_shard(&self) -> usize {
        rows_per_shard(self.packing.shard_bytes, self.seq_len)
    }

    /// The same run's settings as one process would have them (what every worker of one
    /// `--shard I/N` run shares).
    pub fn as_one_process(&self) -> PackSettings {
        let mut one = PackSettings {
            worker: [0, 1],
            ..self.clone()
        };
        // A worker's parts are parquet whatever `--format` says, so they record a zstd level;
        // one process writing mds or megatron records none.
        if one.format != ShardFormat::Parquet {
            one.packing.zstd_level = None;
        }
        one
    }
}

/// Rows of `seq_len` uint32 tokens in `shard_bytes` (at least one).
pub fn rows_per_shard(shard_bytes: u64, seq_len: usize) -> usize {
    (shard_bytes / (seq_len as u64 * 4)).max(1) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_shape_is_the_recorded_one() {
        let s = PackSettings {
            units: vec![("web".into(), "a.parquet".into(), 10)],
            lock_sha256: None,
            text_column: Some("text".into()),
            tokenizer_sha256: "ab".into(),
            eos: Some(2),
            bos: None,
            seq_len: 8,
            format: ShardFormat::Megatron,
            dtype: Dtype::U16,
            packing: Packing {
                shuffle_seed: None,
                pad_last: false,
                tokens: None,
                shard_bytes: 64,
                max_doc_bytes: 1,
                max_word_bytes: 2,
                on_oversize: Oversize::Skip,
                zstd_level: None,
                paragraphs: false,
            },
            worker: [1, 2],
            text: None,
            inputs: None,
        };
        let v = serde_json::to_string(&s).unwrap();
        assert_eq!(
            v,
            r#"{"units":[["web","a.parquet",10]],"lock_sha256":null,"text_column":"text","tokenizer_sha256":"ab","eos":2,"bos":null,"seq_len":8,"format":"megatron","dtype":"uint16","shuffle_seed":null,"pad_last":false,"tokens":null,"shard_bytes":64,"max_doc_bytes":1,"max_word_bytes":2,"on_oversize":"Skip","worker":[1,2]}"#
        );
        assert_eq!(serde_json::from_str::<PackSettings>(&v).unwrap(), s);
        // An index written before `zstd_level`: its parquet shards were level 3.
        assert_eq!(s.packing.zstd(), 3);
        let mut z = s.clone();
        z.packing.zstd_level = Some(1);
        let zv = serde_json::to_string(&z).unwrap();
        assert!(
            zv.contains(r#""on_oversize":"Skip","zstd_level":1,"worker""#),
            "{zv}"
        );
        assert_eq!(serde_json::from_str::<PackSettings>(&zv).unwrap(), z);
        assert_eq!(z.packing.zstd(), 1);
        assert_eq!(s.rows_per_shard(), 2);
        assert_eq!(s.as_one_process().worker, [0, 1]);
        // Megatron parts (parquet, level 1) merge to settings with no level, as one process's.
        assert_eq!(z.as_one_process().packing.zstd_level, None);
        let mut zp = z.clone();
        zp.format = ShardFormat::Parquet;
        assert_eq!(zp.as_one_process().packing.zstd_level, Some(1));
    }
}
