//! Cron-grade safety (issue 27), end to end on the binary: one writer per output (a second
//! run exits 75 naming the holder, `--force` included), an input is never the output,
//! SIGTERM/SIGINT stop at a safe point (exit 128+N, no temp file, the journal consistent, the
//! rerun byte-identical to an uninterrupted run), a run that committed nothing leaves
//! nothing, dead runs' temp files are swept, and long legal names work.
//!
//! Deterministic: runs pause at a named point (`DLM_TEST_PAUSE`, see `dlm_data::signals`)
//! and the test waits for the pause file, never for a time.

mod mcq_support;
mod pack_common;
mod pause_support;
mod teacher_support;

use pause_support::{signal, spawn_paused};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dlm_data::distill::output::{parts_dir, read_part};

const BUSY: i32 = 75;

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) {
    assert_eq!(code(o), 0, "{}", err(o));
}

/// Every file name under `dir` (recursively), for "nothing left behind" checks.
fn all_names(dir: &Path) -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            let p = e.path();
            v.push(p.display().to_string());
            if p.is_dir() {
                v.extend(all_names(&p));
            }
        }
    }
    v.sort();
    v
}

fn temps(dir: &Path) -> Vec<String> {
    all_names(dir)
        .into_iter()
        .filter(|n| {
            let name = Path::new(n).file_name().unwrap().to_string_lossy();
            name.contains(".tmp") || name.ends_with(".lock")
        })
        .collect()
}

// ---------------------------------------------------------------- distill

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

fn distill_cmd(prompts: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(teacher_support::bin());
    c.args(["distill", "--teacher"])
        .arg(teacher_support::teacher_dir())
        .arg("--prompts")
        .arg(prompts)
        .arg("--out")
        .arg(out)
        .args(teacher_support::small_sampler_args(extra, "3"))
        // Several units (windows of 3 prompts), so a run can stop between them.
        .args(["--window-prompts", "3"])
        .env("RUST_LOG", "warn");
    c
}

fn distill(prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    distill_cmd(prompts, out, extra).output().unwrap()
}

/// The reported data loss: the same distill started twice. Now the second exits 75 at once
/// naming the first; SIGTERM stops the first after a committed batch (exit 143, nothing
/// torn, no temp file), and the rerun ends byte-identical to an uninterrupted run.
#[test]
fn distill_one_writer_and_sigterm_resumes_byte_identical() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 10);
    let reference = d.path().join("reference.json");
    ok(&distill(&prompts, &reference, &[]));

    let out = d.path().join("distilled.json");
    // Paused before batch 1: batch 0 is committed.
    let (a, pause) = spawn_paused(
        distill_cmd(&prompts, &out, &[]),
        "distill-batch:2",
        d.path(),
    );
    for extra in [&[][..], &["--seed", "7"][..]] {
        let b = distill(&prompts, &out, extra);
        assert_eq!(code(&b), BUSY, "{}", err(&b));
        let e = err(&b);
        assert!(e.contains(&format!("pid {}", a.id())), "{e}");
        assert!(e.contains("distill") && e.contains("started 20"), "{e}");
    }
    signal(&a, libc::SIGTERM);
    let a = a.wait_with_output().unwrap();
    assert_eq!(code(&a), 128 + libc::SIGTERM, "{}", err(&a));
    assert!(err(&a).contains("SIGTERM"), "{}", err(&a));
    let _ = std::fs::remove_file(&pause);
    assert!(!out.exists(), "no output before the last batch");
    let part = read_part(&parts_dir(&out).join("00000-of-00001.jsonl")).unwrap();
    assert_eq!(part.batches.keys().copied().collect::<Vec<_>>(), vec![0]);
    assert_eq!(
        std::fs::metadata(parts_dir(&out).join("00000-of-00001.jsonl"))
            .unwrap()
            .len(),
        part.valid_len,
        "nothing after the last commit line"
    );
    assert!(temps(d.path()).is_empty(), "{:?}", temps(d.path()));

    ok(&distill(&prompts, &out, &[]));
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&reference).unwrap()
    );
    assert!(temps(d.path()).is_empty(), "{:?}", temps(d.path()));
}

