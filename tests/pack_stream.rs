//! `dlm-data pack --manifest M --stream` against the in-process hub emulator: the same rows,
//! tokens and provenance as `fetch` + `pack` (only `lock_sha256` differs when no lock exists),
//! fewer bytes read than the files hold (footer + projected columns by HTTP Range), one
//! download.log line per streamed file, identical output under transport faults, the split
//! policy refused before any request, and a lock that no longer matches the Hub.

mod pack_common;

use std::path::{Path, PathBuf};
use std::process::Output;

use dlm_data::fixtures::datasets::write_hub_fixtures;
use dlm_data::hub::emulator::{Emulator, Fault, Options};
use dlm_data::manifest::Lock;
use pack_common::*;

const TOKEN: &str = "hf_StreamSecret_do_not_leak_7";

struct Env {
    dir: tempfile::TempDir,
    emu: Emulator,
    tok: PathBuf,
    manifest: PathBuf,
}

fn env(opts: Options) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hub");
    std::fs::create_dir_all(&root).unwrap();
    write_hub_fixtures(&root).unwrap();
    let emu = Emulator::start(&root, opts).unwrap();
    let tok = tokenizer(dir.path());
    let manifest = dir.path().join("stage1.toml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/stage1.toml"),
        &manifest,
    )
    .unwrap();
    Env {
        dir,
        emu,
        tok,
        manifest,
    }
}

