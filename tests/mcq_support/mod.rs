//! A small fetched world for the mcq / decontam / audit tests, built the way `fetch` leaves it:
//! sciq and mmlu auxiliary_train parquet files (real schemas) in the huggingface_hub cache
//! layout (blobs + snapshot symlinks), eval-reference copies of sciq test / mmlu test under
//! `<cache>/eval-reference/`, the manifests, their locks and a verified download.log.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, Int64Array, ListBuilder, RecordBatch, StringArray, StringBuilder, StructArray,
};
use arrow::datatypes::{DataType, Field, Fields, Schema};
use dlm_data::audit::report::{AuditReport, Status};
use dlm_data::fixtures::text::sentence;
use dlm_data::manifest::{Lock, LockedFile, LockedSource, Role};
use dlm_data::mcq::prompts;
use dlm_data::util::SplitMix;
use parquet::arrow::ArrowWriter;

pub const SCIQ_COMMIT: &str = "2c94ad3e1aafab77146f384e23536f97a4849815";
pub const MMLU_COMMIT: &str = "c30699e8356da336a370243923dbaf21066bb9fe";
pub const SCIQ_TRAIN: &str = "data/train-00000-of-00001.parquet";
pub const SCIQ_TEST: &str = "data/test-00000-of-00001.parquet";
pub const MMLU_AUX: &str = "auxiliary_train/train-00000-of-00001.parquet";
pub const MMLU_TEST: &str = "all/test-00000-of-00001.parquet";
pub const SCIQ_ROWS: usize = 24;
pub const MMLU_ROWS: usize = 16;

pub struct World {
    pub dir: tempfile::TempDir,
    pub cache: PathBuf,
    pub log: PathBuf,
    pub manifest: PathBuf,
    pub eval_manifest: PathBuf,
    pub tokenizer: PathBuf,
    /// sciq test questions (the eval-reference rows), in row order.
    pub sciq_test_questions: Vec<String>,
}

impl World {
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dlm-data"))
}

/// Run the binary; returns (exit code, stdout, stderr).
pub fn run(args: &[&str]) -> (i32, String, String) {
    let out = bin().args(args).env("RUST_LOG", "warn").output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The arguments of `dlm-data pack` over the world's training manifest into `out`, rows of
/// `seq_len` tokens.
pub fn pack_args<'a>(w: &'a World, out: &'a Path, seq_len: &'a str) -> Vec<&'a str> {
    vec![
        "pack",
        "--manifest",
        p(&w.manifest),
        "--cache",
        p(&w.cache),
        "--tokenizer",
        p(&w.tokenizer),
        "--out",
        p(out),
        "--seq-len",
        seq_len,
    ]
}

/// The arguments of `dlm-data mcq` over the world's training manifest into `out`, plus
/// `extra` flags.
pub fn mcq_args<'a>(w: &'a World, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "mcq",
        "--manifest",
        p(&w.manifest),
        "--cache",
        p(&w.cache),
        "--out",
        p(out),
    ];
    a.extend_from_slice(extra);
    a
}

/// Run the binary under bash with files limited to `blocks` KiB (`ulimit -f`; SIGXFSZ
/// ignored, so a write past it fails with "File too large"); returns (exit code, stderr).
pub fn run_disk_full(blocks: u32, args: &[&str]) -> (i32, String) {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let cmd = format!(
        "trap '' XFSZ; ulimit -f {blocks}; exec '{}' {}",
        env!("CARGO_BIN_EXE_dlm-data"),
        quoted.join(" ")
    );
    let o = Command::new("bash").args(["-c", &cmd]).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// `dlm-data mcq` over the world's training manifest into `out`, plus `extra` flags.
pub fn run_mcq(w: &World, out: &Path, extra: &[&str]) -> (i32, String, String) {
    run(&mcq_args(w, out, extra))
}

/// The arguments of `dlm-data decontam` against the world's eval manifest and cache, plus
/// `args` (the target `--prompts F` / `--shards D`, and flags).
pub fn decontam_args<'a>(w: &'a World, args: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "decontam",
        "--against",
        p(&w.eval_manifest),
        "--cache",
        p(&w.cache),
    ];
    a.extend_from_slice(args);
    a
}

