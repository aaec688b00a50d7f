//! `mcq --out`, `decontam --drop`, `distill --out` and `lineage add --data` on a bucket,
//! against a real S3-compatible server on loopback (moto, see tests/objstore_support): the
//! objects are the local run's bytes, the commit marker (`index.json`, or the file itself)
//! goes up last, a killed distill resumes from the bucket alone to the same bytes, a second
//! distill writer exits 75 naming the holder, and `audit` passes on what was written.

mod mcq_support;
mod objstore_support;
mod pack_common;
mod pause_support;
mod teacher_support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use mcq_support::{decontam_args, mcq_args, p, world, World};
use objstore_support::*;
use pack_common::tree;

const BUCKET: &str = "dlm-test";

struct Fx {
    w: World,
    s3: S3Server,
}

fn fixture() -> Fx {
    let w = world();
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    Fx { w, s3 }
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", stderr(o));
}

impl Fx {
    fn root(&self) -> &Path {
        self.w.root()
    }
    fn staging(&self) -> PathBuf {
        self.root().join("staging")
    }
    /// `dlm-data ARGS` with the server's environment and the staging directory.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(teacher_support::bin());
        c.args(args).env("RUST_LOG", "warn");
        self.s3.apply(&mut c, &self.staging());
        c
    }
    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }
    /// The objects under `prefix`, downloaded.
    fn remote(&self, prefix: &str) -> BTreeMap<String, Vec<u8>> {
        let d = self
            .root()
            .join(format!("got-{}", prefix.replace('/', "_")));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        self.s3.download(BUCKET, prefix, &d);
        tree(&d)
    }
}

impl Fx {
    /// `lineage add --stage STAGE --data DATA` between two small checkpoints, into the local
    /// lineage file `name`; returns the lineage JSON.
    fn lineage_add(&self, stage: &str, data: &str, name: &str) -> serde_json::Value {
        let (from, to) = (self.root().join("ck0"), self.root().join("ck1"));
        for (d, b) in [(&from, "a"), (&to, "b")] {
            std::fs::create_dir_all(d).unwrap();
            std::fs::write(d.join("notes.txt"), b).unwrap();
        }
        let lineage = self.root().join(name);
        let o = self.run(&[
            "lineage",
            "add",
            "--stage",
            stage,
            "--from",
            p(&from),
            "--data",
            data,
            "--to",
            p(&to),
            "--lineage",
            p(&lineage),
        ]);
        ok(&o);
        serde_json::from_slice(&std::fs::read(&lineage).unwrap()).unwrap()
    }
}

/// The files of a local output a reader sees (no lock or other hidden file).
fn visible(t: BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    t.into_iter()
        .filter(|(k, _)| !k.split('/').any(|c| c.starts_with('.')))
        .collect()
}

fn assert_same(local: &BTreeMap<String, Vec<u8>>, remote: &BTreeMap<String, Vec<u8>>) {
    let names = |t: &BTreeMap<String, Vec<u8>>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(local), names(remote));
    for (k, v) in local {
        assert!(remote[k] == *v, "{k} differs from the local output's");
    }
}

/// Paused before the commit marker goes up: every other object is there, the marker is not.
fn paused_before_marker(fx: &Fx, args: &[&str], prefix: &str, marker: &str, others: &[&str]) {
    let c = fx.cmd(args);
    let (mut child, pause) = pause_support::spawn_paused(c, "object-commit", fx.root());
    let keys = fx.s3.keys(BUCKET, prefix);
    assert!(
        !keys.iter().any(|k| k == marker),
        "{marker} early: {keys:?}"
    );
    for o in others {
        assert!(
            keys.iter().any(|k| k.starts_with(o)),
            "{o} missing: {keys:?}"
        );
    }
    std::fs::remove_file(&pause).unwrap();
    assert!(child.wait().unwrap().success());
    let keys = fx.s3.keys(BUCKET, prefix);
    assert!(keys.iter().any(|k| k == marker), "{keys:?}");
    assert!(!keys.iter().any(|k| k.contains(".dlm-data.")), "{keys:?}");
}