/// Ctrl-C before the first batch leaves no part (and no OUT.parts): the corrected rerun is
/// not refused as "different arguments".
#[test]
fn distill_sigint_before_the_first_batch_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 4);
    let out = d.path().join("distilled.json");
    for sig in [libc::SIGINT, libc::SIGHUP] {
        let (a, _pause) = spawn_paused(
            distill_cmd(&prompts, &out, &[]),
            "distill-batch:1",
            d.path(),
        );
        signal(&a, sig);
        let a = a.wait_with_output().unwrap();
        assert_eq!(code(&a), 128 + sig, "{}", err(&a));
        assert!(!parts_dir(&out).exists(), "{:?}", all_names(d.path()));
        assert!(!out.exists());
    }
    ok(&distill(&prompts, &out, &["--seed", "3"]));
}

/// `--out` equal to (or a link to) an input is refused before any work; the input is intact.
#[test]
fn distill_never_overwrites_an_input() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 3);
    let before = std::fs::read(&prompts).unwrap();
    let teacher = teacher_support::copy_teacher(&d.path().join("teacher"));
    let config = teacher.join("config.json");
    let config_before = std::fs::read(&config).unwrap();
    let link = d.path().join("link.json");
    std::os::unix::fs::symlink(&prompts, &link).unwrap();
    for out in [prompts.clone(), link.clone(), config.clone()] {
        let o = Command::new(teacher_support::bin())
            .args(["distill", "--teacher"])
            .arg(&teacher)
            .arg("--prompts")
            .arg(&prompts)
            .arg("--out")
            .arg(&out)
            .args(teacher_support::small_sampler_args(&[], "3"))
            .output()
            .unwrap();
        assert_eq!(code(&o), 2, "{}: {}", out.display(), err(&o));
        assert!(err(&o).contains("is an input"), "{}", err(&o));
        assert_eq!(std::fs::read(&prompts).unwrap(), before);
        assert_eq!(std::fs::read(&config).unwrap(), config_before);
        assert!(!parts_dir(&out).exists());
    }
}

/// A dead run's temp files beside --out and in OUT.parts are removed by the next run; a legal
/// 249-byte --out name works (its temp name stays within NAME_MAX).
#[test]
fn distill_sweeps_dead_temps_and_takes_long_names() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 3);
    let out = d.path().join(format!("{}.json", "x".repeat(244)));
    assert_eq!(out.file_name().unwrap().len(), 249);
    let dead_beside = dlm_data::util::temp_prefix(&out);
    let mut dead_beside = dead_beside.into_string().unwrap();
    dead_beside.push_str("999999999");
    std::fs::write(d.path().join(&dead_beside), b"torn").unwrap();
    std::fs::create_dir_all(parts_dir(&out)).unwrap();
    let dead_part = parts_dir(&out).join(".00000-of-00001.jsonl.tmp-999999998");
    std::fs::write(&dead_part, b"torn").unwrap();
    let keep = d.path().join(".notes.txt.tmp-999999999");
    std::fs::write(&keep, b"not ours").unwrap();
    ok(&distill(&prompts, &out, &[]));
    assert!(out.is_file());
    assert!(!d.path().join(&dead_beside).exists());
    assert!(!dead_part.exists());
    assert!(keep.exists(), "only our own temp names are swept");
    // 250 bytes: OUT.parts would pass NAME_MAX: refused up front, naming the limit.
    let long = d.path().join(format!("{}.json", "y".repeat(245)));
    let o = distill(&prompts, &long, &[]);
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(err(&o).contains("too long"), "{}", err(&o));
}

// ---------------------------------------------------------------- pack

fn pack_setup(d: &Path) -> (PathBuf, PathBuf) {
    let tok = pack_common::tokenizer(d);
    let input = d.join("in.parquet");
    let texts: Vec<Option<String>> = pack_common::docs(5, 120).into_iter().map(Some).collect();
    pack_common::write_parquet(&input, &texts, 30);
    (tok, input)
}

const PACK_FLAGS: [&str; 4] = ["--seq-len", "16", "--shard-bytes", "1K"];

