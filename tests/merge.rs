//! `dlm-data merge` without Slurm: `--shard I/N` worker runs merged with `dlm-data merge` are
//! byte-identical to one process (distill, pack in every format), and missing or incomplete
//! parts are refused by name with nothing written.

mod pack_common;
mod teacher_support;

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dlm-data")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

fn write_prompts(path: &Path, n: usize) {
    let mut s = String::new();
    for i in 0..n {
        let options: Vec<String> = (0..4).map(|o| format!("choice {o} for {i}")).collect();
        let gold = ["A", "B", "C", "D"][i % 4];
        let v = serde_json::json!({"id": format!("sciq-train-{i:06}"), "source": "sciq",
            "repo": "allenai/sciq", "commit": "a".repeat(40), "file": "data/train.parquet",
            "row": i, "prompt": format!("Question {i}: which is right?"), "options": options,
            "gold": gold});
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn distill(prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    let t = teacher_support::teacher_dir();
    let mut a = vec![
        "distill",
        "--teacher",
        t.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--gen-length",
        "8",
        "--block-length",
        "4",
        "--steps",
        "4",
        "--batch-size",
        "2",
    ];
    a.extend_from_slice(extra);
    run(&a)
}

#[test]
fn distill_workers_merge_to_the_single_process_bytes() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 9);
    for (name, fmt) in [("one.json", "json"), ("one.jsonl", "jsonl")] {
        let single = d.path().join(name);
        ok(&distill(&prompts, &single, &["--format", fmt]));
        let sharded = d.path().join(format!("sharded-{name}"));
        let s = sharded.to_str().unwrap();
        // Worker 2 of 3 first, then 0: merging before all are done is refused by name.
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "2/3"],
        ));
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "0/3"],
        ));
        fails(&run(&["merge", s]), 2, "00001-of-00003");
        assert!(!sharded.exists(), "nothing written on refusal");
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "1/3"],
        ));
        assert!(!sharded.exists(), "workers do not finalise");
        let out = ok(&run(&["merge", s, "--json"]));
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["records"], 9);
        assert_eq!(v["workers"], 3);
        assert_eq!(
            std::fs::read(&sharded).unwrap(),
            std::fs::read(&single).unwrap(),
            "{name}: merged differs from one process"
        );
    }
}
