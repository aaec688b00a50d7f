//! The nightly job with no human (issue 41): `dlm-data run` over the README pipeline (manifests
//! served by the hub emulator) and over a pipeline of the user's own files, night after night
//! from two working directories — unchanged, an input edited, a setting edited, a planted
//! collision, SIGTERM at each moment a step can be stopped — and the preflight, exit codes and
//! audit of own files each on its own.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use dlm_data::hub::emulator::{Emulator, Options};

mod fixture_dirs;
mod pause_support;
use fixture_dirs::{
    changed as diff, copy_dir, copy_manifests, expect, files_under, fixtures, hub_cmd,
    readme_pipeline, sha_and_mtime, statuses,
};
use pause_support::{signal, spawn_paused_within};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_dlm-data"))
}

/// A working directory: manifests/ (copies of the shipped ones), tok/ (a copy of the fixture
/// tokenizer, so a planted collision can never reach the shared fixtures), hf_mcq/ (the
/// teacher), corpus/docs.jsonl (own data), an emulator serving the fixture hub, and `link`, a
/// symlink to the directory from a second place (the "other working directory").
struct Work {
    dir: tempfile::TempDir,
    other: tempfile::TempDir,
    emu: Emulator,
}

fn corpus_line(i: usize) -> String {
    format!(
        "{{\"text\":\"Document {i}: the river carried {} stones past the mill, and the miller counted them twice.\"}}\n",
        i * 7 % 113
    )
}

fn work() -> Work {
    let fx = fixtures();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_manifests(root);
    copy_dir(&fx.join("tokenizer"), &root.join("tok"));
    copy_dir(&fx.join("teacher"), &root.join("hf_mcq"));
    std::fs::create_dir_all(root.join("corpus")).unwrap();
    let docs: String = (0..400).map(corpus_line).collect();
    std::fs::write(root.join("corpus/docs.jsonl"), docs).unwrap();
    let other = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root, other.path().join("link")).unwrap();
    let emu = Emulator::start(&fx.join("hub"), Options::default()).unwrap();
    Work { dir, other, emu }
}

/// Where a night starts: the pipeline's own directory, or elsewhere through a symlink.
#[derive(Clone, Copy, Debug)]
enum From {
    Here,
    Elsewhere,
}

impl Work {
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn cmd(&self, from: From) -> Command {
        let dir = match from {
            From::Here => self.root(),
            From::Elsewhere => self.other.path(),
        };
        let mut c = hub_cmd(dir, &self.emu, self.root());
        c.env_remove("DLM_TEST_PAUSE");
        c
    }
    fn pipeline_arg(from: From) -> &'static str {
        match from {
            From::Here => "pipeline.toml",
            From::Elsewhere => "link/pipeline.toml",
        }
    }
    /// `run PIPELINE --json EXTRA…`: exit code, the JSON line (Null if not exactly one), stderr.
    fn night(&self, from: From, extra: &[&str]) -> (i32, serde_json::Value, String) {
        let o = self
            .cmd(from)
            .args(["run", Self::pipeline_arg(from), "--json"])
            .args(extra)
            .output()
            .unwrap();
        parse(&o)
    }
    fn write(&self, pipeline: &str) {
        std::fs::write(self.root().join("pipeline.toml"), pipeline).unwrap();
    }
    fn edit(&self, from: &str, to: &str) {
        let p = self.root().join("pipeline.toml");
        let t = std::fs::read_to_string(&p).unwrap();
        assert!(t.contains(from), "pipeline has no {from:?}");
        std::fs::write(&p, t.replacen(from, to, 1)).unwrap();
    }
}

