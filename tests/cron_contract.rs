//! The nightly job's output and preemption contract (issue 41, items 4, 5, 8, 9), end to end
//! on the binary over the project's fixtures (hub emulator, tiny teacher):
//! - `--json` prints exactly one line on every exit path: a failing `run` step (step, command
//!   line, exit code, error), a refusal, a command line that does not parse, a signal;
//! - `--quiet` prints nothing on a clean cached rerun of the README pipeline;
//! - `distill` reports progress between forward passes, and SIGTERM mid-window exits 143 at
//!   the next forward pass with nothing of the window committed, the rerun byte-identical;
//!   a read-only command ends at once on SIGTERM;
//! - a step-by-step rerun rewrites nothing: locks, architecture.json, distilled.json and its
//!   part keep bytes and mtimes, download.log gains no line;
//! - each shard directory carries a dataset card whose YAML `configs` match its data files,
//!   and the audit checks the card against index.json.
//!
//! Deterministic: runs pause at a named point (`DLM_TEST_PAUSE`, see `dlm_data::signals`) and
//! the tests wait for the pause file; the only time bound asserted is the 5 s promise.

mod pause_support;
mod teacher_support;

use pause_support::{signal, spawn_paused};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

mod fixture_dirs;
use fixture_dirs::{changed, files_under, fixtures, readme_commands, sha_and_mtime, work, Work};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dlm-data"))
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// The one JSON line on stdout (panics unless there is exactly one).
fn one_line(o: &Output) -> serde_json::Value {
    let out = String::from_utf8_lossy(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "--json must print exactly one line:\n{out}\n{}",
        err(o)
    );
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}

/// Every file under `dir` → (sha256, mtime).
fn snapshot(dir: &Path) -> BTreeMap<String, (String, SystemTime)> {
    files_under(dir)
        .into_iter()
        .map(|(rel, p)| (rel, sha_and_mtime(&p)))
        .collect()
}

fn lines_of(p: &Path) -> usize {
    std::fs::read_to_string(p)
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

/// Issue 41 rows "the step-by-step README commands rerun unchanged" and "--quiet": the second
/// round (with `--quiet`) prints nothing at all, leaves every byte and mtime of the locks,
/// architecture.json, distilled.json and its part alone (of every file but the log), and
/// download.log gains no line; each shard directory carries its card, which the audit holds.
#[test]
fn an_unchanged_readme_rerun_is_silent_and_rewrites_nothing() {
    let w = work();
    let cmds = readme_commands();
    for c in &cmds {
        let o = w.cmd().args(c).output().unwrap();
        assert_eq!(code(&o), 0, "`dlm-data {}`:\n{}", c.join(" "), err(&o));
    }
    let log = w.root().join("hf-home/hub/download.log");
    let log_lines = lines_of(&log);
    assert!(log_lines > 0, "no download.log at {}", log.display());
    let before = snapshot(w.root());
    let named: Vec<&String> = before
        .keys()
        .filter(|k| {
            k.ends_with(".lock") && k.starts_with("manifests/")
                || k.ends_with("architecture.json")
                || k.starts_with("distilled.json")
        })
        .collect();
    assert!(
        named.len() >= 7,
        "locks, architecture.json, distilled.json + part: {named:?}"
    );
    // Windows of the filesystem's mtime granularity: a rewrite would show.
    std::thread::sleep(Duration::from_millis(20));
    for c in &cmds {
        let o = w.cmd().arg("--quiet").args(c).output().unwrap();
        assert_eq!(
            code(&o),
            0,
            "`dlm-data --quiet {}`:\n{}",
            c.join(" "),
            err(&o)
        );
        assert_eq!(err(&o), "", "--quiet `{}` wrote to stderr", c.join(" "));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            "",
            "--quiet `{}` wrote to stdout",
            c.join(" ")
        );
    }
    let after = snapshot(w.root());
    let changed: Vec<String> = changed(&before, &after)
        .into_iter()
        .filter(|k| !k.ends_with("download.log"))
        .collect();
    assert!(changed.is_empty(), "the rerun rewrote {changed:?}");
    assert!(
        lines_of(&log) <= log_lines + 1,
        "download.log grew from {log_lines} to {} lines on a run that downloaded nothing",
        lines_of(&log)
    );
    for d in ["shards/stage1", "shards/mcq/sft"] {
        assert!(
            w.root().join(d).join("README.md").is_file(),
            "{d} has no card"
        );
    }
}