/// `dlm-data decontam --json` of `target` (`--prompts F` / `--shards D`) against the world's
/// eval manifest, plus `extra` flags.
pub fn run_decontam(w: &World, target: &[&str], extra: &[&str]) -> (i32, String, String) {
    run(&decontam_args(w, &[&["--json"], target, extra].concat()))
}

/// `dlm-data audit` of the world's training manifest, then `manifests` (each `--manifest`),
/// against the world's cache, plus `args`.
pub fn run_audit(w: &World, manifests: &[&Path], args: &[&str]) -> (i32, String, String) {
    let mut a = vec!["audit", "--manifest", p(&w.manifest)];
    for m in manifests {
        a.extend(["--manifest", p(m)]);
    }
    a.extend(["--cache", p(&w.cache)]);
    a.extend_from_slice(args);
    run(&a)
}

/// [`run_audit`] with `--json`: (exit code, the report, stderr).
pub fn audit_json(w: &World, manifests: &[&Path], args: &[&str]) -> (i32, AuditReport, String) {
    let (code, out, err) = run_audit(w, manifests, &[&["--json"], args].concat());
    let r: AuditReport = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out} {err}"));
    (code, r, err)
}

/// The checks an audit report failed.
pub fn failed(r: &AuditReport) -> Vec<String> {
    r.failed().into_iter().map(String::from).collect()
}

/// The status of `check` in an audit report.
pub fn status(r: &AuditReport, check: &str) -> Status {
    r.checks.iter().find(|c| c.check == check).unwrap().status
}

/// The problems `check` of an audit report names, one a line.
pub fn problems(r: &AuditReport, check: &str) -> String {
    r.checks
        .iter()
        .find(|c| c.check == check)
        .unwrap()
        .problems
        .join("\n")
}

/// An audit that exited 1 with `check` its only failed check, whose problems name each of
/// `needles`; `what` labels the case in a failure message.
pub fn assert_fails_only(what: &str, code: i32, r: &AuditReport, check: &str, needles: &[&str]) {
    assert_eq!(code, 1, "{check} {what}: {r:#?}");
    assert_eq!(failed(r), [check], "{check} {what}: {r:#?}");
    let pr = problems(r, check);
    for n in needles {
        assert!(pr.contains(n), "{check} {what}: {n:?} not in\n{pr}");
    }
}

/// distilled.json records (contract 6 fields) for every prompt, written by `teacher` (its
/// `{"path", "weights_sha256", "config_sha256"}` object).
pub fn distilled_for(
    recs: &[prompts::PromptRecord],
    teacher: serde_json::Value,
) -> serde_json::Value {
    serde_json::Value::Array(
        recs.iter()
            .map(|r| {
                // The gold letter is the most probable: the record agrees with itself.
                let mut probs = serde_json::Map::new();
                probs.insert(r.gold.clone(), 0.75.into());
                let other = if r.gold == "A" { "B" } else { "A" };
                probs.insert(other.into(), 0.25.into());
                serde_json::json!({
                    "id": r.id, "source": r.source, "repo": r.repo, "commit": r.commit,
                    "file": r.file, "row": r.row, "prompt": r.prompt,
                    "response": format!(" {}", r.gold), "response_ids": [1, 2],
                    "answer": r.gold, "answer_probs": probs, "answer_logprobs": {"A": -1.3},
                    "gold": r.gold, "correct": true,
                    "gen": {"gen_length": 8, "block_length": 8, "steps": 8, "temperature": 0.0, "remasking": "low_confidence", "seed": 0},
                    "teacher": teacher.clone()
                })
            })
            .collect(),
    )
}

/// [`run_mcq`] writing the SFT set with the world's tokenizer as `format`, `rows` per shard.
pub fn run_mcq_shards(w: &World, out: &Path, format: &str, rows: &str) -> (i32, String, String) {
    run_mcq(
        w,
        out,
        &[
            "--tokenizer",
            p(&w.tokenizer),
            "--format",
            format,
            "--rows-per-shard",
            rows,
        ],
    )
}

pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn write_parquet(path: &Path, batch: RecordBatch) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, batch.schema(), None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn strings(v: &[String]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v.iter()))
}

/// sciq columns in the Hub's order: question, distractor3, distractor1, distractor2,
/// correct_answer, support.
pub fn sciq_batch(questions: &[String], seed: u64) -> RecordBatch {
    let mut rng = SplitMix(seed);
    let n = questions.len();
    let mut col = |k: usize| -> Vec<String> { (0..n).map(|_| sentence(&mut rng, k)).collect() };
    let d3 = col(3);
    let d1 = col(3);
    let d2 = col(3);
    let correct = col(2);
    let support = col(20);
    let schema = Schema::new(
        [
            "question",
            "distractor3",
            "distractor1",
            "distractor2",
            "correct_answer",
            "support",
        ]
        .iter()
        .map(|c| Field::new(*c, DataType::Utf8, true))
        .collect::<Vec<_>>(),
    );
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            strings(questions),
            strings(&d3),
            strings(&d1),
            strings(&d2),
            strings(&correct),
            strings(&support),
        ],
    )
    .unwrap()
}

fn choices(rng: &mut SplitMix, n: usize) -> ListBuilder<StringBuilder> {
    let mut b = ListBuilder::new(StringBuilder::new());
    for _ in 0..n {
        for _ in 0..4 {
            b.values().append_value(sentence(rng, 2));
        }
        b.append(true);
    }
    b
}

/// mmlu auxiliary_train: one struct column `train{answer, choices, question, subject}`.
pub fn mmlu_aux_batch(questions: &[String], seed: u64) -> RecordBatch {
    let mut rng = SplitMix(seed);
    let n = questions.len();
    let answers: Vec<i64> = (0..n).map(|i| (i % 4) as i64).collect();
    let ch = choices(&mut rng, n).finish();
    let fields = Fields::from(vec![
        Field::new("answer", DataType::Int64, true),
        Field::new("choices", ch.data_type().clone(), true),
        Field::new("question", DataType::Utf8, true),
        Field::new("subject", DataType::Utf8, true),
    ]);
    let st = StructArray::new(
        fields.clone(),
        vec![
            Arc::new(Int64Array::from(answers)) as ArrayRef,
            Arc::new(ch),
            strings(questions),
            strings(&vec![String::new(); n]),
        ],
        None,
    );
    let schema = Schema::new(vec![Field::new("train", DataType::Struct(fields), true)]);
    RecordBatch::try_new(Arc::new(schema), vec![Arc::new(st)]).unwrap()
}

/// mmlu `all/test`: flat question, subject, choices, answer.
pub fn mmlu_test_batch(questions: &[String], seed: u64) -> RecordBatch {
    let mut rng = SplitMix(seed);
    let n = questions.len();
    let ch = choices(&mut rng, n).finish();
    let schema = Schema::new(vec![
        Field::new("question", DataType::Utf8, true),
        Field::new("subject", DataType::Utf8, true),
        Field::new("choices", ch.data_type().clone(), true),
        Field::new("answer", DataType::Int64, true),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            strings(questions),
            strings(&vec!["physics".to_string(); n]),
            Arc::new(ch),
            Arc::new(Int64Array::from(
                (0..n as i64).map(|i| i % 4).collect::<Vec<_>>(),
            )),
        ],
    )
    .unwrap()
}

pub fn questions(seed: u64, n: usize, words: usize) -> Vec<String> {
    let mut rng = SplitMix(seed);
    (0..n).map(|_| sentence(&mut rng, words)).collect()
}

