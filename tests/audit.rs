//! `dlm-data audit`: a clean pipeline (fetch world → mcq → decontam → distilled) passes every
//! link; breaking one link on purpose fails the audit for that reason and no other.

mod mcq_support;

use std::path::PathBuf;

use dlm_data::audit::report::{AuditReport, Status};
use dlm_data::manifest::{Lock, Role};
use dlm_data::mcq::prompts;
use mcq_support::*;

struct Pipeline {
    w: World,
    out: PathBuf,
    sft: PathBuf,
    prompts: PathBuf,
    distilled: PathBuf,
}

fn pipeline() -> Pipeline {
    pipeline_in("parquet")
}

/// The pipeline with the SFT set written as `format`.
fn pipeline_in(format: &str) -> Pipeline {
    let w = world();
    let out = w.root().join("out");
    let (code, _, err) = run_mcq_shards(&w, &out, format, "20");
    assert_eq!(code, 0, "{err}");
    let sft = out.join("sft");
    let prompts = out.join("prompts.jsonl");
    for t in [["--shards", p(&sft)], ["--prompts", p(&prompts)]] {
        let (code, _, err) = run(&decontam_args(&w, &t));
        assert_eq!(code, 0, "{err}");
    }
    let recs = prompts::read(&prompts).unwrap();
    let distilled = out.join("distilled.json");
    // Synthetic teacher output for every prompt.
    let teacher = serde_json::json!({"path": "teacher", "weights_sha256": "ab".repeat(32), "config_sha256": "cd".repeat(32)});
    std::fs::write(
        &distilled,
        serde_json::to_string(&distilled_for(&recs, teacher)).unwrap(),
    )
    .unwrap();
    Pipeline {
        w,
        out,
        sft,
        prompts,
        distilled,
    }
}

fn audit(pl: &Pipeline, with: &[&str]) -> (i32, AuditReport, String) {
    audit_json(&pl.w, &[], with)
}

fn all(pl: &Pipeline) -> Vec<&str> {
    vec![
        "--shards",
        p(&pl.sft),
        "--prompts",
        p(&pl.prompts),
        "--distilled",
        p(&pl.distilled),
    ]
}

#[test]
fn clean_pipeline_passes_every_link() {
    let pl = pipeline();
    let args = all(&pl);
    let (code, r, err) = audit(&pl, &args);
    assert_eq!(code, 0, "{err}\n{r:#?}");
    assert!(r.ok);
    for c in &r.checks {
        // No local source in this world: `local-sources` checked nothing (issue 57: SKIP).
        let want = if c.check == "local-sources" {
            Status::Skip
        } else {
            Status::Pass
        };
        assert_eq!(c.status, want, "{c:?}");
    }
    // The human report names every link and the verdict.
    let (code, text, _) = run_audit(&pl.w, &[], &[&["--hash"][..], &args].concat());
    assert_eq!(code, 0, "{text}");
    for name in [
        "manifest-pinned",
        "download-log",
        "cache",
        "shards",
        "prompts",
        "distilled",
        "split-policy",
        "eval-reference-isolation",
        "decontam",
    ] {
        assert!(text.contains(&format!("[PASS] {name}")), "{name}\n{text}");
    }
    assert!(text.contains("VERDICT: every link holds."), "{text}");
}

/// Issue 41: the mcq output carries its dataset card (OUT/README.md: the Hub's configs for
/// prompts.jsonl and the SFT parquet, the sources at their commits), and audit checks it: a
/// clean one passes, an edited one breaks `prompts` only.
#[test]
fn the_mcq_output_card_is_written_and_audited() {
    let pl = pipeline();
    let card = pl.out.join("README.md");
    let text = std::fs::read_to_string(&card).unwrap();
    for needle in [
        "config_name: prompts",
        "path: prompts.jsonl",
        "path: sft/data/*.parquet",
        "https://huggingface.co/datasets/allenai/sciq/tree/",
    ] {
        assert!(text.contains(needle), "{needle}\n{text}");
    }
    let args = all(&pl);
    let (code, r, err) = audit(&pl, &args);
    assert_eq!(code, 0, "{err}\n{r:#?}");
    std::fs::write(&card, text.replace("allenai/sciq@", "someone/else@")).unwrap();
    let (code, r, _) = audit(&pl, &args);
    assert_fails_only("", code, &r, "prompts", &["README.md: not the card"]);
}