// ------------------------------------------------------------------------- --json

/// A pipeline over a JSONL input that pack cannot read (a broken line): the step fails at
/// run time, after preflight.
fn failing_pipeline(dir: &Path) -> PathBuf {
    std::fs::write(
        dir.join("own.jsonl"),
        "{\"text\": \"fine\"}\nnot json at all\n",
    )
    .unwrap();
    let tok = fixtures().join("tokenizer").display().to_string();
    let p = dir.join("pipeline.toml");
    std::fs::write(
        &p,
        format!(
            "version = 1\ntokenizer = {tok:?}\n\n[pack]\ninputs = [\"own.jsonl\"]\nout = \"packed\"\nseq_len = 64\n"
        ),
    )
    .unwrap();
    p
}

/// Issue 41 row "a step fails under `run --json`": one JSON line naming the step, its
/// command line, the exit code and the error; the exit code is the step's.
#[test]
fn run_json_names_the_failing_step() {
    let d = tempfile::tempdir().unwrap();
    let p = failing_pipeline(d.path());
    let o = bin()
        .current_dir(d.path())
        .env("RUST_LOG", "warn")
        .args(["run", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(code(&o), 1, "{}", err(&o));
    let v = one_line(&o);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["command"], "run", "{v}");
    assert_eq!(v["step"], "pack", "{v}");
    assert_eq!(v["exit"], 1, "{v}");
    assert_eq!(v["step_exit"], 1, "{v}");
    let line = v["step_command"].as_str().unwrap();
    assert!(
        line.starts_with("dlm-data pack ") && line.contains("own.jsonl"),
        "{v}"
    );
    assert!(v["error"].as_str().unwrap().contains("own.jsonl"), "{v}");
    assert_eq!(v["signal"], serde_json::Value::Null, "{v}");
}

/// Issue 41: a failing *audit* step (an error, not a broken verdict) under `run --json`
/// carries the `step` field like every other step's failure.
#[test]
fn run_json_names_a_failing_audit_step() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("own.jsonl"),
        "{\"text\": \"fine words here\"}\n",
    )
    .unwrap();
    let tok = fixtures().join("tokenizer").display().to_string();
    let p = d.path().join("pipeline.toml");
    // --distilled without --prompts: audit's own usage error, found when the step runs.
    std::fs::write(
        &p,
        format!(
            "version = 1\ntokenizer = {tok:?}\n\n[pack]\ninputs = [\"own.jsonl\"]\nout = \"packed\"\nseq_len = 4\n\n[audit]\nargs = [\"--distilled\", \"own.jsonl\"]\n"
        ),
    )
    .unwrap();
    let o = bin()
        .current_dir(d.path())
        .env("RUST_LOG", "warn")
        .args(["run", "--json"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", err(&o));
    let v = one_line(&o);
    assert_eq!(v["ok"], false, "{v}");
    assert_eq!(v["step"], "audit", "{v}");
    assert_eq!(v["step_exit"], 2, "{v}");
    assert!(
        v["step_command"]
            .as_str()
            .unwrap()
            .starts_with("dlm-data audit "),
        "{v}"
    );
    assert!(v["error"].as_str().unwrap().contains("--prompts"), "{v}");
}

/// A refusal (bad pipeline key, exit 2), a command line that does not parse (exit 2) and a
/// failing plain command (exit 1) each print one line under `--json`.
#[test]
fn json_prints_one_line_on_refusals_and_usage_errors() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("bad.toml");
    std::fs::write(&p, "version = 1\nbogus_key = 3\n").unwrap();
    std::fs::create_dir_all(d.path().join("badidx")).unwrap();
    std::fs::write(d.path().join("badidx/index.json"), "{not json").unwrap();
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            vec!["run".into(), "--json".into(), p.display().to_string()],
            2,
            "run",
        ),
        (
            [
                "pack",
                "--json",
                "--seq-len",
                "0",
                "--input",
                "x",
                "--tokenizer",
                "t",
                "--out",
                "o",
            ]
            .map(String::from)
            .to_vec(),
            2,
            "pack",
        ),
        (
            ["inspect", "--json"]
                .map(String::from)
                .into_iter()
                .chain([d.path().join("badidx").display().to_string()])
                .collect(),
            1,
            "inspect",
        ),
    ];
    for (args, want, cmd) in cases {
        let o = bin().current_dir(d.path()).args(&args).output().unwrap();
        assert_eq!(code(&o), want, "{args:?}: {}", err(&o));
        let v = one_line(&o);
        assert_eq!(v["exit"], want, "{args:?}: {v}");
        assert_eq!(v["command"], cmd, "{v}");
        assert!(!v["error"].as_str().unwrap().is_empty(), "{v}");
    }
    // Without --json, nothing on stdout.
    let o = bin()
        .current_dir(d.path())
        .args(["run"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2);
    assert!(o.stdout.is_empty());
}

