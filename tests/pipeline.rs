//! The documented pipeline, unattended (issue 29), end to end on the binary over the project's
//! fixtures served by the hub emulator:
//! - the README's command sequence (read from README.md itself) runs twice in the same
//!   directories, exit 0 both times, the second leaving every output as it was;
//! - `dlm-data run PIPELINE.toml` runs the same job from one file; a second run skips every
//!   step but the audit; `--only` / `--from` select steps; a step whose output went missing
//!   runs again alone; an overlapping start exits 75 naming the holder; a bad key in the file
//!   is an error naming the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

mod fixture_dirs;
use fixture_dirs::{
    changed, expect, files_under, fixtures, readme_commands, readme_pipeline, sha_and_mtime, work,
    Work,
};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dlm-data"))
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every file under `dir` → sha256 (lock files of live runs excluded: none are left).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    files_under(dir)
        .into_iter()
        .map(|(rel, p)| {
            let (mut sha, m) = sha_and_mtime(&p);
            // mcq's and decontam's outputs are left untouched by a rerun: mtimes too.
            if rel.contains("mcq/") || rel.ends_with("decontam.json") {
                sha.push_str(&format!(" {m:?}"));
            }
            (rel, sha)
        })
        .collect()
}

#[test]
fn the_readme_pipeline_runs_twice_in_the_same_directories() {
    let w = work();
    let cmds = readme_commands();
    let names: Vec<&str> = cmds.iter().map(|c| c[0].as_str()).collect();
    for must in [
        "fetch", "pack", "mcq", "decontam", "distill", "lineage", "audit",
    ] {
        assert!(
            names.contains(&must),
            "README pipeline lacks {must}: {names:?}"
        );
    }
    // Decontam of the SFT shards is part of the documented pipeline.
    assert!(
        cmds.iter()
            .any(|c| c[0] == "decontam" && c.iter().any(|a| a.ends_with("mcq/sft"))),
        "README pipeline does not decontaminate the SFT shards"
    );
    let mut first = None;
    for round in 1..=2 {
        for c in &cmds {
            let t0 = Instant::now();
            let o = w.run(c);
            assert_eq!(
                o.status.code(),
                Some(0),
                "round {round}: `dlm-data {}` failed:\n{}",
                c.join(" "),
                err(&o)
            );
            if round == 2 {
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "round 2: `dlm-data {}` is not a quick no-op",
                    c.join(" ")
                );
            }
        }
        let snap = snapshot(w.root());
        match &first {
            None => first = Some(snap),
            Some(f) => {
                // Everything is untouched (mcq's and decontam's files by mtime too).
                let changed: Vec<String> = changed(f, &snap)
                    .into_iter()
                    .filter(|k| !k.ends_with("download.log"))
                    .collect();
                assert!(changed.is_empty(), "the second round changed {changed:?}");
                // The lineage did not grow: the same three stages.
                let l: serde_json::Value =
                    serde_json::from_slice(&std::fs::read(w.root().join("lineage.json")).unwrap())
                        .unwrap();
                assert_eq!(l["stages"].as_array().unwrap().len(), 3);
            }
        }
    }
}

fn write_pipeline(w: &Work) -> PathBuf {
    let p = w.root().join("pipeline.toml");
    let tok = fixtures().join("tokenizer").display().to_string();
    std::fs::write(&p, readme_pipeline(&tok)).unwrap();
    p
}

/// `dlm-data run … --json`: exit code, the one JSON line, stderr.
fn run_json(w: &Work, extra: &[&str]) -> (i32, serde_json::Value, String) {
    let o = w
        .cmd()
        .args(["run", "pipeline.toml", "--json"])
        .args(extra)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    let v = if lines.len() == 1 {
        serde_json::from_str(lines[0]).unwrap()
    } else {
        serde_json::Value::Null
    };
    if o.status.code() == Some(0) {
        assert_eq!(lines.len(), 1, "--json prints exactly one line:\n{out}");
    }
    (o.status.code().unwrap_or(-1), v, err(&o))
}

const ALL: [&str; 6] = ["fetch", "pack", "mcq", "decontam", "distill", "audit"];