fn parse(o: &Output) -> (i32, serde_json::Value, String) {
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let lines: Vec<&str> = out.lines().collect();
    let v = match lines.as_slice() {
        [one] => serde_json::from_str(one).unwrap_or(serde_json::Value::Null),
        _ => serde_json::Value::Null,
    };
    (
        o.status.code().unwrap_or(-1),
        v,
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Every file under `dir` → sha256 and, with `times`, its modification time. The journal and
/// live-run lock files are left out where named.
fn snapshot(dir: &Path, times: bool) -> BTreeMap<String, String> {
    files_under(dir)
        .into_iter()
        .map(|(rel, p)| {
            let (mut v, m) = sha_and_mtime(&p);
            if times {
                v.push_str(&format!(" {m:?}"));
            }
            (rel, v)
        })
        .collect()
}

/// What an unchanged night may touch: nothing. Files the step-by-step commands rewrite today
/// (locks, architecture.json, distilled.json, download.log: issue 41 item 8, the `nightly`
/// helper's) are not rewritten by `run` at all on such a night, because no step runs; if this
/// ever fails on one of those, item 8 regressed inside a step `run` decided to re-run.
fn assert_unchanged_night_touches_nothing(
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) {
    let changed = diff(before, after);
    assert!(changed.is_empty(), "an unchanged night changed {changed:?}");
}

#[test]
fn the_readme_pipeline_through_five_nights_from_two_directories() {
    let w = work();
    w.write(&readme_pipeline("tok"));
    // Night 1: everything runs.
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[
            ("fetch", "ran"),
            ("pack", "ran"),
            ("mcq", "ran"),
            ("decontam", "ran"),
            ("distill", "ran"),
            ("audit", "ran"),
        ],
    );
    assert_eq!(v["verdict"], "pass", "{v}");
    let all_skipped = [
        ("fetch", "skipped"),
        ("pack", "skipped"),
        ("mcq", "skipped"),
        ("decontam", "skipped"),
        ("distill", "skipped"),
        ("audit", "ran"),
    ];

    // Night 2, unchanged, started elsewhere through a symlink: every step skipped, no byte or
    // time changed anywhere.
    let before = snapshot(w.root(), true);
    let (code, v, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &all_skipped);
    assert_unchanged_night_touches_nothing(&before, &snapshot(w.root(), true));

    // Night 3, an input edited (a file added to the teacher directory): exactly distill is
    // rebuilt (beside the old output, then swapped); the audit holds.
    std::fs::write(w.root().join("hf_mcq/NOTES.md"), "evaluated 2026-12-05\n").unwrap();
    let before = snapshot(w.root(), true);
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    let mut want = all_skipped;
    want[4] = ("distill", "rebuilt");
    expect(&v, &want);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert!(e.contains("hf_mcq/NOTES.md"), "the change is named: {e}");
    let after = snapshot(w.root(), true);
    for k in diff(&before, &after) {
        assert!(
            k.starts_with("distilled.json") || k == "pipeline.run.json",
            "night 3 touched {k}, which does not depend on the teacher"
        );
    }
    assert!(!w.root().join(".distilled.json.run-next").exists());

    // Night 4, a setting edited (seq_len), from elsewhere: pack is rebuilt, decontam (which
    // reads its index) runs again; fetch, mcq and distill are untouched.
    w.edit("seq_len = 256", "seq_len = 128");
    let before = snapshot(w.root(), true);
    let (code, v, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 0, "{e}");
    let mut want = all_skipped;
    want[1] = ("pack", "rebuilt");
    want[3] = ("decontam", "ran");
    expect(&v, &want);
    assert_eq!(v["verdict"], "pass", "{v}");
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.root().join("shards/stage1/index.json")).unwrap())
            .unwrap();
    assert_eq!(idx["seq_len"], 128);
    let after = snapshot(w.root(), true);
    for k in diff(&before, &after) {
        assert!(
            k.starts_with("shards/stage1/") || k == "pipeline.run.json" || k == "pipeline.toml",
            "night 4 touched {k}"
        );
    }
    // The night after: complete again.
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &all_skipped);

    // Night 5, a planted collision: the base's local copy pointed at the tokenizer. Preflight
    // refuses (exit 2) naming both; nothing is touched.
    w.edit("local_dir = \"models/base\"", "local_dir = \"tok\"");
    let before = snapshot(w.root(), true);
    let (code, _, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 2, "{e}");
    assert!(e.contains("local_dir") && e.contains("tokenizer"), "{e}");
    let after = snapshot(w.root(), true);
    assert_eq!(
        diff(&before, &after),
        Vec::<String>::new(),
        "a refused night wrote"
    );
}

