//! `OUT/index.json`: the one record of what a pack (or SFT) output holds — shards with their
//! checksums, totals, per-file provenance — read by `audit`, `decontam` and `merge`.
//!
//! Layout (cross-stage contract 4): a plain object `{"version": 1, "tool", "kind", "format",
//! "seq_len", "dtype", "tokenizer", "shards", "totals", "provenance", "manifest",
//! "lock_sha256", "complete"}`. For `--format mds` the file must also be a MosaicML Streaming
//! index (`{"version": 2, "shards": [...]}`), so the same object then sits under the extra key
//! `"dlm_data"`. [`load`] accepts both layouts.
//!
//! While a run is in progress the index is the progress journal: it is rewritten atomically
//! after every finished shard with `"complete": false` and a `"resume"` cursor; the last
//! write sets `"complete": true`. Consumers must refuse an index whose `complete` is false.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

pub use super::index_schema::{
    Index, Kind, MixtureShare, ProvenanceRange, ShardEntry, TokenizerInfo, Totals,
};

/// The file name of the index inside an output directory.
pub const INDEX_FILE: &str = "index.json";

/// A path as index.json records it: absolute (symlinks resolved when it exists), so a reader
/// started from another working directory finds it.
pub fn abs_path(p: &Path) -> String {
    std::fs::canonicalize(p)
        .or_else(|_| std::path::absolute(p))
        .unwrap_or_else(|_| p.to_path_buf())
        .display()
        .to_string()
}

/// Path of the index file in `dir`.
pub fn index_path(dir: &Path) -> PathBuf {
    dir.join(INDEX_FILE)
}

/// Parse an index from JSON text in either layout (plain, or MDS with `"dlm_data"`).
pub fn parse(text: &str, origin: &Path) -> Result<Index> {
    let v: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{}: not valid JSON", origin.display()))?;
    let obj = match v.get("dlm_data") {
        Some(inner) => inner.clone(),
        None => v,
    };
    let idx: Index = serde_json::from_value(obj)
        .with_context(|| format!("{}: not a dlm-data index", origin.display()))?;
    if idx.version != 1 {
        bail!(
            "{}: unsupported dlm-data index version {}",
            origin.display(),
            idx.version
        );
    }
    Ok(idx)
}

/// Read `dir/index.json` in either layout. Does not check `complete`; see [`load_complete`].
pub fn load(dir: &Path) -> Result<Index> {
    let p = index_path(dir);
    // A regular file only (a FIFO would block), and bounded (an index of a million shards is
    // ~300 MB).
    let bound = crate::bounded::Bound::new(1 << 30, "an index.json is at most that");
    let text = crate::bounded::read_regular_text(&p, bound)
        .with_context(|| format!("reading {}", p.display()))?;
    parse(&text, &p)
}

/// [`load`], failing when the output is not marked complete (an interrupted run).
pub fn load_complete(dir: &Path) -> Result<Index> {
    let idx = load(dir)?;
    if !idx.complete {
        bail!(
            "{}: output is incomplete (an interrupted run?): rerun the same command to resume",
            index_path(dir).display()
        );
    }
    Ok(idx)
}

/// Serialise the index for `dir` atomically. With `mds_shards` (the MosaicML shard entries),
/// writes the MDS layout `{"version": 2, "shards": mds_shards, "dlm_data": index}`.
pub fn save(dir: &Path, idx: &Index, mds_shards: Option<&[serde_json::Value]>) -> Result<()> {
    let text = to_json(idx, mds_shards)?;
    // A complete output carries its dataset card, written first: an index that says
    // complete never stands without it.
    if idx.complete {
        super::card::write(dir, idx)?;
    }
    crate::util::atomic_write(&index_path(dir), text.as_bytes())
}

/// The exact bytes [`save`] writes.
pub fn to_json(idx: &Index, mds_shards: Option<&[serde_json::Value]>) -> Result<String> {
    let mut text = match mds_shards {
        None => serde_json::to_string_pretty(idx)?,
        Some(shards) => {
            let v = serde_json::json!({
                "version": 2,
                "shards": shards,
                "dlm_data": idx,
            });
            serde_json::to_string_pretty(&v)?
        }
    };
    text.push('\n');
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shards::{Dtype, ShardFormat};
    use std::collections::BTreeMap;

    fn sample() -> Index {
        Index {
            version: 1,
            tool: Index::tool_name(),
            kind: Kind::Pretrain,
            format: ShardFormat::Parquet,
            seq_len: 8,
            dtype: Dtype::U32,
            tokenizer: TokenizerInfo {
                path: "t/tokenizer.json".into(),
                sha256: "00".into(),
                eos_token: "<|endoftext|>".into(),
                eos_id: 0,
                vocab_size: 1000,
            },
            shards: vec![ShardEntry {
                file: "part-00000.parquet".into(),
                sha256: "ab".into(),
                bytes: 10,
                rows: 2,
                tokens: 16,
                extra_files: BTreeMap::new(),
            }],
            totals: Totals {
                rows: 2,
                tokens: 16,
                documents: 3,
                ..Default::default()
            },
            provenance: vec![],
            manifest: None,
            lock_sha256: None,
            complete: true,
            args: None,
            extra: BTreeMap::new(),
        }
    }

    #[test]
    fn roundtrip_both_layouts() {
        let d = tempfile::tempdir().unwrap();
        let idx = sample();
        save(d.path(), &idx, None).unwrap();
        assert_eq!(load(d.path()).unwrap(), idx);
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(index_path(d.path())).unwrap()).unwrap();
        assert_eq!(raw["totals"]["dropped_tail_tokens"], 0);
        assert_eq!(raw["manifest"], serde_json::Value::Null);

        let mds = vec![serde_json::json!({"format": "mds", "samples": 2})];
        save(d.path(), &idx, Some(&mds)).unwrap();
        let raw: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(index_path(d.path())).unwrap()).unwrap();
        assert_eq!(raw["version"], 2);
        assert_eq!(raw["shards"][0]["format"], "mds");
        assert_eq!(load(d.path()).unwrap(), idx);
    }

    #[test]
    fn incomplete_is_refused_by_load_complete() {
        let d = tempfile::tempdir().unwrap();
        let mut idx = sample();
        idx.complete = false;
        save(d.path(), &idx, None).unwrap();
        assert!(load(d.path()).is_ok());
        let e = load_complete(d.path()).unwrap_err().to_string();
        assert!(e.contains("incomplete"), "{e}");
    }
}

/// A path index.json records for a file of the output: relative, `/`-separated, normalized
/// (no empty, `.` or `..` component) — so it names a file inside the directory, the one a
/// directory reader of it reads. `Err` says why not. `audit` and `inspect` both refuse an
/// index that lists any other.
pub fn confined(file: &str) -> std::result::Result<(), &'static str> {
    if file.is_empty() {
        return Err("is empty");
    }
    if file.starts_with('/') || Path::new(file).is_absolute() {
        return Err("is absolute");
    }
    if file.contains('\\') || file.contains('\0') {
        return Err("holds a backslash or NUL");
    }
    if file
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err("is not normalized (an empty, `.` or `..` component)");
    }
    Ok(())
}
