//! Issue 54 item 7: real loaders read a bucket output straight from the bucket (moto on
//! loopback) with the same rows as the local output of the same command — polars
//! `scan_parquet('s3://…')` and HF `datasets` (`storage_options`, through s3fs) from
//! `.venv-s3-readers`, MosaicML `StreamingDataset(remote='s3://…')` (boto3) from `.venv-mds`.

mod objstore_support;
mod pack_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use pack_common::*;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Run `script` with the Python of `venv` and `env`; its stdout. Panics with the venv's
/// make target when the venv is missing (make test installs both).
fn py(venv: &str, target: &str, script: &str, args: &[&str], env: &[(&str, String)]) -> String {
    let python = root().join(venv).join("bin/python");
    assert!(
        python.exists(),
        "{} is missing: run `make {target}`",
        python.display()
    );
    let o = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        // Not offline mode: `datasets` then refuses s3:// too. No Hub is reachable anyway.
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[path = "objstore_support/pack_fixture.rs"]
mod pack_fixture;
use pack_fixture::{PackFx as Fx, BUCKET, EXTRA};

fn fixture() -> Fx {
    Fx::new(29, 300, &[])
}

impl Fx {
    /// `pack` to the local directory `name` and to `s3://dlm-test/name`; the local path.
    fn both(&self, name: &str, extra: &[&str]) -> PathBuf {
        let local = self.dir.path().join(name);
        ok(&run_pack(&self.input, &self.tok, &local, extra, &[]));
        let mut c = Command::new(bin());
        let url = format!("s3://{BUCKET}/{name}");
        c.args(pack_args(&self.input, &self.tok, Path::new(&url), extra));
        self.s3.apply(&mut c, &self.dir.path().join("staging"));
        ok(&c.output().unwrap());
        local
    }
}

#[test]
fn polars_and_hf_datasets_read_the_bucket_parquet_with_the_local_rows() {
    let fx = fixture();
    let local = fx.both("pq", EXTRA);
    let script = r#"
import glob, sys
import polars as pl
from datasets import load_dataset
ep, url, local, cache = sys.argv[1:5]
so = {"aws_endpoint_url": ep, "aws_access_key_id": "x", "aws_secret_access_key": "y",
      "aws_region": "us-east-1", "aws_allow_http": "true"}
files = sorted(glob.glob(local + "/data/*.parquet"))
want = pl.concat([pl.read_parquet(f) for f in files])
got = pl.scan_parquet(url + "/data/*.parquet", storage_options=so).collect()
assert got.height == want.height > 0, (got.height, want.height)
assert got.equals(want), "polars: the bucket's rows differ from the local output's"
fs_opts = {"key": "x", "secret": "y", "client_kwargs": {"endpoint_url": ep, "region_name": "us-east-1"}}
d = load_dataset("parquet", data_files={"train": url + "/data/*.parquet"}, split="train",
                 storage_options=fs_opts, cache_dir=cache)
l = load_dataset("parquet", data_files={"train": files}, split="train", cache_dir=cache + "-local")
assert d.num_rows == l.num_rows == want.height, (d.num_rows, l.num_rows)
assert d["input_ids"] == l["input_ids"], "datasets: the bucket's rows differ"
print(got.height)
"#;
    let url = format!("s3://{BUCKET}/pq");
    let cache = fx.dir.path().join("hf-cache").display().to_string();
    let out = py(
        ".venv-s3-readers",
        "objstore-readers-venv",
        script,
        &[&fx.s3.endpoint, &url, &local.display().to_string(), &cache],
        &[],
    );
    assert!(out.trim().parse::<u64>().unwrap() > 0, "{out}");
}

#[test]
fn mosaicml_streaming_reads_the_bucket_mds_with_the_local_samples() {
    let fx = fixture();
    let mut extra = EXTRA.to_vec();
    extra.extend(["--format", "mds"]);
    let local = fx.both("mds", &extra);
    let script = r#"
import sys, numpy as np
from streaming import StreamingDataset
url, local, cache = sys.argv[1:4]
want = StreamingDataset(local=local, shuffle=False, batch_size=1)
got = StreamingDataset(remote=url, local=cache, shuffle=False, batch_size=1)
assert len(got) == len(want) > 0, (len(got), len(want))
for i in range(len(want)):
    a, b = got[i], want[i]
    assert np.array_equal(a["input_ids"], b["input_ids"]), i
    assert np.array_equal(a["doc_offsets"], b["doc_offsets"]), i
print(len(got))
"#;
    let url = format!("s3://{BUCKET}/mds");
    let cache = fx.dir.path().join("mds-cache").display().to_string();
    let env = vec![
        ("S3_ENDPOINT_URL", fx.s3.endpoint.clone()),
        ("AWS_ACCESS_KEY_ID", "x".to_string()),
        ("AWS_SECRET_ACCESS_KEY", "y".to_string()),
        ("AWS_DEFAULT_REGION", "us-east-1".to_string()),
    ];
    let out = py(
        ".venv-mds",
        "check-mds-streaming",
        script,
        &[&url, &local.display().to_string(), &cache],
        &env,
    );
    assert!(out.trim().parse::<u64>().unwrap() > 0, "{out}");
}