fn own_pipeline(base: bool) -> String {
    let base = if base {
        "[base]\nmanifest = \"manifests/base.toml\"\n"
    } else {
        ""
    };
    format!(
        r#"
version = 1
tokenizer = "tok"
{base}
[pack]
inputs = ["corpus/docs.jsonl"]
text_column = "text"
out = "shards/own"
seq_len = 64
args = ["--shard-bytes", "4KiB"]

[audit]
args = ["--hash"]
"#
    )
}

#[test]
fn an_inputs_pipeline_through_five_nights_from_two_directories() {
    let w = work();
    w.write(&own_pipeline(true));
    let (code, v, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("fetch", "ran"), ("pack", "ran"), ("audit", "ran")]);
    assert_eq!(v["verdict"], "pass", "{v}");
    let skipped = [("fetch", "skipped"), ("pack", "skipped"), ("audit", "ran")];

    // Unchanged, from the other directory.
    let before = snapshot(w.root(), true);
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &skipped);
    assert_eq!(v["verdict"], "pass", "{v}");
    assert_unchanged_night_touches_nothing(&before, &snapshot(w.root(), true));

    // A file touched with the same bytes is unchanged.
    let docs = w.root().join("corpus/docs.jsonl");
    let t = std::time::SystemTime::now() + Duration::from_secs(3);
    std::fs::File::options()
        .write(true)
        .open(&docs)
        .unwrap()
        .set_modified(t)
        .unwrap();
    let (code, v, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &skipped);

    // The input gains a line: pack is rebuilt (no --force, no refusal), the audit re-hashes
    // the new bytes and holds.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&docs)
        .unwrap();
    std::io::Write::write_all(&mut f, corpus_line(400).as_bytes()).unwrap();
    drop(f);
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[("fetch", "skipped"), ("pack", "rebuilt"), ("audit", "ran")],
    );
    assert_eq!(v["verdict"], "pass", "{v}");
    let idx: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.root().join("shards/own/index.json")).unwrap())
            .unwrap();
    assert_eq!(
        idx["args"]["inputs"][0]["sha256"],
        dlm_data::util::sha256_file(&docs).unwrap()
    );
    assert_eq!(idx["totals"]["documents"], 401);

    // A setting edited.
    w.edit("seq_len = 64", "seq_len = 32");
    let (code, v, e) = w.night(From::Elsewhere, &[]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[("fetch", "skipped"), ("pack", "rebuilt"), ("audit", "ran")],
    );
    assert_eq!(v["verdict"], "pass", "{v}");

    // A planted collision: the output inside the input's directory (`pack --input corpus
    // --out corpus/packed`) — refused before the first night could write it.
    w.edit("inputs = [\"corpus/docs.jsonl\"]", "inputs = [\"corpus\"]");
    w.edit("out = \"shards/own\"", "out = \"corpus/packed\"");
    let before = snapshot(w.root(), true);
    let (code, _, e) = w.night(From::Here, &[]);
    assert_eq!(code, 2, "{e}");
    assert!(
        e.contains("corpus/packed") && e.contains("[pack] inputs"),
        "{e}"
    );
    assert_eq!(
        diff(&before, &snapshot(w.root(), true)),
        Vec::<String>::new()
    );
}

