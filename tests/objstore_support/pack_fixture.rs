//! Why one fixture: the object-storage tests of `pack` (object_store.rs, object_store_faults.rs,
//! object_store_readers.rs) share one world — a tokenizer trained by the tests, a parquet corpus,
//! a moto server with the bucket made — and the local run and bucket copy they compare.
//! Declared by each of those files with `#[path]` (it needs their `pack_common` too).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::objstore_support::S3Server;
use crate::pack_common::{docs, ok, run_pack, tokenizer, tree, write_parquet};

pub const BUCKET: &str = "dlm-test";
/// Small rows and shards: several shards from a small corpus.
pub const EXTRA: &[&str] = &["--seq-len", "64", "--shard-bytes", "8KiB"];

pub struct PackFx {
    pub dir: tempfile::TempDir,
    pub tok: PathBuf,
    pub input: PathBuf,
    pub s3: S3Server,
}

impl PackFx {
    /// `n` documents of seed `seed` as corpus.parquet, and moto (with `moto_env`) holding
    /// [`BUCKET`].
    pub fn new(seed: u64, n: usize, moto_env: &[(&str, &str)]) -> PackFx {
        let dir = tempfile::tempdir().unwrap();
        let tok = tokenizer(dir.path());
        let texts: Vec<Option<String>> = docs(seed, n).into_iter().map(Some).collect();
        let input = dir.path().join("corpus.parquet");
        write_parquet(&input, &texts, 64);
        let s3 = S3Server::start_with(moto_env);
        s3.create_bucket(BUCKET);
        PackFx {
            dir,
            tok,
            input,
            s3,
        }
    }

    /// The local reference run's files (`pack` with [`EXTRA`] into `local/`).
    pub fn local(&self) -> BTreeMap<String, Vec<u8>> {
        let out = self.dir.path().join("local");
        ok(&run_pack(&self.input, &self.tok, &out, EXTRA, &[]));
        tree(&out)
    }

    /// The objects under `prefix`, downloaded: where, and their files.
    pub fn remote(&self, prefix: &str) -> (PathBuf, BTreeMap<String, Vec<u8>>) {
        let d = self
            .dir
            .path()
            .join(format!("got-{}", prefix.replace('/', "_")));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        self.s3.download(BUCKET, prefix, &d);
        let t = tree(&d);
        (d, t)
    }
}
