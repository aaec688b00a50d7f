//! `fetch` of a `[[model]]` through the hub emulator: the shipped manifests/base.toml pins the
//! fixture base at its commit; files land in `models--openbmb--MiniCPM5-2B`, are locked and
//! logged like datasets, survive transport faults (resume), fail on a checksum mismatch, and
//! give architecture.json; `--local-dir` materialises them.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dlm_data::fixtures::base_model::{write_base_repo, BASE_COMMIT, BASE_REPO};
use dlm_data::hub::emulator::{Emulator, Fault, Options};
use dlm_data::hub::log::LogRecord;
use dlm_data::manifest::ModelLock;
use dlm_data::model::architecture::ArchitectureFile;

struct Env {
    dir: tempfile::TempDir,
    emu: Emulator,
}

impl Env {
    fn new(opts: Options) -> Env {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("hub");
        std::fs::create_dir_all(&root).unwrap();
        write_base_repo(&root).unwrap();
        let emu = Emulator::start(&root, opts).unwrap();
        Env { dir, emu }
    }
    fn repo_dir(&self) -> PathBuf {
        self.dir.path().join("hub/models").join(BASE_REPO)
    }
    fn cache(&self) -> PathBuf {
        self.dir.path().join("cache")
    }
    fn manifest(&self) -> PathBuf {
        let p = self.dir.path().join("base.toml");
        std::fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/base.toml"),
            &p,
        )
        .unwrap();
        p
    }
    fn fetch(&self, manifest: &Path, extra: &[&str]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_dlm-data"))
            .arg("fetch")
            .arg("--manifest")
            .arg(manifest)
            .arg("--cache")
            .arg(self.cache())
            .args(["--retry-base-ms", "5"])
            .args(extra)
            .env("HF_ENDPOINT", self.emu.endpoint())
            .env("HF_HOME", self.dir.path().join("hf-home"))
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .env_remove("SLURM_ARRAY_TASK_ID")
            .env_remove("JOB_COMPLETION_INDEX")
            .env("DLM_NO_PROGRESS", "1")
            .output()
            .unwrap()
    }
    /// `fetch` with HF_HUB_OFFLINE=1 (the emulator still listening, to count requests).
    fn fetch_offline(&self, manifest: &Path) -> Output {
        Command::new(env!("CARGO_BIN_EXE_dlm-data"))
            .args(["fetch", "--manifest", manifest.to_str().unwrap(), "--cache"])
            .arg(self.cache())
            .env("HF_HUB_OFFLINE", "1")
            .env("HF_ENDPOINT", self.emu.endpoint())
            .env("DLM_NO_PROGRESS", "1")
            .output()
            .unwrap()
    }
    fn log(&self) -> Vec<LogRecord> {
        std::fs::read_to_string(self.cache().join("download.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn sha256(p: &Path) -> String {
    dlm_data::util::sha256_file(p).unwrap()
}

const EXPECTED: &[&str] = &[
    "config.json",
    "generation_config.json",
    "model-00001-of-00002.safetensors",
    "model-00002-of-00002.safetensors",
    "model.safetensors.index.json",
    "tokenizer.json",
    "tokenizer_config.json",
];

#[test]
fn base_model_fetches_locks_logs_and_describes_itself() {
    // Every transport fault on the way: dropped bodies resume by Range, a corrupt byte is
    // caught by the sha256 and fetched again, 429/5xx are retried.
    let env = Env::new(Options {
        faults: Fault::ALL.to_vec(),
        page_size: 3,
        retry_after_secs: 0,
        ..Options::default()
    });
    let m = env.manifest();
    let local = env.dir.path().join("local");
    let o = env.fetch(&m, &["--jobs", "3", "--local-dir", local.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));

    // The lock: the model at its commit, the default globs' files (no README/.gitattributes).
    let lock = ModelLock::load(&m.with_extension("lock")).unwrap();
    let lm = lock.model("base").unwrap();
    assert_eq!(lm.repo, BASE_REPO);
    assert_eq!(lm.commit, BASE_COMMIT);
    let paths: Vec<&str> = lm.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, EXPECTED);
    let snap = env
        .cache()
        .join("models--openbmb--MiniCPM5-2B/snapshots")
        .join(BASE_COMMIT);
    for f in &lm.files {
        let fixture = env.repo_dir().join(&f.path);
        assert_eq!(sha256(&fixture), f.sha256, "{}", f.path);
        assert_eq!(sha256(&snap.join(&f.path)), f.sha256, "{}", f.path);
        assert_eq!(sha256(&local.join(&f.path)), f.sha256, "{}", f.path);
        assert!(!std::fs::symlink_metadata(local.join(&f.path))
            .unwrap()
            .file_type()
            .is_symlink());
    }
    // LFS weights are stored under their sha256, small files under their git sha1.
    let w = lm
        .files
        .iter()
        .find(|f| f.path.ends_with(".safetensors"))
        .unwrap();
    assert!(w.git_oid.is_none());
    assert!(env
        .cache()
        .join("models--openbmb--MiniCPM5-2B/blobs")
        .join(&w.sha256)
        .is_file());
    assert!(!local.join("README.md").exists());

    // download.log: one verified line per file with the model resolve URL.
    let log = env.log();
    for f in &lm.files {
        let l = log
            .iter()
            .rev()
            .find(|l| l.path == f.path && l.verified)
            .unwrap_or_else(|| panic!("{} not logged", f.path));
        assert_eq!(l.source, "base");
        assert_eq!(l.sha256, f.sha256);
        assert_eq!(l.commit, BASE_COMMIT);
        assert!(
            l.url
                .ends_with(&format!("/{BASE_REPO}/resolve/{BASE_COMMIT}/{}", f.path)),
            "{}",
            l.url
        );
        assert!(!l.url.contains("/datasets/"), "{}", l.url);
    }
    assert!(log.iter().any(|l| l.attempts > 1), "faults were injected");

    // architecture.json beside the lock: config fields and every tensor from the headers.
    let arch = ArchitectureFile::load(&m.with_file_name("architecture.json")).unwrap();
    let a = arch.model("base").unwrap();
    assert_eq!(a.commit, BASE_COMMIT);
    assert_eq!(a.config["num_hidden_layers"], 2);
    assert_eq!(a.config["hidden_size"], 64);
    assert!(a.conversion["is_causal"].is_null());
    assert!(!a.config.contains_key("is_causal"));
    assert_eq!(a.tensors.len(), 2 * 9 + 3);
    let q = a
        .tensors
        .iter()
        .find(|t| t.name == "model.layers.0.self_attn.q_proj.weight")
        .unwrap();
    assert_eq!(
        (q.dtype.as_str(), q.shape.as_slice()),
        ("BF16", &[96u64, 64][..])
    );
    let cfg = lm.files.iter().find(|f| f.path == "config.json").unwrap();
    assert_eq!(a.config_sha256, cfg.sha256);

    // A second run re-verifies from the cache; --locked and offline reruns agree.
    env.emu.set_options(Options::default());
    env.emu.reset_counters();
    let o = env.fetch(&m, &["--locked"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(env.emu.file_bytes_served(), 0, "everything was cached");
    let before = env.emu.request_count();
    let o = env.fetch_offline(&m);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(env.emu.request_count(), before, "offline: no request");
}

/// Issue 57 row 10: `--local-dir DIR` holding the user's own `config.json`: never replaced
/// (exit 2 naming it, nothing written); with `--overwrite`, replaced. A file this tool wrote
/// and a user then changed is theirs too; one it wrote, left as it was, is kept.
#[test]
fn local_dir_never_replaces_a_file_this_tool_did_not_write() {
    let env = Env::new(Options::default());
    let m = env.manifest();
    let local = env.dir.path().join("local");
    std::fs::create_dir_all(&local).unwrap();
    let mine = "{\"my\": \"own config\"}\n";
    std::fs::write(local.join("config.json"), mine).unwrap();
    let o = env.fetch(&m, &["--local-dir", local.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("config.json") && stderr(&o).contains("--overwrite"),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        std::fs::read_to_string(local.join("config.json")).unwrap(),
        mine
    );
    assert!(
        !local.join("tokenizer.json").exists(),
        "nothing written before the refusal"
    );
    // --overwrite: replaced; then a second run keeps every file.
    let o = env.fetch(&m, &["--local-dir", local.to_str().unwrap(), "--overwrite"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let lock = ModelLock::load(&m.with_extension("lock")).unwrap();
    let cfg_sha = lock.model("base").unwrap().files[0].sha256.clone();
    assert_eq!(sha256(&local.join("config.json")), cfg_sha);
    let o = env.fetch(&m, &["--local-dir", local.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    // A file it wrote, edited by the user: theirs now, refused.
    std::fs::write(local.join("tokenizer_config.json"), "{}\n").unwrap();
    let o = env.fetch(&m, &["--local-dir", local.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("tokenizer_config.json"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn checksum_failure_leaves_no_lock_and_names_the_file() {
    // Every attempt at every body comes back with one flipped byte.
    let env = Env::new(Options {
        faults: vec![Fault::Corrupt; 8],
        ..Options::default()
    });
    let m = env.manifest();
    let o = env.fetch(&m, &["--retries", "2"]);
    assert!(!o.status.success());
    let err = stderr(&o);
    assert!(err.contains("no lock written"), "{err}");
    assert!(err.contains("mismatch"), "{err}");
    assert!(!m.with_extension("lock").exists());
    assert!(!m.with_file_name("architecture.json").exists());
    let log = env.log();
    assert!(log.iter().any(|l| !l.verified && l.error.is_some()));
    // Nothing half-written in the snapshot: no file whose bytes are wrong.
    let snap = env
        .cache()
        .join("models--openbmb--MiniCPM5-2B/snapshots")
        .join(BASE_COMMIT);
    for f in EXPECTED {
        let p = snap.join(f);
        if p.exists() {
            assert_eq!(sha256(&p), sha256(&env.repo_dir().join(f)), "{f}");
        }
    }
}

#[test]
fn killed_download_resumes_from_the_partial_blob() {
    let env = Env::new(Options::default());
    let m = env.manifest();
    // A partial blob as a killed run leaves it: the first half of the first shard.
    let shard = env.repo_dir().join("model-00001-of-00002.safetensors");
    let bytes = std::fs::read(&shard).unwrap();
    let sha = sha256(&shard);
    let blobs = env.cache().join("models--openbmb--MiniCPM5-2B/blobs");
    std::fs::create_dir_all(&blobs).unwrap();
    let half = bytes.len() / 2;
    std::fs::write(blobs.join(format!("{sha}.incomplete")), &bytes[..half]).unwrap();
    let o = env.fetch(&m, &["--jobs", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let l = env
        .log()
        .into_iter()
        .find(|l| l.path == "model-00001-of-00002.safetensors")
        .unwrap();
    assert!(l.verified);
    assert_eq!(
        l.downloaded as usize,
        bytes.len() - half,
        "only the rest was fetched"
    );
    assert_eq!(sha256(&blobs.join(&sha)), sha);
}

#[test]
fn model_revisions_must_be_exact_commits() {
    let env = Env::new(Options::default());
    let bad = env.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        format!("[[model]]\nname = \"base\"\nrepo = \"{BASE_REPO}\"\nrevision = \"main\"\n"),
    )
    .unwrap();
    let o = env.fetch(&bad, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("40-hex"), "{}", stderr(&o));
    // A 40-hex revision the Hub does not have: the Hub's answer, named.
    std::fs::write(
        &bad,
        format!(
            "[[model]]\nname = \"base\"\nrepo = \"{BASE_REPO}\"\nrevision = \"{}\"\n",
            "0".repeat(40)
        ),
    )
    .unwrap();
    let o = env.fetch(&bad, &["--retries", "0"]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("revision not found"), "{}", stderr(&o));
    // Explicit globs that match nothing are refused.
    std::fs::write(
        &bad,
        format!(
            "[[model]]\nname = \"base\"\nrepo = \"{BASE_REPO}\"\nrevision = \"{BASE_COMMIT}\"\nfiles = [\"config.json\", \"*.bin\"]\n"
        ),
    )
    .unwrap();
    let o = env.fetch(&bad, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("*.bin"), "{}", stderr(&o));
    // --local-dir needs a model.
    let data = env.dir.path().join("data.toml");
    std::fs::write(
        &data,
        "[[source]]\nname='a'\nrepo='o/n'\nrevision='main'\nsplit='train'\nformat='parquet'\n",
    )
    .unwrap();
    let o = env.fetch(&data, &["--local-dir", "x"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn an_uppercase_sha_in_the_manifest_and_lock_names_the_same_cache_paths() {
    let env = Env::new(Options::default());
    let m = env.manifest();
    let o = env.fetch(&m, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let snaps = env.cache().join("models--openbmb--MiniCPM5-2B/snapshots");
    let blobs = env.cache().join("models--openbmb--MiniCPM5-2B/blobs");
    let listing = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    let (snaps_before, blobs_before) = (listing(&snaps), listing(&blobs));
    // The user spells the pinned commit and every digest in capitals, in both files.
    let upper = BASE_COMMIT.to_ascii_uppercase();
    let text = std::fs::read_to_string(&m).unwrap();
    assert!(text.contains(BASE_COMMIT));
    std::fs::write(&m, text.replace(BASE_COMMIT, &upper)).unwrap();
    let lock_path = m.with_extension("lock");
    let lock = ModelLock::load(&lock_path).unwrap();
    let mut text = std::fs::read_to_string(&lock_path)
        .unwrap()
        .replace(BASE_COMMIT, &upper);
    for f in &lock.models[0].files {
        text = text.replace(&f.sha256, &f.sha256.to_ascii_uppercase());
        if let Some(o) = &f.git_oid {
            text = text.replace(o, &o.to_ascii_uppercase());
        }
    }
    std::fs::write(&lock_path, &text).unwrap();
    // Read once, held lowercase: the same lock values as before.
    assert_eq!(
        ModelLock::load(&lock_path).unwrap().models[0].commit,
        BASE_COMMIT
    );
    assert_eq!(
        ModelLock::load(&lock_path).unwrap().models[0].files,
        lock.models[0].files
    );

    env.emu.reset_counters();
    let o = env.fetch(&m, &["--locked"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        env.emu.file_bytes_served(),
        0,
        "the same blobs: nothing fetched again"
    );
    let o = env.fetch_offline(&m);
    assert!(o.status.success(), "offline: {}", stderr(&o));
    assert_eq!(
        listing(&snaps),
        snaps_before,
        "one snapshot directory, lowercase"
    );
    assert_eq!(listing(&blobs), blobs_before, "the same blob names");
}