/// Own files audit cleanly with no [base] and no manifest at all (the audit is built without
/// --manifest); a local input changed behind pack's back is a broken link naming it.
#[test]
fn an_inputs_pipeline_without_base_audits_clean_and_names_a_changed_input() {
    let w = work();
    w.write(&own_pipeline(false));
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "ran"), ("audit", "ran")]);
    assert_eq!(v["verdict"], "pass", "{v}");
    // Same size, other bytes: only a re-hash (--hash, set in [audit] args) sees it.
    let docs = w.root().join("corpus/docs.jsonl");
    let mut b = std::fs::read(&docs).unwrap();
    b[20] = if b[20] == b'x' { b'y' } else { b'x' };
    std::fs::write(&docs, &b).unwrap();
    let o = w
        .cmd(From::Here)
        .args(["audit", "--shards", "shards/own", "--hash"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("docs.jsonl") && out.contains("sha256"),
        "{out}"
    );
    let o = w
        .cmd(From::Here)
        .args(["audit", "--shards", "shards/own"])
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    // The next night sees the change and rebuilds: the audit holds again.
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
}

/// Copy `root`'s contents aside / back (same paths, so recorded absolute paths still hold).
fn save(root: &Path, to: &Path) {
    copy_dir(root, to);
}

fn restore(root: &Path, from: &Path) {
    for e in std::fs::read_dir(root).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            std::fs::remove_dir_all(&p).unwrap();
        } else {
            std::fs::remove_file(&p).unwrap();
        }
    }
    copy_dir(from, root);
}

/// SIGTERM at each moment a night can be stopped (taking the run's lock, the staging lock, after
/// each shard of the rebuild, between the complete staged output and its swap) and at one drawn
/// at random: exit 143 within 5 s, the old output intact, and the next night ends
/// byte-identical to a night that was never stopped. SIGKILL before the swap likewise.
#[test]
fn a_night_stopped_at_any_moment_resumes_to_the_uninterrupted_bytes() {
    let w = work();
    w.write(&own_pipeline(false));
    let (code, _, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    let bak = tempfile::tempdir().unwrap();
    save(w.root(), bak.path());
    let old_index = std::fs::read(w.root().join("shards/own/index.json")).unwrap();
    let settled = |w: &Work| {
        let mut s = snapshot(w.root(), false);
        s.remove("pipeline.run.json");
        s.retain(|k, _| !k.ends_with(".lock"));
        s
    };
    // The uninterrupted night: a setting changed, pack rebuilt.
    w.edit("seq_len = 64", "seq_len = 32");
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
    let want = settled(&w);
    // Pack pauses after each shard written mid-stream (with a resume cursor); the last one, the
    // tail, has none. Count the index's shards, not the files (index.json, sidecars) beside them.
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(w.root().join("shards/own/index.json")).unwrap())
            .unwrap();
    let shards = index["shards"].as_array().map_or(0, |a| a.len());
    assert!(shards > 3, "the rebuild writes several shards: {want:?}");

    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize;
    let random = format!("pack-shard:{}", 1 + seed % (shards - 2));
    eprintln!("random stop point: {random} (seed {seed})");
    let points = [
        ("lock-held:1", libc::SIGTERM),
        ("lock-held:2", libc::SIGTERM),
        ("pack-shard:1", libc::SIGTERM),
        ("pack-shard:2", libc::SIGTERM),
        (random.as_str(), libc::SIGTERM),
        ("run-swap", libc::SIGTERM),
        ("run-swap", libc::SIGKILL),
    ];
    for (point, sig) in points {
        restore(w.root(), bak.path());
        w.edit("seq_len = 64", "seq_len = 32");
        let mut cmd = w.cmd(From::Here);
        cmd.args(["run", "pipeline.toml", "--json"]);
        let (mut child, pause) =
            spawn_paused_within(cmd, point, w.root(), Duration::from_secs(120));
        // The old output is readable while the new one is being built.
        assert_eq!(
            std::fs::read(w.root().join("shards/own/index.json")).unwrap(),
            old_index,
            "{point}: the old output is not in place"
        );
        signal(&child, sig);
        let t1 = Instant::now();
        let status = child.wait().unwrap();
        let took = t1.elapsed();
        std::fs::remove_file(&pause).ok();
        if sig == libc::SIGTERM {
            assert_eq!(status.code(), Some(128 + sig), "{point}: {status:?}");
            assert!(
                took < Duration::from_secs(5),
                "{point}: took {took:?} to stop"
            );
        }
        let (code, v, e) = w.night(From::Here, &[]);
        assert_eq!(code, 0, "{point}: the next night failed: {e}");
        assert_eq!(v["verdict"], "pass", "{point}: {v}");
        assert_eq!(
            diff(&want, &settled(&w)),
            Vec::<String>::new(),
            "{point}: the resumed night differs from the uninterrupted one"
        );
        assert!(!w.root().join("shards/.own.run-next").exists(), "{point}");
    }
}