/// `--json` is a global flag: before the subcommand or after it, the same one line; inside a
/// pipeline's step (no `--json` there) the step prints none of its own.
#[test]
fn json_is_global_before_or_after_the_subcommand() {
    let d = tempfile::tempdir().unwrap();
    let before = bin()
        .args(["--json", "fixtures", "--out"])
        .arg(d.path().join("a"))
        .output()
        .unwrap();
    let after = bin()
        .args(["fixtures", "--out"])
        .arg(d.path().join("b"))
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(code(&before), 0, "{}", err(&before));
    assert_eq!(code(&after), 0, "{}", err(&after));
    let (a, b) = (one_line(&before), one_line(&after));
    let keys = |v: &serde_json::Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&a), keys(&b), "{a} vs {b}");
    assert!(
        a.to_string()
            .contains(&d.path().join("a").display().to_string()),
        "{a}"
    );
    // Without it, nothing on stdout.
    let none = bin()
        .args(["fixtures", "--out"])
        .arg(d.path().join("c"))
        .output()
        .unwrap();
    assert_eq!(code(&none), 0, "{}", err(&none));
    assert!(
        none.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&none.stdout)
    );
}

// ------------------------------------------------------------------------- distill

fn write_prompts(path: &Path, n: usize) {
    let mut s = String::new();
    for i in 0..n {
        let gold = ["A", "B", "C"][i % 3];
        let v = serde_json::json!({"id": format!("p-{i:03}"), "source": "fixture", "repo": "fixture/prompts",
            "commit": "0".repeat(40), "file": "p.jsonl", "row": i,
            "prompt": format!("Question {i}: say something about {} things.", 3 + i % 5),
            "options": ["yes", "no", "maybe"], "gold": gold});
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

/// distill with the default window (16 × batch: one window holds all prompts here).
fn distill_cmd(prompts: &Path, out: &Path, global: &[&str]) -> Command {
    let mut c = Command::new(teacher_support::bin());
    c.args(global)
        .args(["distill", "--json", "--teacher"])
        .arg(teacher_support::teacher_dir())
        .arg("--prompts")
        .arg(prompts)
        .arg("--out")
        .arg(out)
        .args(teacher_support::small_sampler_args(&[], "2"))
        .env("RUST_LOG", "warn")
        .env("NO_COLOR", "1");
    c
}

/// Issue 41 row "SIGTERM to distill": mid-window (the 5th forward pass of the only window),
/// SIGTERM ends the run within 5 s with 143 and the `--json` line naming the signal; nothing
/// of the window is committed; the rerun ends byte-identical to an uninterrupted run.
#[test]
fn sigterm_mid_window_abandons_it_and_the_rerun_is_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 6);
    let reference = d.path().join("reference.json");
    let o = distill_cmd(&prompts, &reference, &[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));

    let out = d.path().join("distilled.json");
    let (child, pause) = spawn_paused(
        distill_cmd(&prompts, &out, &[]),
        "distill-forward:5",
        d.path(),
    );
    let t0 = Instant::now();
    signal(&child, libc::SIGTERM);
    let o = child.wait_with_output().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    let _ = std::fs::remove_file(&pause);
    assert_eq!(code(&o), 128 + libc::SIGTERM, "{}", err(&o));
    let v = one_line(&o);
    assert_eq!(v["signal"], "SIGTERM", "{v}");
    assert_eq!(v["exit"], 143, "{v}");
    assert!(!out.exists(), "no output from an abandoned window");
    // Nothing of the window committed: no part is left (it had no batch).
    let parts = dlm_data::distill::output::parts_dir(&out);
    let committed: usize = dlm_data::distill::output::list_parts(&parts)
        .unwrap()
        .iter()
        .map(|p| {
            dlm_data::distill::output::read_part(p)
                .unwrap()
                .batches
                .len()
        })
        .sum();
    assert_eq!(committed, 0, "the abandoned window left a commit");

    let o = distill_cmd(&prompts, &out, &[]).output().unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&reference).unwrap()
    );
}