impl Env {
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    fn cmd(&self, args: &[&str]) -> Output {
        let mut c = std::process::Command::new(bin());
        c.args(args)
            .env("HF_ENDPOINT", self.emu.endpoint())
            .env("HF_TOKEN", TOKEN)
            .env("HF_HOME", self.path("hf-home"))
            .env("DLM_NO_PROGRESS", "1")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX");
        c.output().unwrap()
    }
    fn pack(&self, out: &str, extra: &[&str]) -> Output {
        let (m, t, o, c) = (
            self.manifest.to_str().unwrap().to_string(),
            self.tok.to_str().unwrap().to_string(),
            self.path(out).to_str().unwrap().to_string(),
            self.path("cache").to_str().unwrap().to_string(),
        );
        let mut a = vec![
            "pack",
            "--manifest",
            &m,
            "--tokenizer",
            &t,
            "--out",
            &o,
            "--cache",
            &c,
            "--seq-len",
            "128",
            "--shard-bytes",
            "64KiB",
        ];
        a.extend_from_slice(extra);
        self.cmd(&a)
    }
    fn fetch(&self) -> Output {
        self.cmd(&[
            "fetch",
            "--manifest",
            self.manifest.to_str().unwrap(),
            "--cache",
            self.path("cache").to_str().unwrap(),
            "--retry-base-ms",
            "5",
        ])
    }
    fn log(&self, name: &str) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.path(name))
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Every file of an output except index.json, and the index without `lock_sha256` (top
/// level and in the resume fingerprint `args`): the only fields that differ without a lock.
fn split_out(
    dir: &Path,
) -> (
    std::collections::BTreeMap<String, Vec<u8>>,
    serde_json::Value,
) {
    let mut t = tree(dir);
    t.remove("index.json");
    // The dataset card is rendered from index.json (lock digest included): it differs exactly
    // where the index does; the lock-present comparison below checks it byte for byte.
    t.remove("README.md");
    let mut idx = index(dir);
    idx.as_object_mut().unwrap().remove("lock_sha256");
    // The resume fingerprint records the lock too.
    idx["args"].as_object_mut().unwrap().remove("lock_sha256");
    (t, idx)
}

#[test]
fn stream_equals_fetch_then_pack_and_reads_less_than_the_files() {
    let e = env(Options::default());
    // 1. Stream with no lock: the Hub resolves the files; nothing lands in the cache.
    let log1 = e.path("stream1.log");
    let o = e.pack("s1", &["--stream", "--log", log1.to_str().unwrap()]);
    ok(&o);
    assert!(!stderr(&o).contains(TOKEN));
    let idx = index(&e.path("s1"));
    assert_eq!(idx["complete"], true);
    assert!(idx["lock_sha256"].is_null());
    assert!(idx["totals"]["tokens"].as_u64().unwrap() > 0);
    let served = e.emu.file_bytes_served();

    // 2. fetch + pack from the cache.
    ok(&e.fetch());
    let lock = Lock::load(&e.manifest.with_extension("lock")).unwrap();
    ok(&e.pack("cached", &[]));
    let (tc, ic) = split_out(&e.path("cached"));
    let (ts, is) = split_out(&e.path("s1"));
    assert_eq!(ts.keys().collect::<Vec<_>>(), tc.keys().collect::<Vec<_>>());
    assert!(ts == tc, "streamed shards differ from the cached pack");
    assert_eq!(is, ic, "index differs beyond lock_sha256");

    // 3. Stream again with the lock present: the whole output is byte-identical.
    e.emu.reset_counters();
    let log2 = e.path("stream2.log");
    ok(&e.pack("s2", &["--stream", "--log", log2.to_str().unwrap()]));
    assert!(tree(&e.path("s2")) == tree(&e.path("cached")));

    // 4. The log: one line per streamed file, bytes actually read, not verified.
    let recs = e.log("stream2.log");
    let files: Vec<(&str, u64)> = lock
        .sources
        .iter()
        .flat_map(|s| s.files.iter().map(|f| (f.path.as_str(), f.size)))
        .collect();
    assert_eq!(recs.len(), files.len());
    let (mut read_pq, mut size_pq) = (0, 0);
    for r in &recs {
        assert_eq!(r["streamed"], true);
        assert_eq!(r["verified"], false);
        assert!(r["note"].as_str().unwrap().contains("sha256"));
        assert!(r.get("error").is_none());
        assert!(!r["url"].as_str().unwrap().contains(TOKEN));
        let p = r["path"].as_str().unwrap();
        let size = files.iter().find(|f| f.0 == p).unwrap().1;
        let b = r["bytes"].as_u64().unwrap();
        assert!(b <= size, "{p}: read {b} of {size}");
        if p.ends_with(".parquet") {
            read_pq += b;
            size_pq += size;
        } else {
            assert_eq!(b, size, "{p}: JSON is read whole, once");
        }
    }
    eprintln!("parquet: read {read_pq} of {size_pq} bytes by range");
    assert!(
        read_pq < size_pq,
        "parquet: read {read_pq} of {size_pq} bytes: projection/footer ranges not used"
    );
    // Every data request was ranged, and the byte counts agree with the server's.
    let total: u64 = recs.iter().map(|r| r["bytes"].as_u64().unwrap()).sum();
    assert_eq!(e.emu.file_bytes_served(), total);
    assert!(served >= total);
    assert!(e
        .emu
        .requests()
        .iter()
        .filter(|r| r.target.contains("/resolve/"))
        .all(|r| r.range.is_some()));
    assert!(!std::fs::read_to_string(&log2).unwrap().contains(TOKEN));
}

#[test]
fn stream_under_faults_gives_identical_output() {
    let e = env(Options::default());
    ok(&e.pack(
        "clean",
        &["--stream", "--log", e.path("a.log").to_str().unwrap()],
    ));
    e.emu.set_options(Options {
        faults: vec![
            Fault::Drop,
            Fault::RateLimit,
            Fault::ServerError,
            Fault::NoRange,
        ],
        retry_after_secs: 0,
        ..Options::default()
    });
    let o = e.pack(
        "faulty",
        &[
            "--stream",
            "--retry-base-ms",
            "5",
            "--log",
            e.path("b.log").to_str().unwrap(),
        ],
    );
    ok(&o);
    assert!(tree(&e.path("faulty")) == tree(&e.path("clean")));
    let recs = e.log("b.log");
    assert!(recs.iter().any(|r| r["attempts"].as_u64().unwrap() > 1));
}

#[test]
fn stream_refuses_eval_data_before_any_request_and_checks_the_lock() {
    let e = env(Options::default());
    let m = e.path("eval.toml");
    std::fs::write(
        &m,
        "[[source]]\nname = \"sciq\"\nrepo = \"allenai/sciq\"\nrevision = \"main\"\nsplit = \"test\"\nformat = \"parquet\"\ntext = \"{question}\"\n",
    )
    .unwrap();
    let o = e.cmd(&[
        "pack",
        "--manifest",
        m.to_str().unwrap(),
        "--tokenizer",
        e.tok.to_str().unwrap(),
        "--out",
        e.path("x").to_str().unwrap(),
        "--stream",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("evaluation split"), "{}", stderr(&o));
    assert_eq!(e.emu.request_count(), 0);

    // A lock whose size no longer matches the Hub: a clear error naming the file.
    ok(&e.fetch());
    let lp = e.manifest.with_extension("lock");
    let mut lock = Lock::load(&lp).unwrap();
    let f = &mut lock.sources[0].files[0];
    f.size += 1;
    let name = f.path.clone();
    lock.save(&lp).unwrap();
    let o = e.pack("bad", &["--stream", "--retries", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains(&name), "{}", stderr(&o));
    assert!(!e.path("bad/index.json").exists() || index(&e.path("bad"))["complete"] != true);
}