const GOOD_PREFLIGHT: &str = r#"
version = 1
tokenizer = "tok"

[base]
manifest = "manifests/base.toml"
local_dir = "models/base"

[pack]
manifest = "manifests/stage1.toml"
out = "shards/stage1"

[mcq]
manifest = "manifests/mcq.toml"
out = "shards/mcq"

[distill]
teacher = "hf_mcq"
out = "distilled.json"
"#;

/// Every problem at once, before any work: a flag a step does not have, a missing teacher, a
/// write onto a read (local_dir = the teacher), two writes in one place (distill's out inside
/// the shards), the journal pointed at a lock. Exit 2 for `--check` and for a night alike, and
/// not a byte written (not even the run's lock).
#[test]
fn preflight_reports_every_problem_before_any_work_and_writes_nothing() {
    let w = work();
    w.write(GOOD_PREFLIGHT);
    let (code, _, e) = w.night(From::Here, &["--check"]);
    assert_eq!(code, 0, "{e}");
    let bad = GOOD_PREFLIGHT
        .replace("local_dir = \"models/base\"", "local_dir = \"hf_mcq\"")
        .replace(
            "out = \"shards/mcq\"",
            "out = \"shards/mcq\"\nargs = [\"--no-such-flag\"]",
        )
        .replace("out = \"distilled.json\"", "out = \"shards/stage1/d.json\"")
        .replace(
            "version = 1",
            "version = 1\nstate = \"manifests/stage1.lock\"",
        );
    w.write(&bad);
    let before = snapshot(w.root(), true);
    for extra in [&["--check"][..], &[][..]] {
        let (code, _, e) = w.night(From::Elsewhere, extra);
        assert_eq!(code, 2, "{extra:?}: {e}");
        for want in [
            "step mcq",
            "--no-such-flag",
            "[base] local_dir",
            "[distill] teacher",
            "[distill] out",
            "[pack] out",
            "the run journal (state)",
            "stage1.lock",
        ] {
            assert!(e.contains(want), "{extra:?}: {want} not named:\n{e}");
        }
        assert_eq!(
            diff(&before, &snapshot(w.root(), true)),
            Vec::<String>::new()
        );
    }
    // A missing teacher is found first too (the shipped example's "../hf_mcq" case).
    std::fs::remove_dir_all(w.root().join("hf_mcq")).unwrap();
    w.write(GOOD_PREFLIGHT);
    let (code, _, e) = w.night(From::Here, &[]);
    assert_eq!(code, 2, "{e}");
    assert!(
        e.contains("[distill] teacher") && e.contains("hf_mcq"),
        "{e}"
    );
    assert!(!w.root().join("shards").exists() && !w.root().join("models").exists());
    // The state file written over an index.json: refused.
    copy_dir(&fixtures().join("teacher"), &w.root().join("hf_mcq"));
    w.write(&GOOD_PREFLIGHT.replace(
        "version = 1",
        "version = 1\nstate = \"shards/stage1/index.json\"",
    ));
    let (code, _, e) = w.night(From::Here, &["--check"]);
    assert_eq!(code, 2, "{e}");
    assert!(
        e.contains("the run journal (state)") && e.contains("[pack] out"),
        "{e}"
    );
}

/// The shipped example names a teacher and tokenizer that a fresh checkout does not have:
/// `--check` says so at once.
#[test]
fn the_shipped_example_is_checked_before_any_work() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests/pipeline.toml");
    let o = bin().args(["run", "--check"]).arg(&p).output().unwrap();
    let (code, _, e) = parse(&o);
    if Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hf_mcq")
        .exists()
    {
        return; // a checkout with the real teacher beside it
    }
    assert_eq!(code, 2, "{e}");
    assert!(e.contains("[distill] teacher"), "{e}");
}