#[test]
fn run_does_the_whole_job_then_skips_what_is_complete() {
    let w = work();
    write_pipeline(&w);
    let (code, v, e) = run_json(&w, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &ALL.map(|s| (s, "ran")));
    assert_eq!(v["verdict"], "pass", "{v}");
    for f in [
        "shards/stage1/index.json",
        "shards/stage1/decontam.json",
        "shards/mcq/prompts.jsonl",
        "shards/mcq/prompts.decontam.json",
        "shards/mcq/sft/index.json",
        "shards/mcq/sft/decontam.json",
        "distilled.json",
        "models/base/config.json",
        "manifests/stage1.lock",
        "pipeline.run.json",
    ] {
        assert!(w.root().join(f).is_file(), "{f} missing");
    }
    let before = snapshot(w.root());

    // Second run: every step but the audit is complete; nothing changes.
    let (code, v, e) = run_json(&w, &[]);
    assert_eq!(code, 0, "{e}");
    let mut want: Vec<(&str, &str)> = ALL[..5].iter().map(|s| (*s, "skipped")).collect();
    want.push(("audit", "ran"));
    expect(&v, &want);
    assert_eq!(v["verdict"], "pass");
    assert_eq!(snapshot(w.root()), before, "a no-op run changed files");

    // Human mode: the audit report and its verdict on stdout.
    let o = w.cmd().args(["run", "pipeline.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("VERDICT: every link holds."), "{out}");

    // --only / --from select steps.
    let (code, v, e) = run_json(&w, &["--only", "pack"]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[
            ("fetch", "not-selected"),
            ("pack", "skipped"),
            ("mcq", "not-selected"),
            ("decontam", "not-selected"),
            ("distill", "not-selected"),
            ("audit", "not-selected"),
        ],
    );
    assert_eq!(v["verdict"], "not-audited");
    let (code, v, e) = run_json(&w, &["--from", "distill", "--rerun"]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[
            ("fetch", "not-selected"),
            ("pack", "not-selected"),
            ("mcq", "not-selected"),
            ("decontam", "not-selected"),
            ("distill", "ran"),
            ("audit", "ran"),
        ],
    );

    // An output gone: that step (and only what reads it) runs again.
    std::fs::remove_file(w.root().join("shards/mcq/sft/decontam.json")).unwrap();
    let (code, v, e) = run_json(&w, &[]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[
            ("fetch", "skipped"),
            ("pack", "skipped"),
            ("mcq", "skipped"),
            ("decontam", "ran"),
            ("distill", "skipped"),
            ("audit", "ran"),
        ],
    );
    assert!(w.root().join("shards/mcq/sft/decontam.json").is_file());

    // A step not in the file is a usage error.
    let (code, _, e) = run_json(&w, &["--only", "bogus"]);
    assert_eq!(code, 2, "{e}");
}

#[test]
fn an_overlapping_run_exits_75_naming_the_holder() {
    let w = work();
    write_pipeline(&w);
    let pause = w.root().join("pause");
    let mut first = w
        .cmd()
        .args(["run", "pipeline.toml"])
        .env("DLM_TEST_PAUSE", "lock-held:1")
        .env("DLM_TEST_PAUSE_FILE", &pause)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !pause.exists() {
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended early"
        );
        assert!(t0.elapsed() < Duration::from_secs(60), "never paused");
        std::thread::sleep(Duration::from_millis(5));
    }
    let t1 = Instant::now();
    let o = w.cmd().args(["run", "pipeline.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", err(&o));
    assert!(
        t1.elapsed() < Duration::from_secs(10),
        "did not exit at once"
    );
    let e = err(&o);
    assert!(e.contains(&format!("pid {}", first.id())), "{e}");
    assert!(e.contains("started 20"), "{e}");
    assert!(e.contains("pipeline.toml"), "{e}");
    // Nothing ran on behalf of the second start.
    assert!(!w.root().join("shards").exists());
    std::fs::remove_file(&pause).unwrap();
    assert!(first.wait().unwrap().success());
}

#[test]
fn a_bad_pipeline_file_is_named_with_its_key() {
    let w = work();
    let p = write_pipeline(&w);
    let good = std::fs::read_to_string(&p).unwrap();
    // A misspelt key.
    std::fs::write(&p, good.replace("seq_len = 256", "seqlen = 256")).unwrap();
    let o = w.cmd().args(["run", "pipeline.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("pipeline.toml") && e.contains("seqlen"), "{e}");
    // A value of the wrong type.
    std::fs::write(&p, good.replace("limit = 6", "limit = \"six\"")).unwrap();
    let o = w.cmd().args(["run", "pipeline.toml"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("pipeline.toml") && e.contains("limit"), "{e}");
    // A flag the step's command does not have: the step is named.
    std::fs::write(
        &p,
        good.replace("limit = 6", "limit = 6\nargs = [\"--no-such-flag\"]"),
    )
    .unwrap();
    let o = w
        .cmd()
        .args(["run", "pipeline.toml", "--only", "distill"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("distill") && e.contains("--no-such-flag"), "{e}");
    // Nothing was written.
    assert!(!w.root().join("shards").exists());
}

/// A pack run that failed before its first shard (a typo'd `--text-column`) does not lock its
/// `--out`: the corrected rerun packs there. A rerun with other arguments into a directory
/// that holds shards is refused naming each differing argument, recorded and new value.
#[test]
fn a_run_that_committed_nothing_locks_nothing_and_refusals_name_the_difference() {
    let fx = fixtures();
    let input = fx.join("hub/HuggingFaceFW/fineweb-edu/sample/10BT/000_00000.parquet");
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let pack = |column: &str, seq: &str| {
        bin()
            .args(["pack", "--input"])
            .arg(&input)
            .args(["--text-column", column, "--seq-len", seq, "--tokenizer"])
            .arg(fx.join("tokenizer"))
            .arg("--out")
            .arg(&out)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap()
    };
    let o = pack("txet", "64");
    assert_ne!(o.status.code(), Some(0));
    assert!(err(&o).contains("txet"), "{}", err(&o));
    let o = pack("text", "64");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(idx["complete"], true);
    assert_eq!(idx["args"]["text_column"], "text");
    // Same arguments: a no-op. Other arguments: refused, naming what differs.
    let before = snapshot(&out);
    let o = pack("text", "64");
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(snapshot(&out), before);
    let o = pack("text", "32");
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    let e = err(&o);
    assert!(e.contains("seq_len: recorded 64, now 32"), "{e}");
    assert!(
        !e.contains("text_column"),
        "only what differs is named: {e}"
    );
    assert_eq!(snapshot(&out), before, "a refused run changed the output");
}

/// `--force` clears only this tool's own files: decontam's reports (journaled as dlm-data's)
/// go with the shards, a file of the user's is refused and kept.
#[test]
fn force_clears_own_files_only() {
    let w = work();
    write_pipeline(&w);
    for step in ["fetch", "pack", "mcq", "decontam"] {
        let (code, _, e) = run_json(&w, &["--only", step]);
        assert_eq!(code, 0, "{e}");
    }
    let mcq = w.root().join("shards/mcq");
    assert!(mcq.join("prompts.decontam.json").is_file());
    // mcq again with another seed: the prompts change, the report on them is stale and goes.
    let tok = fixtures().join("tokenizer").display().to_string();
    let args: Vec<String> = [
        "mcq",
        "--manifest",
        "manifests/mcq.toml",
        "--tokenizer",
        &tok,
        "--out",
        "shards/mcq",
        "--seed",
        "7",
    ]
    .map(String::from)
    .to_vec();
    let o = w.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        !mcq.join("prompts.decontam.json").exists(),
        "a stale report was kept"
    );
    // The same command again is a no-op: nothing written, nothing checked or refused.
    let before = std::fs::metadata(mcq.join("prompts.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    std::fs::write(mcq.join("notes.txt"), "mine").unwrap();
    let o = w.run(&args);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let after = std::fs::metadata(mcq.join("prompts.jsonl"))
        .unwrap()
        .modified()
        .unwrap();
    assert_eq!(before, after, "an up-to-date rerun rewrote prompts.jsonl");
    // A run that writes, beside a file of the user's: refused (even with --force), and kept.
    let mut forced = args.clone();
    *forced.last_mut().unwrap() = "8".into();
    forced.push("--force".into());
    let o = w.run(&forced);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(err(&o).contains("notes.txt"), "{}", err(&o));
    assert_eq!(
        std::fs::read_to_string(mcq.join("notes.txt")).unwrap(),
        "mine"
    );
}