#[test]
fn mcq_and_decontam_drop_to_s3_are_the_local_bytes_with_index_json_last() {
    let fx = fixture();
    let w = &fx.w;
    let tok = ["--tokenizer", p(&w.tokenizer), "--rows-per-shard", "7"];
    // mcq: the local run, then the same into the bucket.
    let local = fx.root().join("mcq-local");
    ok(&fx.run(&mcq_args(w, &local, &tok)));
    let o = fx.run(&mcq_args(w, Path::new("s3://dlm-test/mcq"), &tok));
    ok(&o);
    let mcq_local = visible(tree(&local));
    assert!(
        mcq_local
            .keys()
            .filter(|k| k.starts_with("sft/data/"))
            .count()
            > 2
    );
    assert_same(&mcq_local, &fx.remote("mcq"));
    // Rerun: nothing changes.
    ok(&fx.run(&mcq_args(w, Path::new("s3://dlm-test/mcq"), &tok)));
    assert_same(&mcq_local, &fx.remote("mcq"));
    paused_before_marker(
        &fx,
        &mcq_args(w, Path::new("s3://dlm-test/mcq2"), &tok),
        "mcq2",
        "sft/index.json",
        &["sft/data/", "prompts.jsonl", "README.md"],
    );
    assert_same(&mcq_local, &fx.remote("mcq2"));
    // lineage add --data of the bucket's SFT prefix records its index.json by URL.
    let v = fx.lineage_add("sft", "s3://dlm-test/mcq/sft", "lineage.json");
    let data = &v["stages"][0]["data"][0];
    assert_eq!(data["path"], "s3://dlm-test/mcq/sft/index.json");
    assert_eq!(data["kind"], "sft");
    let sha = dlm_data::util::sha256_hex(&mcq_local["sft/index.json"]);
    assert_eq!(data["sha256"], sha.as_str());
    // A file:// URL is the local path.
    let url = format!("file://{}", local.join("sft").display());
    let v = fx.lineage_add("sft", &url, "lineage2.json");
    assert_eq!(v["stages"][0]["data"][0]["sha256"], sha.as_str());
    // Killed with two shards journaled on the bucket, rerun with nothing local: the same bytes.
    let args = mcq_args(w, Path::new("s3://dlm-test/mcqk"), &tok);
    let (mut child, _pause) = pause_support::spawn_paused(fx.cmd(&args), "mcq-shard:3", fx.root());
    let t0 = std::time::Instant::now();
    while !fx
        .s3
        .keys(BUCKET, "mcqk")
        .iter()
        .any(|k| k == "sft/.dlm-data.journal.json")
    {
        assert!(
            t0.elapsed().as_secs() < 60,
            "the journal never reached the bucket"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    pause_support::signal(&child, libc::SIGKILL);
    let _ = child.wait();
    std::fs::remove_dir_all(fx.staging()).unwrap();
    let o = fx.run(&args);
    ok(&o);
    assert!(
        stderr(&o).contains("resuming from the bucket's journal"),
        "{}",
        stderr(&o)
    );
    assert_same(&mcq_local, &fx.remote("mcqk"));
    // Prompts only: README.md, then prompts.jsonl (the marker).
    let plocal = fx.root().join("mcq-prompts");
    ok(&fx.run(&mcq_args(w, &plocal, &[])));
    ok(&fx.run(&mcq_args(w, Path::new("s3://dlm-test/mcqp"), &[])));
    assert_same(&visible(tree(&plocal)), &fx.remote("mcqp"));

    // decontam --drop of the SFT shards: shards and index.json as the local copy's; the
    // copy's report names the URL.
    let sft = local.join("sft");
    let drop_local = fx.root().join("drop-local");
    let drop = |to: &'static str| decontam_args(w, &["--shards", p(&sft), "--drop", to]).to_vec();
    ok(&fx.run(&decontam_args(
        w,
        &["--shards", p(&sft), "--drop", p(&drop_local)],
    )));
    ok(&fx.run(&drop("s3://dlm-test/clean")));
    let mut l = visible(tree(&drop_local));
    let mut r = fx.remote("clean");
    let (lr, rr) = (l.remove("decontam.json"), r.remove("decontam.json"));
    assert!(lr.is_some());
    let rep: serde_json::Value = serde_json::from_slice(&rr.unwrap()).unwrap();
    assert_eq!(rep["scanned"]["path"], "s3://dlm-test/clean");
    assert!(l.keys().any(|k| k.starts_with("data/")));
    assert_same(&l, &r);
    // Rerun: the same objects.
    ok(&fx.run(&drop("s3://dlm-test/clean")));
    let mut r = fx.remote("clean");
    r.remove("decontam.json");
    assert_same(&l, &r);
    paused_before_marker(
        &fx,
        &drop("s3://dlm-test/clean2"),
        "clean2",
        "index.json",
        &["data/", "decontam.json"],
    );
    // decontam --drop of prompts.jsonl: one object, its report beside it.
    let prompts = local.join("prompts.jsonl");
    let pdrop =
        |to: &'static str| decontam_args(w, &["--prompts", p(&prompts), "--drop", to]).to_vec();
    let pl = fx.root().join("pd/clean.jsonl");
    std::fs::create_dir_all(pl.parent().unwrap()).unwrap();
    ok(&fx.run(&decontam_args(
        w,
        &["--prompts", p(&prompts), "--drop", p(&pl)],
    )));
    ok(&fx.run(&pdrop("s3://dlm-test/pd/clean.jsonl")));
    let r = fx.remote("pd");
    assert_eq!(r["clean.jsonl"], std::fs::read(&pl).unwrap());
    assert!(r.contains_key("clean.decontam.json"), "{:?}", r.keys());
    assert_eq!(r.len(), 2, "{:?}", r.keys());
}

/// The distill arguments over `prompts` into `out` (tiny CPU teacher, `--top-k 3`, windows of
/// 4 prompts: 10 units).
fn distill_args(prompts: &str, out: &str) -> Vec<String> {
    let mut a: Vec<String> = vec!["distill".into(), "--teacher".into()];
    a.push(p(teacher_support::teacher_dir()).into());
    a.extend([
        "--prompts".into(),
        prompts.into(),
        "--out".into(),
        out.into(),
    ]);
    a.extend(teacher_support::small_sampler_args(
        &["--device", "cpu", "--top-k", "3", "--window-prompts", "4"],
        "2",
    ));
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The world's prompts (from a local mcq run) and the local distill of them.
fn local_distill(fx: &Fx) -> (PathBuf, BTreeMap<String, Vec<u8>>) {
    let out = fx.root().join("mcq");
    ok(&fx.run(&mcq_args(&fx.w, &out, &[])));
    let prompts = out.join("prompts.jsonl");
    let d = fx.root().join("distill-local/distilled.json");
    ok(&fx.run(&strs(&distill_args(p(&prompts), p(&d)))));
    let mut want = BTreeMap::new();
    for n in ["distilled.json", "distilled.json.topk.parquet"] {
        want.insert(n.to_string(), std::fs::read(d.with_file_name(n)).unwrap());
    }
    (prompts, want)
}

/// What the bucket holds of the output (not its parts).
fn output_objects(fx: &Fx, prefix: &str) -> BTreeMap<String, Vec<u8>> {
    fx.remote(prefix)
        .into_iter()
        .filter(|(k, _)| !k.contains(".parts/"))
        .collect()
}

#[test]
fn distill_to_s3_is_the_local_bytes_and_audits_clean() {
    let fx = fixture();
    let (prompts, want) = local_distill(&fx);
    let url = "s3://dlm-test/d/distilled.json";
    let o = fx.run(&strs(&distill_args(p(&prompts), url)));
    ok(&o);
    assert_same(&want, &output_objects(&fx, "d"));
    // No credential in what it printed or wrote (the parts included).
    let mut texts = vec![stderr(&o), String::from_utf8_lossy(&o.stdout).into_owned()];
    texts.extend(
        fx.remote("d")
            .values()
            .map(|v| String::from_utf8_lossy(v).into_owned()),
    );
    for t in &texts {
        assert!(!t.contains(SECRET) && !t.contains(SESSION), "{t}");
    }
    let keys = fx.s3.keys(BUCKET, "d");
    assert!(keys.iter().any(|k| k.starts_with("distilled.json.parts/")));
    assert!(!keys.iter().any(|k| k.ends_with(".lease")), "{keys:?}");
    // Rerun: complete, the same bytes.
    ok(&fx.run(&strs(&distill_args(p(&prompts), url))));
    assert_same(&want, &output_objects(&fx, "d"));
    // The sidecar goes up before distilled.json.
    paused_before_marker(
        &fx,
        &strs(&distill_args(
            p(&prompts),
            "s3://dlm-test/d2/distilled.json",
        )),
        "d2",
        "distilled.json",
        &["distilled.json.topk.parquet", "distilled.json.parts/"],
    );
    // Two workers with no shared directory, then `merge` in the bucket: the one process's
    // bytes.
    let wurl = "s3://dlm-test/w/distilled.json";
    for (k, shard) in ["0/2", "1/2"].into_iter().enumerate() {
        let mut a = distill_args(p(&prompts), wurl);
        a.extend(["--shard".to_string(), shard.to_string()]);
        let mut c = fx.cmd(&strs(&a));
        c.env("DLM_DATA_STAGING", fx.root().join(format!("staging-w{k}")));
        ok(&c.output().unwrap());
    }
    assert!(!fx
        .s3
        .keys(BUCKET, "w")
        .iter()
        .any(|k| k == "distilled.json"));
    let mut c = fx.cmd(&["--json", "merge", wurl]);
    c.env("DLM_DATA_STAGING", fx.root().join("staging-m"));
    let o = c.output().unwrap();
    ok(&o);
    let line: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["out"], wurl);
    assert_same(&want, &output_objects(&fx, "w"));
    // audit reads the written output from the bucket and passes.
    let w = &fx.w;
    let o = fx.run(&[
        "audit",
        "--manifest",
        p(&w.manifest),
        "--cache",
        p(&w.cache),
        "--prompts",
        p(&prompts),
        "--distilled",
        url,
    ]);
    assert!(
        o.status.success(),
        "{}\n{}",
        stderr(&o),
        String::from_utf8_lossy(&o.stdout)
    );
    // lineage add --data names the object by its URL.
    let v = fx.lineage_add("distill", url, "lineage.json");
    let data = &v["stages"][0]["data"][0];
    assert_eq!(data["path"], url);
    assert_eq!(data["kind"], "distilled");
    let sha = dlm_data::util::sha256_hex(&want["distilled.json"]);
    assert_eq!(data["sha256"], sha.as_str());
}

#[test]
fn killed_distill_resumes_from_the_bucket_alone_and_a_second_writer_exits_75() {
    let fx = fixture();
    let (prompts, want) = local_distill(&fx);
    let url = "s3://dlm-test/k/distilled.json";
    let args = distill_args(p(&prompts), url);
    // Paused before its third unit, once the bucket's part holds the first two: no
    // distilled.json yet.
    let c = fx.cmd(&strs(&args));
    let (mut child, _pause) = pause_support::spawn_paused(c, "distill-batch:3", fx.root());
    let t0 = std::time::Instant::now();
    loop {
        let part = fx
            .remote("k")
            .remove("distilled.json.parts/00000-of-00001.jsonl");
        let commits = part.map_or(0, |b| {
            String::from_utf8_lossy(&b)
                .lines()
                .filter(|l| l.starts_with("{\"batch\":"))
                .count()
        });
        if commits >= 2 {
            break;
        }
        assert!(
            t0.elapsed().as_secs() < 60,
            "the part never reached the bucket"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let keys = fx.s3.keys(BUCKET, "k");
    assert!(!keys.iter().any(|k| k == "distilled.json"), "{keys:?}");
    assert!(
        keys.iter()
            .any(|k| k == "distilled.json.parts/00000-of-00001.lease"),
        "{keys:?}"
    );
    // A second writer, from another staging directory: exit 75 naming the holder.
    let mut c = fx.cmd(&strs(&args));
    c.env("DLM_DATA_STAGING", fx.root().join("staging-b"));
    let o = c.output().unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("pid {}", child.id())),
        "{}",
        stderr(&o)
    );
    pause_support::signal(&child, libc::SIGKILL);
    let _ = child.wait();
    // Another machine: nothing local; the bucket's parts are all there is.
    std::fs::remove_dir_all(fx.staging()).unwrap();
    let o = fx.run(&strs(&args));
    ok(&o);
    assert!(
        stderr(&o).contains("resuming from the bucket's parts"),
        "{}",
        stderr(&o)
    );
    assert_same(&want, &output_objects(&fx, "k"));
}

/// The `decontam` check of an `audit --json` run: (status, summary + problems + notes).
fn decontam_check(o: &Output) -> (String, String) {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "decontam")
        .unwrap()
        .clone();
    (c["status"].to_string(), c.to_string())
}

#[test]
fn decontam_scans_bucket_outputs_and_audit_finds_its_reports_there() {
    let fx = fixture();
    let w = &fx.w;
    let tok = ["--tokenizer", p(&w.tokenizer), "--rows-per-shard", "7"];
    let local = fx.root().join("mcq-local");
    ok(&fx.run(&mcq_args(w, &local, &tok)));
    ok(&fx.run(&mcq_args(w, Path::new("s3://dlm-test/m"), &tok)));
    let (sft, prompts) = (local.join("sft"), local.join("prompts.jsonl"));
    let scans = [
        (
            p(&sft),
            "s3://dlm-test/m/sft",
            "--shards",
            "m/sft/decontam.json",
        ),
        (
            p(&prompts),
            "s3://dlm-test/m/prompts.jsonl",
            "--prompts",
            "m/prompts.decontam.json",
        ),
    ];
    for (path, url, flag, report_key) in scans {
        // The local scan, then the same output scanned on the bucket: the same findings, the
        // report beside the scanned objects, naming the URL.
        let lo = fx.run(&decontam_args(w, &[flag, path, "--json"]));
        let ro = fx.run(&decontam_args(w, &[flag, url, "--json"]));
        assert_eq!(lo.status.code(), ro.status.code(), "{}", stderr(&ro));
        let key = report_key.split_once('/').unwrap();
        let keys = fx.s3.keys(BUCKET, key.0);
        assert!(keys.iter().any(|k| k == key.1), "{flag}: {keys:?}");
        let d = fx.root().join("rep");
        std::fs::create_dir_all(&d).unwrap();
        fx.s3.download(BUCKET, key.0, &d);
        let remote: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(key.1)).unwrap()).unwrap();
        let local_rep = if flag == "--shards" {
            sft.join("decontam.json")
        } else {
            local.join("prompts.decontam.json")
        };
        let lrep: serde_json::Value =
            serde_json::from_slice(&std::fs::read(local_rep).unwrap()).unwrap();
        assert_eq!(remote["scanned"]["path"], url);
        assert_eq!(remote["scanned"]["sha256"], lrep["scanned"]["sha256"]);
        assert_eq!(remote["hits"], lrep["hits"]);
        assert_eq!(
            remote["contaminated_documents"],
            lrep["contaminated_documents"]
        );
        // Run again: the report on the bucket describes the output as it is: up to date, not
        // rewritten (its `time` would change).
        let before = std::fs::read(d.join(key.1)).unwrap();
        let again = fx.run(&decontam_args(w, &[flag, url]));
        assert_eq!(again.status.code(), ro.status.code(), "{}", stderr(&again));
        fx.s3.download(BUCKET, key.0, &d);
        assert!(
            std::fs::read(d.join(key.1)).unwrap() == before,
            "{flag}: report rewritten"
        );
    }
    // audit of the bucket outputs finds the reports there, as audit of the local ones does.
    let audit = |shards: &str, prompts: &str| {
        let mut c = fx.cmd(&[
            "audit",
            "--json",
            "--manifest",
            p(&w.manifest),
            "--cache",
            p(&w.cache),
            "--shards",
            shards,
            "--prompts",
            prompts,
        ]);
        c.env("RUST_LOG", "info");
        c.output().unwrap()
    };
    let (ls, lc) = decontam_check(&audit(p(&sft), p(&prompts)));
    let (rs, rc) = decontam_check(&audit(
        "s3://dlm-test/m/sft",
        "s3://dlm-test/m/prompts.jsonl",
    ));
    assert_eq!(ls, rs, "local: {lc}\nbucket: {rc}");
    assert!(!rc.contains("not run"), "{rc}");
}