/// Any bad pipeline file is exit 2, named: not UTF-8, missing, not TOML.
#[test]
fn a_bad_pipeline_file_of_any_kind_exits_2() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("p.toml");
    std::fs::write(&f, b"version = 1\ntokenizer = \"t\xff\"\n").unwrap();
    for (what, path) in [
        ("not UTF-8", f.clone()),
        ("missing", d.path().join("nope.toml")),
    ] {
        let o = bin().arg("run").arg(&path).output().unwrap();
        let (code, _, e) = parse(&o);
        assert_eq!(code, 2, "{what}: {e}");
        assert!(e.contains(&path.display().to_string()), "{what}: {e}");
    }
    let o = bin().arg("run").arg(&f).output().unwrap();
    assert!(parse(&o).2.contains("UTF-8"));
    std::fs::write(&f, "version = [").unwrap();
    let o = bin().arg("run").arg(&f).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(d.path().read_dir().unwrap().count() == 1, "nothing written");
}

/// Issue 41: SIGTERM during the README pipeline's distill step (in a forward pass, and after
/// a committed batch) exits 143 within 5 s and leaves the previous night's outputs intact;
/// the next night completes, byte-identical to a night that was never stopped.
#[test]
fn sigterm_during_the_readme_pipelines_distill_keeps_last_nights_outputs() {
    let w = work();
    w.write(&readme_pipeline("tok"));
    let (code, _, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    // The Hub cache aside (fetch's, untouched by these nights; save/restore copies its
    // symlinks as files).
    let settled = |w: &Work| {
        let mut s = snapshot(w.root(), false);
        s.remove("pipeline.run.json");
        s.retain(|k, _| !k.ends_with(".lock") && !k.starts_with("hf-home/"));
        s
    };
    let last_night = settled(&w);
    let bak = tempfile::tempdir().unwrap();
    save(w.root(), bak.path());
    // The uninterrupted night: the teacher directory changed, distill rebuilt.
    let notes = w.root().join("hf_mcq/NOTES.md");
    std::fs::write(&notes, "evaluated 2026-12-05\n").unwrap();
    let (code, v, e) = w.night(From::Here, &[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(statuses(&v)["distill"], "rebuilt", "{v}");
    let want = settled(&w);
    for point in ["distill-forward:1", "distill-batch:1"] {
        restore(w.root(), bak.path());
        std::fs::write(&notes, "evaluated 2026-12-05\n").unwrap();
        let mut cmd = w.cmd(From::Here);
        cmd.args(["run", "pipeline.toml", "--json"]);
        let (mut child, pause) =
            spawn_paused_within(cmd, point, w.root(), Duration::from_secs(300));
        signal(&child, libc::SIGTERM);
        let t1 = Instant::now();
        let status = child.wait().unwrap();
        let took = t1.elapsed();
        std::fs::remove_file(&pause).ok();
        assert_eq!(
            status.code(),
            Some(128 + libc::SIGTERM),
            "{point}: {status:?}"
        );
        assert!(
            took < Duration::from_secs(5),
            "{point}: took {took:?} to stop"
        );
        // Last night's outputs intact: every file the previous night left, byte for byte (the
        // staging of the new distilled.json aside).
        let now = settled(&w);
        for (k, v) in &last_night {
            assert_eq!(now.get(k), Some(v), "{point}: {k} changed or is gone");
        }
        let (code, v, e) = w.night(From::Here, &[]);
        assert_eq!(code, 0, "{point}: the next night failed: {e}");
        assert_eq!(v["verdict"], "pass", "{point}: {v}");
        assert_eq!(
            diff(&want, &settled(&w)),
            Vec::<String>::new(),
            "{point}: the resumed night differs from the uninterrupted one"
        );
        assert!(
            !w.root().join(".distilled.json.run-next").exists(),
            "{point}"
        );
    }
}