#[test]
fn edited_shard_byte_breaks_shards_only() {
    let pl = pipeline();
    let f = pl.sft.join("data/part-00000.parquet");
    let mut b = std::fs::read(&f).unwrap();
    let mid = b.len() / 2;
    b[mid] ^= 0x01;
    std::fs::write(&f, b).unwrap();
    let args = all(&pl);
    let (code, r, _) = audit(&pl, &args);
    assert_fails_only("", code, &r, "shards", &["part-00000.parquet: sha256"]);
}

#[test]
fn dropped_log_line_breaks_download_log_only() {
    let pl = pipeline();
    let text = std::fs::read_to_string(&pl.w.log).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.contains(MMLU_AUX)).collect();
    assert_eq!(kept.len() + 1, text.lines().count());
    std::fs::write(&pl.w.log, kept.join("\n") + "\n").unwrap();
    let args = all(&pl);
    let (code, r, _) = audit(&pl, &args);
    assert_fails_only("", code, &r, "download-log", &[MMLU_AUX, "never logged"]);
}

#[test]
fn referenced_test_split_file_breaks_split_policy_only() {
    let pl = pipeline();
    // A test-split file fetched (cache + lock + log, all consistent) under the sciq source…
    let test_file = "data/test-00000-of-00002.parquet";
    let c = dlm_data::hub::cache::Cache {
        root: pl.w.cache.clone(),
    };
    let src = c.snapshot_path(Role::EvalReference, "allenai/sciq", SCIQ_COMMIT, SCIQ_TEST);
    let bytes = std::fs::read(&src).unwrap();
    let dst = c.snapshot_path(Role::Train, "allenai/sciq", SCIQ_COMMIT, test_file);
    std::fs::write(&dst, &bytes).unwrap();
    let lock_path = pl.w.root().join("mcq.lock");
    let mut lock = Lock::load(&lock_path).unwrap();
    let lf = dlm_data::manifest::LockedFile {
        path: test_file.into(),
        size: bytes.len() as u64,
        sha256: dlm_data::util::sha256_hex(&bytes),
        git_oid: None,
    };
    let mut log = std::fs::read_to_string(&pl.w.log).unwrap();
    log.push_str(&(log_line("sciq", "train", "allenai/sciq", SCIQ_COMMIT, &lf) + "\n"));
    std::fs::write(&pl.w.log, log).unwrap();
    lock.sources[0].files.push(lf);
    lock.save(&lock_path).unwrap();
    // …and referenced by a prompt.
    let text = std::fs::read_to_string(&pl.prompts).unwrap();
    let text = text.replacen(SCIQ_TRAIN, test_file, 1);
    std::fs::write(&pl.prompts, text).unwrap();
    std::fs::remove_file(pl.out.join("prompts.decontam.json")).unwrap();
    let (code, r, _) = audit(&pl, &["--prompts", p(&pl.prompts)]);
    assert_fails_only(
        "",
        code,
        &r,
        "split-policy",
        &["prompts.jsonl line 1: uses data/test-00000-of-00002.parquet"],
    );
}

#[test]
fn unknown_distilled_id_breaks_distilled_only() {
    let pl = pipeline();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pl.distilled).unwrap()).unwrap();
    let mut extra = v[0].clone();
    extra["id"] = "sciq-train-999999".into();
    v.as_array_mut().unwrap().push(extra);
    std::fs::write(&pl.distilled, v.to_string()).unwrap();
    let args = all(&pl);
    let (code, r, _) = audit(&pl, &args);
    assert_fails_only(
        "",
        code,
        &r,
        "distilled",
        &["\"sciq-train-999999\" is not in the prompts"],
    );
}