/// Put `bytes` into the cache as huggingface_hub does: blob by sha256, snapshot symlink.
fn cache_put(
    cache: &Path,
    role: Role,
    repo: &str,
    commit: &str,
    path: &str,
    bytes: &[u8],
) -> LockedFile {
    let c = dlm_data::hub::cache::Cache {
        root: cache.to_path_buf(),
    };
    let sha = dlm_data::util::sha256_hex(bytes);
    let blob = c.blob_path(role, repo, &sha).unwrap();
    std::fs::create_dir_all(blob.parent().unwrap()).unwrap();
    std::fs::write(&blob, bytes).unwrap();
    let snap = c.snapshot_path(role, repo, commit, path);
    std::fs::create_dir_all(snap.parent().unwrap()).unwrap();
    let _ = std::fs::remove_file(&snap);
    std::os::unix::fs::symlink(&blob, &snap).unwrap();
    LockedFile {
        path: path.to_string(),
        size: bytes.len() as u64,
        sha256: sha,
        git_oid: None,
    }
}

fn parquet_bytes(batch: RecordBatch) -> Vec<u8> {
    let mut buf = Vec::new();
    {
        let mut w = ArrowWriter::try_new(&mut buf, batch.schema(), None).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    buf
}

pub fn log_line(src: &str, role: &str, repo: &str, commit: &str, f: &LockedFile) -> String {
    serde_json::json!({
        "time": "2026-12-02T10:00:00Z", "source": src, "role": role, "repo": repo,
        "revision": commit, "commit": commit, "path": f.path,
        "url": format!("http://127.0.0.1/datasets/{repo}/resolve/{commit}/{}", f.path),
        "bytes": f.size, "sha256": f.sha256, "verified": true, "cached": false,
        "attempts": 1, "seconds": 0.01
    })
    .to_string()
}

/// Build the world. `sciq_override` lets a test replace sciq train questions (e.g. plant
/// a benchmark question).
pub fn world_with(sciq_train: Vec<String>) -> World {
    world_with_sciq(sciq_batch(&sciq_train, 11))
}

/// `batch` with string column `name`'s row `row` replaced by `value`.
pub fn set_cell(batch: &RecordBatch, name: &str, row: usize, value: &str) -> RecordBatch {
    use arrow::array::AsArray;
    let i = batch.schema().index_of(name).unwrap();
    let old = batch.column(i).as_string::<i32>();
    let vals: Vec<String> = (0..old.len())
        .map(|k| {
            if k == row {
                value.to_string()
            } else {
                old.value(k).to_string()
            }
        })
        .collect();
    let mut cols = batch.columns().to_vec();
    cols[i] = strings(&vals);
    RecordBatch::try_new(batch.schema(), cols).unwrap()
}

/// The world with this sciq train batch (see [`sciq_batch`]).
pub fn world_with_sciq(sciq_train: RecordBatch) -> World {
    world_with_sciq_file(parquet_bytes(sciq_train))
}

/// The world with these bytes as the sciq train parquet file.
pub fn world_with_sciq_file(sciq_train: Vec<u8>) -> World {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    let cache = root.join("cache");
    let mut log = Vec::new();

    // Training sources.
    let sciq = cache_put(
        &cache,
        Role::Train,
        "allenai/sciq",
        SCIQ_COMMIT,
        SCIQ_TRAIN,
        &sciq_train,
    );
    let aux_q = questions(22, MMLU_ROWS, 14);
    let aux = cache_put(
        &cache,
        Role::Train,
        "cais/mmlu",
        MMLU_COMMIT,
        MMLU_AUX,
        &parquet_bytes(mmlu_aux_batch(&aux_q, 23)),
    );
    log.push(log_line(
        "sciq",
        "train",
        "allenai/sciq",
        SCIQ_COMMIT,
        &sciq,
    ));
    log.push(log_line(
        "mmlu-auxiliary-train",
        "train",
        "cais/mmlu",
        MMLU_COMMIT,
        &aux,
    ));
    let manifest = root.join("mcq.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[source]]\nname = \"sciq\"\nrepo = \"allenai/sciq\"\nrevision = \"{SCIQ_COMMIT}\"\nsplit = \"train\"\nformat = \"parquet\"\ntext = \"{{question}}\"\n\n\
             [[source]]\nname = \"mmlu-auxiliary-train\"\nrepo = \"cais/mmlu\"\nrevision = \"{MMLU_COMMIT}\"\nconfig = \"auxiliary_train\"\nsplit = \"train\"\nformat = \"parquet\"\ntext = \"{{train.question}}\"\n"
        ),
    )
    .unwrap();
    let lock = Lock {
        version: 1,
        sources: vec![
            LockedSource {
                name: "sciq".into(),
                repo: "allenai/sciq".into(),
                revision: SCIQ_COMMIT.into(),
                commit: SCIQ_COMMIT.into(),
                config: "default".into(),
                split: "train".into(),
                role: Role::Train,
                files: vec![sciq],
            },
            LockedSource {
                name: "mmlu-auxiliary-train".into(),
                repo: "cais/mmlu".into(),
                revision: MMLU_COMMIT.into(),
                commit: MMLU_COMMIT.into(),
                config: "auxiliary_train".into(),
                split: "train".into(),
                role: Role::Train,
                files: vec![aux],
            },
        ],
    };
    lock.save(&root.join("mcq.lock")).unwrap();

    // Eval references (benchmarks), in their own area of the cache.
    let sciq_test_questions = questions(33, 10, 16);
    let st = cache_put(
        &cache,
        Role::EvalReference,
        "allenai/sciq",
        SCIQ_COMMIT,
        SCIQ_TEST,
        &parquet_bytes(sciq_batch(&sciq_test_questions, 34)),
    );
    let mt = cache_put(
        &cache,
        Role::EvalReference,
        "cais/mmlu",
        MMLU_COMMIT,
        MMLU_TEST,
        &parquet_bytes(mmlu_test_batch(&questions(44, 10, 16), 45)),
    );
    log.push(log_line(
        "sciq-test",
        "eval-reference",
        "allenai/sciq",
        SCIQ_COMMIT,
        &st,
    ));
    log.push(log_line(
        "mmlu-test",
        "eval-reference",
        "cais/mmlu",
        MMLU_COMMIT,
        &mt,
    ));
    let eval_manifest = root.join("eval-reference.toml");
    std::fs::write(
        &eval_manifest,
        format!(
            "[[source]]\nname = \"sciq-test\"\nrepo = \"allenai/sciq\"\nrevision = \"{SCIQ_COMMIT}\"\nsplit = \"test\"\nformat = \"parquet\"\ntext = \"{{question}}\"\nrole = \"eval-reference\"\n\n\
             [[source]]\nname = \"mmlu-test\"\nrepo = \"cais/mmlu\"\nrevision = \"{MMLU_COMMIT}\"\nconfig = \"all\"\nsplit = \"test\"\nformat = \"parquet\"\ntext = \"{{question}}\\n{{choices}}\"\nrole = \"eval-reference\"\n"
        ),
    )
    .unwrap();
    Lock {
        version: 1,
        sources: vec![
            LockedSource {
                name: "sciq-test".into(),
                repo: "allenai/sciq".into(),
                revision: SCIQ_COMMIT.into(),
                commit: SCIQ_COMMIT.into(),
                config: "default".into(),
                split: "test".into(),
                role: Role::EvalReference,
                files: vec![st],
            },
            LockedSource {
                name: "mmlu-test".into(),
                repo: "cais/mmlu".into(),
                revision: MMLU_COMMIT.into(),
                commit: MMLU_COMMIT.into(),
                config: "all".into(),
                split: "test".into(),
                role: Role::EvalReference,
                files: vec![mt],
            },
        ],
    }
    .save(&root.join("eval-reference.lock"))
    .unwrap();

    let log_path = cache.join("download.log");
    std::fs::write(&log_path, log.join("\n") + "\n").unwrap();
    let tokenizer =
        dlm_data::fixtures::tokenizer::write_tokenizer(&root.join("tokenizer")).unwrap();
    World {
        dir,
        cache,
        log: log_path,
        manifest,
        eval_manifest,
        tokenizer,
        sciq_test_questions,
    }
}

pub fn world() -> World {
    world_with(questions(11, SCIQ_ROWS, 14))
}