/// Two packs on one --out: the second (and a `--force` one with other flags) exits 75 and
/// touches nothing; SIGTERM stops the first after a journaled shard (exit 143, no temp file,
/// index incomplete); the rerun ends byte-identical to an uninterrupted run.
#[test]
fn pack_one_writer_force_never_takes_a_live_dir_and_sigterm_resumes() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = pack_setup(d.path());
    let reference = d.path().join("reference");
    pack_common::ok(&pack_common::run_pack(
        &input,
        &tok,
        &reference,
        &PACK_FLAGS,
        &[],
    ));
    let out = d.path().join("out");
    let (a, pause) = spawn_paused(
        pack_common::pack_cmd(&input, &tok, &out, &PACK_FLAGS),
        "pack-shard:2",
        d.path(),
    );
    let held = pack_common::tree(&out);
    for extra in [
        &PACK_FLAGS[..],
        &["--seq-len", "8", "--shard-bytes", "1K", "--force"][..],
        &["--seq-len", "16", "--format", "megatron", "--force"][..],
    ] {
        let b = pack_common::run_pack(&input, &tok, &out, extra, &[]);
        assert_eq!(code(&b), BUSY, "{extra:?}: {}", err(&b));
        assert!(err(&b).contains(&format!("pid {}", a.id())), "{}", err(&b));
        assert_eq!(
            pack_common::tree(&out),
            held,
            "{extra:?} touched the live output"
        );
    }
    signal(&a, libc::SIGTERM);
    let a = a.wait_with_output().unwrap();
    let _ = std::fs::remove_file(&pause);
    assert_eq!(code(&a), 128 + libc::SIGTERM, "{}", err(&a));
    let idx = dlm_data::shards::index::load(&out).unwrap();
    assert!(!idx.complete);
    assert!(idx.shards.len() >= 2, "{} shards", idx.shards.len());
    // The inputs' sha256 are hashed while the run starts and journaled with its first shard:
    // the resume below compares them.
    let inputs = idx.args.as_ref().and_then(|a| a.inputs.clone()).unwrap();
    assert_eq!(inputs.len(), 1);
    assert_eq!(
        inputs[0].sha256,
        dlm_data::util::sha256_file(&input).unwrap()
    );
    // The journaled shards wait in the staging dot-directory until the index commits.
    for s in &idx.shards {
        assert_eq!(
            std::fs::metadata(out.join(".incomplete").join(&s.file))
                .unwrap()
                .len(),
            s.bytes,
            "{}",
            s.file
        );
    }
    assert!(temps(&out).is_empty(), "{:?}", temps(&out));
    pack_common::ok(&pack_common::run_pack(&input, &tok, &out, &PACK_FLAGS, &[]));
    let (mut got, mut want) = (pack_common::tree(&out), pack_common::tree(&reference));
    // index.json records --out's own path; everything else is byte-identical.
    got.remove("index.json");
    want.remove("index.json");
    assert_eq!(got, want);
    assert!(dlm_data::shards::index::load(&out).unwrap().complete);
}

/// `--out` naming the input's own directory or the tokenizer is refused before any work.
#[test]
fn pack_never_writes_over_an_input() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = pack_setup(d.path());
    let link = d.path().join("link-to-tok");
    std::os::unix::fs::symlink(&tok, &link).unwrap();
    let tok_before = pack_common::tree(&tok);
    for out in [tok.clone(), link.clone(), input.clone()] {
        let o = pack_common::run_pack(&input, &tok, &out, &["--force"], &[]);
        assert_eq!(code(&o), 2, "{}: {}", out.display(), err(&o));
        assert!(err(&o).contains("is an input"), "{}", err(&o));
    }
    assert_eq!(pack_common::tree(&tok), tok_before);
}

// ---------------------------------------------------------------- mcq

/// `mcq` over the world into `out` with the SFT set in 5-row shards, plus `extra`.
fn mcq_args(w: &mcq_support::World, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = [
        "mcq",
        "--manifest",
        mcq_support::p(&w.manifest),
        "--cache",
        mcq_support::p(&w.cache),
        "--out",
        mcq_support::p(out),
        "--tokenizer",
        mcq_support::p(&w.tokenizer),
        "--rows-per-shard",
        "5",
    ]
    .map(String::from)
    .to_vec();
    a.extend(extra.iter().map(|x| x.to_string()));
    a
}