#[test]
fn second_teacher_and_eval_reference_use_are_named() {
    let pl = pipeline();
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&pl.distilled).unwrap()).unwrap();
    v[3]["teacher"]["weights_sha256"] = "ef".repeat(32).into();
    std::fs::write(&pl.distilled, v.to_string()).unwrap();
    let args = all(&pl);
    let (code, r, _) = audit(&pl, &args);
    assert_fails_only("", code, &r, "distilled", &["2 teachers"]);

    // A prompt pointing at an eval-reference (benchmark) file.
    let text = std::fs::read_to_string(&pl.prompts).unwrap();
    std::fs::write(&pl.prompts, text.replacen(SCIQ_TRAIN, SCIQ_TEST, 1)).unwrap();
    let (code, r, _) = audit(&pl, &["--prompts", p(&pl.prompts)]);
    assert_eq!(code, 1);
    assert!(
        failed(&r).contains(&"eval-reference-isolation".to_string()),
        "{:?}",
        failed(&r)
    );
    assert!(problems(&r, "eval-reference-isolation").contains(SCIQ_TEST));
}

#[test]
fn contaminated_output_fails_until_dropped_copy() {
    let mut qs = questions(11, SCIQ_ROWS, 14);
    qs[2] = format!("Quote: {}", questions(33, 10, 16)[7]);
    let w = world_with(qs);
    let out = w.root().join("out");
    let (code, _, err) = run_mcq(&w, &out, &[]);
    assert_eq!(code, 0, "{err}");
    let pr = out.join("prompts.jsonl");
    let clean = out.join("prompts.clean.jsonl");
    let (code, _, err) = run(&decontam_args(
        &w,
        &["--prompts", p(&pr), "--drop", p(&clean)],
    ));
    assert_eq!(code, 0, "{err}");
    let a = |f: &std::path::Path| {
        let (code, r, _) = audit_json(&w, &[], &["--prompts", p(f)]);
        (code, r)
    };
    let (code, r) = a(&pr);
    assert_fails_only("", code, &r, "decontam", &["1 document(s) overlap"]);
    let (code, r) = a(&clean);
    assert_eq!(code, 0, "{r:#?}");
    // Without any decontam report the audit warns but does not fail.
    std::fs::remove_file(out.join("prompts.clean.decontam.json")).unwrap();
    let (code, r) = a(&clean);
    assert_eq!(code, 0);
    assert_eq!(status(&r, "decontam"), Status::Warn);
}

