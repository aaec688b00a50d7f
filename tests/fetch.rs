//! `dlm-data fetch` end to end against the in-process hub emulator: both shipped manifests
//! under every transport fault, the split policy, token hygiene, hostile listings, offline
//! reruns, `--locked`, sharded workers, and kill -9 + resume of a large file.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use dlm_data::fixtures::datasets::{
    write_hub_fixtures_with, HubFixtureOptions, LARGE_FILE, LARGE_REPO,
};
use dlm_data::hub::emulator::{Emulator, Fault, Host, Options};
use dlm_data::hub::log::LogRecord;
use dlm_data::manifest::{Lock, Role};

const TOKEN: &str = "hf_TestSecretToken_do_not_leak_42";

struct Env {
    dir: tempfile::TempDir,
    emu: Emulator,
}

impl Env {
    fn new(opts: Options, large_mb: Option<u64>) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("hub");
        std::fs::create_dir_all(&root).unwrap();
        write_hub_fixtures_with(&root, &HubFixtureOptions { large_mb }).unwrap();
        let emu = Emulator::start(&root, opts).unwrap();
        Env { dir, emu }
    }
    fn root(&self) -> PathBuf {
        self.dir.path().join("hub")
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    fn home(&self) -> PathBuf {
        self.dir.path().join("hf-home")
    }
    /// A copy of a shipped manifest (the lock is written beside it).
    fn manifest(&self, shipped: &str) -> PathBuf {
        let p = self
            .dir
            .path()
            .join(Path::new(shipped).file_name().unwrap());
        std::fs::copy(Path::new(env!("CARGO_MANIFEST_DIR")).join(shipped), &p).unwrap();
        p
    }
    fn write_manifest(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn cmd(&self, manifest: &Path, extra: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlm-data"));
        c.arg("fetch")
            .arg("--manifest")
            .arg(manifest)
            .arg("--cache")
            .arg(self.cache())
            .args(["--retry-base-ms", "5"])
            .args(extra)
            .env("HF_ENDPOINT", self.emu.endpoint())
            .env("HF_TOKEN", TOKEN)
            .env("HF_HOME", self.home())
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX")
            .env("DLM_NO_PROGRESS", "1")
            .env("RUST_LOG", "info");
        c
    }
    fn fetch(&self, manifest: &Path, extra: &[&str]) -> Output {
        self.cmd(manifest, extra).output().unwrap()
    }
    fn log(&self) -> Vec<LogRecord> {
        read_log(&self.cache().join("download.log"))
    }
}

fn read_log(p: &Path) -> Vec<LogRecord> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad log line {l}: {e}")))
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sha256(p: &Path) -> String {
    dlm_data::util::sha256_file(p).unwrap()
}

/// Every locked file is in the cache at its snapshot path with the fixture's exact bytes.
fn assert_cached_exactly(env: &Env, lock: &Lock) {
    for s in &lock.sources {
        assert_eq!(s.commit.len(), 40);
        assert!(!s.files.is_empty(), "{}", s.name);
        for f in &s.files {
            let snap = dlm_data::hub::cache::Cache { root: env.cache() }
                .snapshot_path(s.role, &s.repo, &s.commit, &f.path);
            let fixture = env.root().join(&s.repo).join(&f.path);
            assert_eq!(sha256(&snap), f.sha256, "{}", snap.display());
            assert_eq!(sha256(&fixture), f.sha256, "{}", fixture.display());
            assert_eq!(std::fs::metadata(&snap).unwrap().len(), f.size);
        }
    }
}

#[test]
fn both_manifests_fetch_under_all_faults() {
    let env = Env::new(
        Options {
            faults: Fault::ALL.to_vec(),
            page_size: 3,
            retry_after_secs: 1,
            ..Options::default()
        },
        None,
    );
    let stage1 = env.manifest("manifests/stage1.toml");
    let mcq = env.manifest("manifests/mcq.toml");
    let o = env.fetch(&stage1, &["--jobs", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // mcq with the token from $HF_HOME/token instead of HF_TOKEN.
    std::fs::create_dir_all(env.home()).unwrap();
    std::fs::write(env.home().join("token"), format!("{TOKEN}\n")).unwrap();
    let o2 = env
        .cmd(&mcq, &["--jobs", "3"])
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert!(o2.status.success(), "{}", stderr(&o2));

    let l1 = Lock::load(&stage1.with_extension("lock")).unwrap();
    let l2 = Lock::load(&mcq.with_extension("lock")).unwrap();
    let names: Vec<&str> = l1.sources.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "fineweb-edu",
            "cosmopedia-web-v2",
            "metamathqa",
            "opencodereasoning"
        ]
    );
    // Pinned commits answered as pinned; `main` resolved; selections exactly the split's files.
    assert_eq!(
        l1.sources[0].commit,
        "3c452cb1c31a957685cf2699bfd051afacd37422"
    );
    let paths = |l: &Lock, i: usize| {
        l.sources[i]
            .files
            .iter()
            .map(|f| f.path.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        paths(&l1, 0),
        [
            "sample/10BT/000_00000.parquet",
            "sample/10BT/001_00000.parquet",
            "sample/10BT/002_00000.parquet"
        ]
    );
    assert_eq!(
        paths(&l1, 1),
        [
            "data/web_samples_v2/train-00000-of-00002.parquet",
            "data/web_samples_v2/train-00001-of-00002.parquet"
        ]
    );
    assert_eq!(paths(&l1, 2), ["MetaMathQA-395K.json"]);
    assert_eq!(
        paths(&l1, 3),
        [
            "split_0/train-00000-of-00002.parquet",
            "split_0/train-00001-of-00002.parquet"
        ]
    );
    assert_eq!(paths(&l2, 0), ["data/train-00000-of-00001.parquet"]);
    assert_eq!(
        paths(&l2, 1),
        ["auxiliary_train/train-00000-of-00001.parquet"]
    );
    assert_cached_exactly(&env, &l1);
    assert_cached_exactly(&env, &l2);
    // refs/main written for branch revisions, as huggingface_hub does.
    let orc = &l1.sources[3];
    let r = std::fs::read_to_string(
        env.cache()
            .join("datasets--nvidia--OpenCodeReasoning/refs/main"),
    )
    .unwrap();
    assert_eq!(r, orc.commit);

    // A complete download.log: one verified line per locked file, faults visible as retries.
    let log = env.log();
    let n_files: usize = l1
        .sources
        .iter()
        .chain(&l2.sources)
        .map(|s| s.files.len())
        .sum();
    assert_eq!(log.len(), n_files);
    for rec in &log {
        assert!(
            rec.verified && !rec.cached && rec.error.is_none(),
            "{rec:?}"
        );
        assert_eq!(rec.role, Role::Train);
        assert!(
            rec.url.starts_with(env.emu.endpoint()) && rec.url.contains("/resolve/"),
            "{}",
            rec.url
        );
        let ls = l1
            .sources
            .iter()
            .chain(&l2.sources)
            .find(|s| s.name == rec.source)
            .unwrap();
        let lf = ls.files.iter().find(|f| f.path == rec.path).unwrap();
        assert_eq!(
            (rec.sha256.as_str(), rec.bytes, rec.commit.as_str()),
            (lf.sha256.as_str(), lf.size, ls.commit.as_str())
        );
        assert!(rec.attempts > 1, "every file met the faults: {rec:?}");
        assert!(rec.time.ends_with('Z') && rec.time.contains('T'));
    }
    let reqs = env.emu.requests();
    for st in [429, 500] {
        assert!(
            reqs.iter().any(|r| r.status == st),
            "fault {st} never fired"
        );
    }
    // Token hygiene: on every Hub request, on no CDN request, in no output file or message.
    let cdn: Vec<_> = reqs.iter().filter(|r| r.host == Host::Cdn).collect();
    assert!(!cdn.is_empty());
    assert!(
        cdn.iter().all(|r| r.authorization.is_none()),
        "token reached the CDN"
    );
    let bearer = format!("Bearer {TOKEN}");
    assert!(reqs
        .iter()
        .filter(|r| r.host == Host::Hub)
        .all(|r| r.authorization.as_deref() == Some(bearer.as_str())));
    for f in [
        env.cache().join("download.log"),
        stage1.with_extension("lock"),
        mcq.with_extension("lock"),
    ] {
        assert!(
            !std::fs::read_to_string(&f).unwrap().contains(TOKEN),
            "{}",
            f.display()
        );
    }
    assert!(!stderr(&o).contains(TOKEN) && !stderr(&o2).contains(TOKEN));
    // Regular git files are verified by blob sha1 and recorded with it; LFS by sha256.
    assert!(l1
        .sources
        .iter()
        .flat_map(|s| &s.files)
        .all(|f| f.git_oid.is_none()));
}

#[test]
fn eval_splits_are_refused_before_any_download() {
    let env = Env::new(Options::default(), None);
    let src = |name: &str, config: &str, split: &str, extra: &str| {
        format!("[[source]]\nname = \"{name}\"\nrepo = \"cais/mmlu\"\nrevision = \"main\"\nconfig = \"{config}\"\nsplit = \"{split}\"\nformat = \"parquet\"\n{extra}\n")
    };
    let cases = [
        (
            src("mmlu-test", "all", "test", ""),
            "all/test-00000-of-00001.parquet",
        ),
        (
            src("mmlu-val", "all", "validation", ""),
            "all/validation-00000-of-00001.parquet",
        ),
        (
            src("mmlu-dev", "all", "dev", ""),
            "all/dev-00000-of-00001.parquet",
        ),
        (
            src(
                "mmlu-glob",
                "default",
                "train",
                "files = [\"all/test-*.parquet\"]",
            ),
            "all/test-00000-of-00001.parquet",
        ),
        (
            src("sneaky", "default", "train", "files = [\"*/*.parquet\"]"),
            "high_school_physics/dev-00000-of-00001.parquet",
        ),
    ];
    for (i, (text, bad_file)) in cases.iter().enumerate() {
        // An allowed source first: the refusal must still come before it is downloaded.
        let ok = src("aux", "auxiliary_train", "train", "");
        let m = env.write_manifest(&format!("refused{i}.toml"), &format!("{ok}\n{text}"));
        env.emu.reset_counters();
        let o = env.fetch(&m, &[]);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        let name = text.lines().nth(1).unwrap().split('"').nth(1).unwrap();
        assert!(err.contains(name) && err.contains(bad_file), "{err}");
        assert!(!m.with_extension("lock").exists());
        assert!(
            !env.cache().join("datasets--cais--mmlu/blobs").exists(),
            "something was downloaded"
        );
        // Only metadata was read (revision, tree, README.md): no data file, no CDN request.
        assert!(env
            .emu
            .requests()
            .iter()
            .all(|r| r.host == Host::Hub && !r.target.contains(".parquet")));
    }
    // The allowed ones pass: mmlu auxiliary_train (struct) and all/auxiliary_train (flat).
    let m = env.write_manifest(
        "ok.toml",
        &format!(
            "{}\n{}",
            src("aux", "auxiliary_train", "train", ""),
            src("aux-flat", "all", "auxiliary_train", "")
        ),
    );
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    // An eval-reference source may name a test split: fetched apart, logged with its role.
    let m = env.manifest("manifests/eval-reference.toml");
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    assert!(lock.sources.iter().all(|s| s.role == Role::EvalReference));
    for s in &lock.sources {
        for f in &s.files {
            let p = env
                .cache()
                .join("eval-reference")
                .join(format!("datasets--{}", s.repo.replace('/', "--")))
                .join("snapshots")
                .join(&s.commit)
                .join(&f.path);
            assert_eq!(sha256(&p), f.sha256);
        }
    }
    assert!(env
        .log()
        .iter()
        .any(|r| r.role == Role::EvalReference && r.path == "all/test-00000-of-00001.parquet"));
}

#[test]
fn dotdot_in_listing_is_refused() {
    let env = Env::new(
        Options {
            faults: vec![Fault::DotDot],
            ..Options::default()
        },
        None,
    );
    let m = env.manifest("manifests/mcq.toml");
    let o = env.fetch(&m, &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("unsafe path") && stderr(&o).contains("../escape.parquet"),
        "{}",
        stderr(&o)
    );
    assert_eq!(env.emu.file_bytes_served(), 0);
    assert!(!m.with_extension("lock").exists());
    assert!(!env.dir.path().join("escape.parquet").exists());
}

#[test]
fn offline_rerun_locked_and_changed_listing() {
    let env = Env::new(Options::default(), None);
    let m = env.manifest("manifests/mcq.toml");
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lock_bytes = std::fs::read(m.with_extension("lock")).unwrap();

    // Offline: zero requests, everything re-verified from the cache.
    env.emu.reset_counters();
    let o = env
        .cmd(&m, &[])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(env.emu.request_count(), 0, "offline run made requests");
    // Every file was found in the cache, verified, and is already logged: no new line (#41).
    let log = env.log();
    assert_eq!(log.len(), 2);
    assert!(log.iter().all(|r| r.verified));
    assert_eq!(std::fs::read(m.with_extension("lock")).unwrap(), lock_bytes);

    // --locked with an unchanged Hub: passes, no data file downloaded, lock untouched.
    let o = env.fetch(&m, &["--locked"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(env
        .emu
        .requests()
        .iter()
        .all(|r| r.host == Host::Hub && !r.target.contains(".parquet")));
    assert_eq!(
        env.log().len(),
        2,
        "an unchanged --locked run adds no log line"
    );

    // The Hub's listing changes under the same commit: --locked fails naming the file.
    let f = env
        .root()
        .join("allenai/sciq/data/train-00000-of-00001.parquet");
    let orig = std::fs::read(&f).unwrap();
    let mut bytes = orig.clone();
    bytes.extend_from_slice(b"changed");
    std::fs::write(&f, bytes).unwrap();
    let o = env.fetch(&m, &["--locked"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("data/train-00000-of-00001.parquet changed"),
        "{}",
        stderr(&o)
    );
    std::fs::write(&f, &orig).unwrap();
    std::fs::write(
        env.root()
            .join("allenai/sciq/data/train-00001-of-00001.parquet"),
        b"new shard",
    )
    .unwrap();
    let o = env.fetch(&m, &["--locked"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("train-00001-of-00001.parquet is listed but not locked"),
        "{}",
        stderr(&o)
    );
    assert_eq!(std::fs::read(m.with_extension("lock")).unwrap(), lock_bytes);

    // Offline with a blob missing from the cache: a clear error, no request.
    let cache = dlm_data::hub::cache::Cache { root: env.cache() };
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    let s = &lock.sources[1];
    std::fs::remove_file(
        cache
            .blob_path(Role::Train, &s.repo, &s.files[0].sha256)
            .unwrap(),
    )
    .unwrap();
    env.emu.reset_counters();
    let o = env
        .cmd(&m, &[])
        .env("HF_HUB_OFFLINE", "1")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("not in the cache"), "{}", stderr(&o));
    assert_eq!(env.emu.request_count(), 0);
}

#[test]
fn sharded_workers_split_files_and_skip_the_lock() {
    let env = Env::new(Options::default(), None);
    let m = env.manifest("manifests/stage1.toml");
    for i in 0..2 {
        let o = env.fetch(&m, &["--shard", &format!("{i}/2")]);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            !m.with_extension("lock").exists(),
            "a worker wrote the lock"
        );
    }
    let p0 = read_log(&env.cache().join("download.log.part-00000-of-00002"));
    let p1 = read_log(&env.cache().join("download.log.part-00001-of-00002"));
    assert_eq!(p0.len() + p1.len(), 8);
    assert!((p0.len() as i64 - p1.len() as i64).abs() <= 1);
    assert!(p0
        .iter()
        .all(|a| p1.iter().all(|b| (&a.repo, &a.path) != (&b.repo, &b.path))));
    // The whole-job run afterwards finds everything cached and writes the lock.
    env.emu.reset_counters();
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        env.emu.requests().iter().all(|r| r.host == Host::Hub),
        "data downloaded again"
    );
    assert!(env.log().iter().all(|r| r.cached && r.verified));
    assert_cached_exactly(&env, &Lock::load(&m.with_extension("lock")).unwrap());
}

#[test]
fn retry_after_is_honoured_and_the_budget_ends_with_a_clear_error() {
    // 429 with Retry-After: 1 on every first request: the next try waits at least that long.
    let env = Env::new(
        Options {
            faults: vec![Fault::RateLimit],
            retry_after_secs: 1,
            ..Options::default()
        },
        None,
    );
    let m = env.write_manifest(
        "one.toml",
        "[[source]]\nname = \"mm\"\nrepo = \"meta-math/MetaMathQA\"\nrevision = \"main\"\nsplit = \"train\"\nfiles = [\"MetaMathQA-395K.json\"]\nformat = \"json\"\n",
    );
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let reqs = env.emu.requests();
    let mut checked = 0;
    for (i, r) in reqs.iter().enumerate().filter(|(_, r)| r.status == 429) {
        let next = reqs[i + 1..]
            .iter()
            .find(|n| n.host == r.host && n.target == r.target)
            .expect("retried");
        assert!(
            next.at.duration_since(r.at) >= Duration::from_millis(950),
            "{} retried too early",
            r.target
        );
        checked += 1;
    }
    assert!(checked >= 2, "{checked}");

    // A dropped then a corrupted body, a budget of one retry: the file fails with a clear
    // error, a log line says so (verified: false, error), no blob and no lock look complete.
    let env = Env::new(
        Options {
            faults: vec![Fault::Drop, Fault::Corrupt],
            ..Options::default()
        },
        None,
    );
    let m = env.write_manifest("one.toml", &std::fs::read_to_string(&m).unwrap());
    let o = env.fetch(&m, &["--retries", "1"]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("giving up after 2 attempts") && err.contains("MetaMathQA-395K.json"),
        "{err}"
    );
    let log = env.log();
    assert_eq!(log.len(), 1);
    assert!(
        !log[0].verified
            && log[0]
                .error
                .as_deref()
                .is_some_and(|e| e.contains("retry budget")),
        "{:?}",
        log[0]
    );
    assert!(!m.with_extension("lock").exists());
    let blobs = env.cache().join("datasets--meta-math--MetaMathQA/blobs");
    if blobs.exists() {
        for e in std::fs::read_dir(blobs).unwrap() {
            let n = e.unwrap().file_name().into_string().unwrap();
            assert!(n.ends_with(".incomplete"), "{n} looks complete");
        }
    }
}

#[test]
fn concurrent_fetches_share_the_cache_without_double_downloads() {
    let env = Env::new(Options::default(), Some(24));
    let size = std::fs::metadata(env.root().join(LARGE_REPO).join(LARGE_FILE))
        .unwrap()
        .len();
    env.emu.set_options(Options {
        throttle_bytes_per_sec: Some(20_000_000),
        ..Options::default()
    });
    let text = format!("[[source]]\nname = \"large\"\nrepo = \"{LARGE_REPO}\"\nrevision = \"main\"\nsplit = \"train\"\nformat = \"jsonl\"\n");
    let (m1, m2) = (
        env.write_manifest("a.toml", &text),
        env.write_manifest("b.toml", &text),
    );
    let spawn = |m: &Path, log: &str| {
        env.cmd(
            m,
            &[
                "--jobs",
                "4",
                "--chunk-mb",
                "4",
                "--log",
                env.dir.path().join(log).to_str().unwrap(),
            ],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    };
    let (a, b) = (spawn(&m1, "a.log"), spawn(&m2, "b.log"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        stderr(&a),
        stderr(&b)
    );
    // One of them downloaded, the other waited on the blob lock and found it cached.
    let served = env.emu.file_bytes_served();
    assert!(
        served < size + size / 2,
        "served {served} for a {size}-byte file: downloaded twice"
    );
    let recs: Vec<LogRecord> = ["a.log", "b.log"]
        .iter()
        .flat_map(|l| read_log(&env.dir.path().join(l)))
        .collect();
    assert_eq!(recs.iter().filter(|r| r.cached).count(), 1, "{recs:?}");
    assert_cached_exactly(&env, &Lock::load(&m1.with_extension("lock")).unwrap());
}

/// Start a real fetch of the large file, kill -9 it mid-file, rerun: it resumes (serves fewer
/// bytes than the file) and ends byte-identical.
fn kill9_resume(jobs: &str) {
    let env = Env::new(Options::default(), Some(24));
    let size = std::fs::metadata(env.root().join(LARGE_REPO).join(LARGE_FILE))
        .unwrap()
        .len();
    env.emu.set_options(Options {
        throttle_bytes_per_sec: Some(6_000_000),
        ..Options::default()
    });
    let m = env.write_manifest(
        "large.toml",
        &format!("[[source]]\nname = \"large\"\nrepo = \"{LARGE_REPO}\"\nrevision = \"main\"\nsplit = \"train\"\nformat = \"jsonl\"\n"),
    );
    let mut child = env
        .cmd(&m, &["--jobs", jobs, "--chunk-mb", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // Kill only once a third was served AND the client has persisted progress (the
    // `.incomplete` file for a sequential download, the `.incomplete.parts` journal for
    // chunks): bytes the emulator sent may still sit in socket buffers of a starved client.
    let blobs_dir = env.cache().join("datasets--dlm-data--large/blobs");
    let persisted = || {
        std::fs::read_dir(&blobs_dir)
            .map(|rd| {
                rd.filter_map(|e| e.ok()).any(|e| {
                    let n = e.file_name().into_string().unwrap_or_default();
                    let len = e.metadata().map(|m| m.len()).unwrap_or(0);
                    if jobs == "1" {
                        n.ends_with(".incomplete") && len > 0
                    } else {
                        // The journal exists from the start (all zeros): wait until it records
                        // bytes of some chunk, or a starved client resumes nothing.
                        n.ends_with(".incomplete.parts")
                            && len > 0
                            && std::fs::read(e.path())
                                .ok()
                                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                                .and_then(|v| v["done"].as_array().cloned())
                                .is_some_and(|d| d.iter().any(|x| x.as_u64() > Some(0)))
                    }
                })
            })
            .unwrap_or(false)
    };
    while env.emu.file_bytes_served() < size / 3 || !persisted() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "download never progressed"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "fetch ended before the kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    child.wait().unwrap();
    let first = env.emu.file_bytes_served();
    assert!(first < size, "the first run finished before the kill");
    let blobs = env.cache().join("datasets--dlm-data--large/blobs");
    let partial: Vec<_> = std::fs::read_dir(&blobs)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert!(
        partial.iter().any(|n| n.ends_with(".incomplete")),
        "{partial:?}"
    );
    assert!(
        !partial.iter().any(|n| !n.contains(".incomplete")),
        "a blob looks complete: {partial:?}"
    );

    env.emu.set_options(Options::default());
    env.emu.reset_counters();
    let o = env.fetch(&m, &["--jobs", jobs, "--chunk-mb", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let second = env.emu.file_bytes_served();
    assert!(
        second < size,
        "rerun served {second} of {size} bytes: it did not resume"
    );
    assert!(second + first >= size);
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    assert_cached_exactly(&env, &lock);
    let rec = env.log().pop().unwrap();
    assert!(
        rec.verified && !rec.cached && rec.downloaded <= second && rec.downloaded + first >= size,
        "{rec:?}"
    );
}

#[test]
fn kill9_resume_sequential() {
    kill9_resume("1");
}

#[test]
fn kill9_resume_parallel_chunks() {
    kill9_resume("4");
}

#[test]
fn hub_emulator_command_prints_its_endpoint_first() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("hub");
    let mut child = Command::new(env!("CARGO_BIN_EXE_dlm-data"))
        .args([
            "hub-emulator",
            "--fixtures",
            "--faults",
            "429,5xx",
            "--retry-after",
            "0",
            "--root",
        ])
        .arg(&root)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let endpoint = line.trim().to_string();
    assert!(endpoint.starts_with("http://127.0.0.1:"), "{endpoint:?}");
    let m = dir.path().join("mcq.toml");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/mcq.toml"),
        &m,
    )
    .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_dlm-data"))
        .args(["fetch", "--retry-base-ms", "5", "--manifest"])
        .arg(&m)
        .arg("--cache")
        .arg(dir.path().join("cache"))
        .env("HF_ENDPOINT", &endpoint)
        .env_remove("HF_TOKEN")
        .env("HF_HOME", dir.path().join("home"))
        .env_remove("HF_HUB_OFFLINE")
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(o.status.success(), "{}", stderr(&o));
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    assert_eq!(
        lock.sources[1].commit,
        "c30699e8356da336a370243923dbaf21066bb9fe"
    );
}

/// `fetch --json`: exactly one line of JSON on stdout, at the end, saying what was fetched,
/// what was already cached, the commits and the lock; a rerun is all cached; a worker writes
/// no lock and says so.
#[test]
fn json_summary_is_one_line() {
    let env = Env::new(Options::default(), None);
    let m = env.manifest("manifests/mcq.toml");
    let summary = |extra: &[&str]| -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(extra);
        let o = env.fetch(&m, &a);
        assert!(o.status.success(), "{}", stderr(&o));
        let out = String::from_utf8(o.stdout).unwrap();
        assert_eq!(out.lines().count(), 1, "one line on stdout: {out:?}");
        serde_json::from_str(out.trim()).unwrap()
    };
    let v = summary(&[]);
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    let files: usize = lock.sources.iter().map(|s| s.files.len()).sum();
    let bytes: u64 = lock
        .sources
        .iter()
        .flat_map(|s| &s.files)
        .map(|f| f.size)
        .sum();
    assert_eq!(v["files"], files);
    assert_eq!(v["fetched"], files);
    assert_eq!(v["cached"], 0);
    assert_eq!(v["downloaded_bytes"], bytes);
    assert_eq!(v["worker"], "0/1");
    assert_eq!(
        v["lock"],
        m.with_extension("lock").display().to_string().as_str()
    );
    let srcs = v["sources"].as_array().unwrap();
    assert_eq!(srcs.len(), lock.sources.len());
    for (s, l) in srcs.iter().zip(&lock.sources) {
        assert_eq!(s["name"], l.name.as_str());
        assert_eq!(s["commit"], l.commit.as_str());
        assert_eq!(s["files"], l.files.len());
    }
    // A rerun: everything cached, nothing downloaded.
    let v = summary(&[]);
    assert_eq!(
        (v["cached"].clone(), v["fetched"].clone()),
        (files.into(), 0.into())
    );
    assert_eq!(v["downloaded_bytes"], 0);
    // --locked leaves the lock as it is; a worker writes none.
    let v = summary(&["--locked"]);
    assert_eq!(v["lock"], serde_json::Value::Null);
    assert!(v["lock_unchanged"].is_string());
    let v = summary(&["--shard", "1/2"]);
    assert_eq!(v["worker"], "1/2");
    assert_eq!(v["lock"], serde_json::Value::Null);
    assert_eq!(v["files"], files / 2);
}

/// Off a terminal, fetch writes plain lines of bytes done over the whole plan (the last one
/// with the totals, cached files counted), no ANSI codes; `--quiet` writes none of them.
#[test]
fn log_files_get_plain_byte_progress_lines() {
    let env = Env::new(Options::default(), None);
    let m = env.manifest("manifests/mcq.toml");
    let total = |o: &Output| {
        let err = stderr(o);
        assert!(o.status.success(), "{err}");
        assert!(!err.contains('\x1b'), "ANSI codes in a log file:\n{err}");
        err.lines()
            .filter(|l| l.starts_with("fetch: ") && l.contains(" bytes (100.0%)"))
            .count()
    };
    let o = env.fetch(&m, &["--progress-interval", "1"]);
    assert_eq!(total(&o), 1, "{}", stderr(&o));
    let lock = Lock::load(&m.with_extension("lock")).unwrap();
    let bytes: u64 = lock
        .sources
        .iter()
        .flat_map(|s| &s.files)
        .map(|f| f.size)
        .sum();
    let want = format!("fetch: {bytes}/{bytes} bytes (100.0%)");
    assert!(stderr(&o).contains(&want), "{want}\n{}", stderr(&o));
    // A rerun: every file cached, still the totals.
    let o = env.fetch(&m, &[]);
    assert!(stderr(&o).contains(&want), "{want}\n{}", stderr(&o));
    let o = env.fetch(&m, &["--quiet"]);
    assert_eq!(total(&o), 0, "{}", stderr(&o));
}