/// kill -9 exactly between an SFT shard's rename and its journal line: the same mcq runs
/// again (the FAQ's promise) and ends identical to an uninterrupted run; a second mcq on a
/// live --out (another seed) exits 75.
#[test]
fn mcq_rerun_after_a_kill_in_the_journal_window_and_one_writer() {
    let w = mcq_support::world();
    let reference = w.root().join("reference");
    let flags = |out: &Path| mcq_args(&w, out, &[]);
    let (c, _, e) = mcq_support::run(
        &flags(&reference)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(c, 0, "{e}");
    let out = w.root().join("out");
    let mut cmd = mcq_support::bin();
    cmd.args(flags(&out));
    let (a, _pause) = spawn_paused(cmd, "mcq-shard:2", w.root());
    let mut second = flags(&out);
    second.extend(["--seed".to_string(), "9".to_string()]);
    let (c, _, e) = mcq_support::run(&second.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(c, BUSY, "{e}");
    signal(&a, libc::SIGKILL);
    let _ = a.wait_with_output().unwrap();
    assert!(out.join("sft").join("data/part-00001.parquet").exists());
    let (c, _, e) = mcq_support::run(&flags(&out).iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(c, 0, "{e}");
    let (mut got, mut want) = (
        pack_common::tree(&out.join("sft")),
        pack_common::tree(&reference.join("sft")),
    );
    got.remove("index.json");
    want.remove("index.json");
    assert_eq!(got, want);
    assert_eq!(
        std::fs::read(out.join("prompts.jsonl")).unwrap(),
        std::fs::read(reference.join("prompts.jsonl")).unwrap()
    );
    assert!(temps(&out).is_empty(), "{:?}", temps(&out));
}

// ---------------------------------------------------------------- merge

/// merge while a pack worker still writes its part: exit 75 naming the worker; nothing merged.
#[test]
fn merge_waits_for_no_live_worker() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = pack_setup(d.path());
    let out = d.path().join("out");
    let mut other = PACK_FLAGS.to_vec();
    other.extend(["--shard", "1/2"]);
    pack_common::ok(&pack_common::run_pack(&input, &tok, &out, &other, &[]));
    let mut flags = PACK_FLAGS.to_vec();
    flags.extend(["--shard", "0/2"]);
    let (a, pause) = spawn_paused(
        pack_common::pack_cmd(&input, &tok, &out, &flags),
        "pack-shard:1",
        d.path(),
    );
    let m = pack_common::run(&["merge", out.to_str().unwrap()], &[]);
    assert_eq!(code(&m), BUSY, "{}", err(&m));
    assert!(err(&m).contains(&format!("pid {}", a.id())), "{}", err(&m));
    assert!(!out.join("index.json").exists());
    std::fs::remove_file(&pause).unwrap();
    let a = a.wait_with_output().unwrap();
    ok(&a);
    let m = pack_common::run(&["merge", out.to_str().unwrap()], &[]);
    ok(&m);
    assert!(dlm_data::shards::index::load(&out).unwrap().complete);
}

/// SIGTERM during mcq (paused after its 2nd SFT shard): exit 143, the journal lists what is
/// on disk, no temp file; the same mcq then ends identical to an uninterrupted run.
#[test]
fn mcq_sigterm_stops_at_a_shard_and_reruns() {
    let w = mcq_support::world();
    let args = |out: &Path| mcq_args(&w, out, &["--format", "megatron"]);
    let run = |a: Vec<String>| mcq_support::run(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let reference = w.root().join("reference");
    let (c, _, e) = run(args(&reference));
    assert_eq!(c, 0, "{e}");
    let out = w.root().join("out");
    let mut cmd = mcq_support::bin();
    cmd.args(args(&out));
    let (a, _pause) = spawn_paused(cmd, "mcq-shard:2", w.root());
    signal(&a, libc::SIGTERM);
    let a = a.wait_with_output().unwrap();
    assert_eq!(code(&a), 128 + libc::SIGTERM, "{}", err(&a));
    let idx = dlm_data::shards::index::load(&out.join("sft")).unwrap();
    assert!(!idx.complete);
    assert_eq!(idx.shards.len(), 2);
    assert!(temps(&out).is_empty(), "{:?}", temps(&out));
    let (c, _, e) = run(args(&out));
    assert_eq!(c, 0, "{e}");
    let (mut got, mut want) = (
        pack_common::tree(&out.join("sft")),
        pack_common::tree(&reference.join("sft")),
    );
    got.remove("index.json");
    want.remove("index.json");
    assert_eq!(got, want);
}

/// `decontam --drop` holds its output too: a second one on the same --drop exits 75.
#[test]
fn decontam_drop_is_one_writer() {
    let w = mcq_support::world();
    let out = w.root().join("out");
    let (c, _, e) = mcq_support::run_mcq(&w, &out, &[]);
    assert_eq!(c, 0, "{e}");
    let prompts = out.join("prompts.jsonl");
    let clean = w.root().join("clean.jsonl");
    let args = [
        "decontam",
        "--against",
        mcq_support::p(&w.eval_manifest),
        "--cache",
        mcq_support::p(&w.cache),
        "--prompts",
        mcq_support::p(&prompts),
        "--drop",
        mcq_support::p(&clean),
    ];
    let mut cmd = mcq_support::bin();
    cmd.args(args);
    let (a, pause) = spawn_paused(cmd, "lock-held", w.root());
    let (c, _, e) = mcq_support::run(&args);
    assert_eq!(c, BUSY, "{e}");
    assert!(e.contains(&format!("pid {}", a.id())), "{e}");
    std::fs::remove_file(&pause).unwrap();
    ok(&a.wait_with_output().unwrap());
    assert!(clean.is_file());
    // --drop naming the scanned file itself: exit 2, the input intact.
    let before = std::fs::read(&prompts).unwrap();
    let mut same = args;
    same[8] = mcq_support::p(&prompts);
    let (c, _, e) = mcq_support::run(&same);
    assert_eq!(c, 2, "{e}");
    assert_eq!(std::fs::read(&prompts).unwrap(), before);
    // A legal 249-byte --drop whose report name (`<stem>.decontam.json`) would pass NAME_MAX:
    // refused before the scan, naming the report.
    let long = w.root().join(format!("{}.jsonl", "z".repeat(243)));
    let mut long_args = args;
    long_args[8] = mcq_support::p(&long);
    let (c, _, e) = mcq_support::run(&long_args);
    assert_eq!(c, 2, "{e}");
    assert!(e.contains("decontam.json") && e.contains("255"), "{e}");
    assert!(!long.exists());
}

/// A path that is not UTF-8 is refused up front, naming it (index.json could not record it).
#[test]
fn non_utf8_paths_are_refused_naming_them() {
    use std::os::unix::ffi::OsStrExt;
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = pack_setup(d.path());
    let odd = d.path().join(std::ffi::OsStr::from_bytes(b"tok-\xff\xfe"));
    std::fs::rename(&tok, &odd).unwrap();
    let out = d.path().join("out");
    let o = Command::new(pack_common::bin())
        .args(["pack", "--input"])
        .arg(&input)
        .arg("--tokenizer")
        .arg(&odd)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(code(&o), 2, "{}", err(&o));
    assert!(
        err(&o).contains("not valid UTF-8") && err(&o).contains("tok-"),
        "{}",
        err(&o)
    );
    assert!(!out.exists());
}

/// A distill resumed from another directory with the teacher spelled absolutely records one
/// `teacher.path` (resolved), and the output equals an uninterrupted run.
#[test]
fn distill_resumed_elsewhere_records_one_teacher_path() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 8);
    let teacher = teacher_support::copy_teacher(&d.path().join("t"));
    let run_in = |cwd: &Path, teacher_arg: &Path, out: &Path| {
        let mut c = Command::new(teacher_support::bin());
        c.current_dir(cwd)
            .args(["distill", "--teacher"])
            .arg(teacher_arg)
            .arg("--prompts")
            .arg(&prompts)
            .arg("--out")
            .arg(out)
            .args(teacher_support::small_sampler_args(&[], "3"))
            .args(["--window-prompts", "3"])
            .env("RUST_LOG", "warn");
        c
    };
    let reference = d.path().join("reference.json");
    ok(&run_in(d.path(), Path::new("t"), &reference)
        .output()
        .unwrap());
    let out = d.path().join("distilled.json");
    let (a, _pause) = spawn_paused(
        run_in(d.path(), Path::new("t"), &out),
        "distill-batch:2",
        d.path(),
    );
    signal(&a, libc::SIGTERM);
    assert_eq!(code(&a.wait_with_output().unwrap()), 128 + libc::SIGTERM);
    let elsewhere = d.path().join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    ok(&run_in(&elsewhere, &teacher, &out).output().unwrap());
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let paths: std::collections::BTreeSet<String> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["teacher"]["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(paths.len(), 1, "{paths:?}");
    assert_eq!(
        std::fs::read(&out).unwrap(),
        std::fs::read(&reference).unwrap()
    );
}