/// Issue 41 row "distill prints nothing for 74 s": held at a forward pass longer than
/// `--progress-interval 1`, the next forward writes a progress line (forward passes of the
/// estimate, prompts committed) before the window commits.
#[test]
fn distill_reports_forward_passes_between_commits() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 4);
    let out = d.path().join("distilled.json");
    let (child, pause) = spawn_paused(
        distill_cmd(&prompts, &out, &["--progress-interval", "1"]),
        "distill-forward:3",
        d.path(),
    );
    // Longer than the interval (a pause, not a timing assertion).
    std::thread::sleep(Duration::from_millis(1100));
    std::fs::remove_file(&pause).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}", err(&o));
    let e = err(&o);
    let mid: Vec<&str> = e
        .lines()
        .filter(|l| l.contains("forward passes") && l.contains(" 0/4 prompts committed"))
        .collect();
    assert!(!mid.is_empty(), "no progress line inside the window:\n{e}");
    assert!(mid[0].starts_with("distill worker 0/1: 3/"), "{}", mid[0]);
    assert!(!mid[0].ends_with("ETA ?"), "{}", mid[0]);
}

/// A read-only command stopped by a signal ends at once with 128+N (the hub emulator serves
/// until stopped; audit and inspect have no safe points to wait for).
#[test]
fn a_read_only_command_ends_at_once_on_sigterm() {
    let fx = fixtures();
    let mut c = bin()
        .args(["hub-emulator", "--root"])
        .arg(fx.join("hub"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Serving: the endpoint line is out (the first stdout line).
    let mut stdout = c.stdout.take().unwrap();
    let mut first = [0u8; 1];
    use std::io::Read;
    stdout.read_exact(&mut first).unwrap();
    let t0 = Instant::now();
    signal(&c, libc::SIGTERM);
    let st = c.wait().unwrap();
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st}");
}

// ------------------------------------------------------------------------- card

/// Issue 41 item 9: a pack output carries README.md whose YAML front matter names the
/// parquet files for the Hub (`configs` → `data_files` → `data/*.parquet`, matching every
/// shard index.json lists), the sources at their commits and the tokenizer digest; the
/// audit passes with it and fails when it no longer matches index.json.
#[test]
fn the_shard_directory_carries_a_hub_card_the_audit_checks() {
    let w = work();
    for c in &readme_commands()[..3] {
        let o = w.cmd().args(c).output().unwrap();
        assert_eq!(code(&o), 0, "`dlm-data {}`:\n{}", c.join(" "), err(&o));
    }
    let dir = w.root().join("shards/stage1");
    let card = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("index.json")).unwrap()).unwrap();
    let front = card
        .strip_prefix("---\n")
        .and_then(|r| r.split_once("\n---\n"))
        .expect("YAML front matter")
        .0;
    let y: serde_yaml::Value = serde_yaml::from_str(front).unwrap();
    let cfg = &y["configs"][0];
    assert_eq!(cfg["config_name"], "default", "{front}");
    let pattern = cfg["data_files"][0]["path"].as_str().unwrap();
    assert_eq!(cfg["data_files"][0]["split"], "train");
    let glob = pattern.strip_suffix("*.parquet").unwrap();
    for s in idx["shards"].as_array().unwrap() {
        let f = s["file"].as_str().unwrap();
        assert!(f.starts_with(glob) && f.ends_with(".parquet") && !f[glob.len()..].contains('/'));
    }
    assert!(card.contains(idx["tokenizer"]["sha256"].as_str().unwrap()));
    for p in idx["provenance"].as_array().unwrap() {
        assert!(card.contains(p["commit"].as_str().unwrap()), "{card}");
    }
    assert!(card.contains("dlm-data audit --shards ."), "{card}");

    let audit = |w: &Work| {
        w.cmd()
            .args([
                "audit",
                "--json",
                "--manifest",
                "manifests/stage1.toml",
                "--shards",
            ])
            .arg(&dir)
            .output()
            .unwrap()
    };
    let o = audit(&w);
    assert_eq!(code(&o), 0, "{}", err(&o));
    std::fs::write(
        dir.join("README.md"),
        card.replace("tokenized", "hand-edited"),
    )
    .unwrap();
    let o = audit(&w);
    assert_eq!(code(&o), 1, "an edited card passed the audit");
    assert!(String::from_utf8_lossy(&o.stdout).contains("README.md"));
}