#[test]
fn bad_usage_exits_2() {
    let pl = pipeline();
    let (code, _, err) = run(&[
        "audit",
        "--manifest",
        p(&pl.w.manifest),
        "--distilled",
        p(&pl.distilled),
    ]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = run(&["audit", "--manifest", p(&pl.w.root().join("nope.toml"))]);
    assert_eq!(code, 1);
}

/// MDS and Megatron SFT sets pass every link; a flipped byte in the last shard (and, for
/// Megatron, in the `.idx` beside the `.bin`) breaks the shards link, naming the file.
#[test]
fn mds_and_megatron_sft_sets_are_audited() {
    for (fmt, file) in [
        ("mds", "shard.00001.mds.zstd"),
        ("megatron", "part-00001.idx"),
    ] {
        let pl = pipeline_in(fmt);
        let args = all(&pl);
        let (code, r, err) = audit(&pl, &args);
        assert_eq!(code, 0, "{fmt}: {err}\n{r:#?}");
        for c in &r.checks {
            let want = if c.check == "local-sources" {
                Status::Skip
            } else {
                Status::Pass
            };
            assert_eq!(c.status, want, "{fmt}: {c:?}");
        }
        let f = pl.sft.join(file);
        let mut b = std::fs::read(&f).unwrap();
        let last = b.len() - 1;
        b[last] ^= 0x01;
        std::fs::write(&f, b).unwrap();
        let (code, r, _) = audit(&pl, &args);
        assert_fails_only(fmt, code, &r, "shards", &[&format!("{file}: sha256")]);
    }
}

/// A file the index does not list in an audited shard directory (a directory reader would
/// train on it): the shards check fails naming it.
#[test]
fn an_unlisted_file_in_a_shard_dir_fails_shards() {
    let pl = pipeline();
    // Beside index.json, and inside data/ where a reader of the directory reads every file.
    for name in [
        "extra.parquet",
        "data/part-00099.parquet",
        "data/extra.parquet",
    ] {
        std::fs::copy(pl.sft.join("data/part-00000.parquet"), pl.sft.join(name)).unwrap();
        let (code, r, _) = audit(&pl, &["--shards", p(&pl.sft)]);
        assert_fails_only(name, code, &r, "shards", &[name]);
        std::fs::remove_file(pl.sft.join(name)).unwrap();
    }
    let (code, _, err) = audit(&pl, &["--shards", p(&pl.sft)]);
    assert_eq!(code, 0, "{err}");
}

/// A record whose answer contradicts its own answer_probs, one whose `correct` contradicts
/// answer vs gold, and one missing from the middle: each fails `distilled`, named.
#[test]
fn distilled_records_must_agree_with_themselves_and_leave_no_gap() {
    let pl = pipeline();
    let orig = std::fs::read_to_string(&pl.distilled).unwrap();
    let args = all(&pl);
    let edit = |f: &dyn Fn(&mut Vec<serde_json::Value>)| {
        let mut v: Vec<serde_json::Value> = serde_json::from_str(&orig).unwrap();
        f(&mut v);
        std::fs::write(&pl.distilled, serde_json::to_string(&v).unwrap()).unwrap();
    };
    type Edit = Box<dyn Fn(&mut Vec<serde_json::Value>)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|v| {
                let gold = v[1]["gold"].as_str().unwrap().to_string();
                let other = if gold == "A" { "B" } else { "A" };
                v[1]["answer"] = other.into();
                v[1]["correct"] = false.into();
            }),
            "contradicts answer_probs",
        ),
        (
            Box::new(|v| v[2]["correct"] = false.into()),
            "correct is false",
        ),
        (
            Box::new(|v| {
                v.remove(3);
            }),
            "have no record",
        ),
    ];
    for (f, needle) in &cases {
        edit(f.as_ref());
        let (code, r, _) = audit(&pl, &args);
        assert_fails_only(needle, code, &r, "distilled", &[*needle]);
    }
    std::fs::write(&pl.distilled, &orig).unwrap();
    let (code, _, err) = audit(&pl, &args);
    assert_eq!(code, 0, "{err}");
}

/// An empty prompts.jsonl is a WARN, not a silent PASS.
#[test]
fn an_empty_prompts_file_warns() {
    let pl = pipeline();
    let empty = pl.out.join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let (code, r, _) = audit(&pl, &["--prompts", p(&empty)]);
    assert_eq!(code, 0);
    let c = r.checks.iter().find(|c| c.check == "prompts").unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
}

/// A lock entry removed by hand (its data would silently drop out of `pack`): the log still
/// records the verified download, so `download-log` WARNs naming the source and the file.
#[test]
fn a_lock_entry_removed_by_hand_warns() {
    let pl = pipeline();
    let lock_path = pl.w.manifest.with_extension("lock");
    let mut lock = Lock::load(&lock_path).unwrap();
    let src = lock
        .sources
        .iter_mut()
        .find(|s| s.files.iter().any(|f| f.path == MMLU_AUX))
        .unwrap();
    src.files.retain(|f| f.path != MMLU_AUX);
    lock.save(&lock_path).unwrap();
    let (_, r, _) = audit(&pl, &[]);
    let c = r.checks.iter().find(|c| c.check == "download-log").unwrap();
    assert_eq!(c.status, Status::Warn, "{c:?}");
    let notes = c.notes.join("\n");
    assert!(
        notes.contains(MMLU_AUX) && notes.contains("removed by hand"),
        "{notes}"
    );
}
