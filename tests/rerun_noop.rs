//! Reruns of `mcq` and `decontam` with the same arguments on unchanged inputs are no-ops:
//! every file keeps its bytes and its mtime; any other argument or changed input runs again.

mod mcq_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use dlm_data::mcq::prompts;
use mcq_support::*;

/// Every file under `dir` → (bytes, mtime).
fn files(dir: &Path) -> BTreeMap<String, (Vec<u8>, SystemTime)> {
    fn walk(root: &Path, d: &Path, out: &mut BTreeMap<String, (Vec<u8>, SystemTime)>) {
        for e in std::fs::read_dir(d).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                walk(root, &e.path(), out);
            } else {
                let rel = e.path().strip_prefix(root).unwrap().display().to_string();
                let m = e.metadata().unwrap().modified().unwrap();
                out.insert(rel, (std::fs::read(e.path()).unwrap(), m));
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(dir, dir, &mut m);
    m
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

/// Coarse filesystem clocks: make a rewrite visible in the mtime.
fn tick() {
    std::thread::sleep(std::time::Duration::from_millis(20));
}

#[test]
fn mcq_rerun_is_a_noop_and_keeps_the_decontam_reports() {
    let w = world();
    let out = w.root().join("out");
    let tok = ["--tokenizer", p(&w.tokenizer)];
    let (code, _, e) = run_mcq(&w, &out, &tok);
    assert_eq!(code, 0, "{e}");
    let sft = out.join("sft");
    for t in [
        ["--shards", p(&sft)],
        ["--prompts", p(&out.join("prompts.jsonl"))],
    ] {
        let (code, _, e) = run_decontam(&w, &t, &[]);
        assert_eq!(code, 0, "{e}");
    }
    let before = files(&out);
    assert!(before.contains_key("sft/decontam.json"));
    tick();
    let (code, json, e) = run_mcq(&w, &out, &[&tok[..], &["--json"]].concat());
    assert_eq!(code, 0, "{e}");
    assert_eq!(
        files(&out),
        before,
        "an identical rerun touched its outputs"
    );
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
    assert_eq!(v["up_to_date"], true, "{json}");
    assert_eq!(json.trim().lines().count(), 1);

    // prompts.jsonl removed: the run is redone, the shards come out identical, and the
    // reports that still describe them are kept.
    std::fs::remove_file(out.join("prompts.jsonl")).unwrap();
    let (code, _, e) = run_mcq(&w, &out, &tok);
    assert_eq!(code, 0, "{e}");
    let after = files(&out);
    assert_eq!(after.len(), before.len());
    for (k, (b, _)) in &before {
        assert_eq!(&after[k].0, b, "{k} changed bytes");
    }
    assert_eq!(after["sft/decontam.json"].1, before["sft/decontam.json"].1);

    // Another argument: run again; the shards change and the stale report goes.
    tick();
    let (code, _, e) = run_mcq(&w, &out, &[&tok[..], &["--seed", "5"]].concat());
    assert_eq!(code, 0, "{e}");
    assert!(mtime(&sft.join("index.json")) > before["sft/index.json"].1);
    assert!(
        !sft.join("decontam.json").exists(),
        "a stale report was kept"
    );
}

#[test]
fn mcq_prompts_only_rerun_leaves_the_file_alone() {
    let w = world();
    let out = w.root().join("out");
    let (code, _, e) = run_mcq(&w, &out, &[]);
    assert_eq!(code, 0, "{e}");
    let before = files(&out);
    tick();
    let (code, _, e) = run_mcq(&w, &out, &[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(files(&out), before);
    tick();
    let (code, _, e) = run_mcq(&w, &out, &["--seed", "3"]);
    assert_eq!(code, 0, "{e}");
    assert_ne!(files(&out)["prompts.jsonl"].0, before["prompts.jsonl"].0);
}

#[test]
fn decontam_rerun_is_a_noop_until_an_argument_or_input_changes() {
    let w = world();
    let out = w.root().join("out");
    let (code, _, e) = run_mcq(&w, &out, &["--tokenizer", p(&w.tokenizer)]);
    assert_eq!(code, 0, "{e}");
    let sft = out.join("sft");
    let copy = w.root().join("clean");
    let target = ["--shards", p(&sft)];
    let drop = ["--drop", p(&copy)];
    let (code, first, e) = run_decontam(&w, &target, &drop);
    assert_eq!(code, 0, "{e}");
    let report = sft.join("decontam.json");
    let (rb, copy_files) = (files(&sft), files(&copy));
    tick();
    // Same arguments: no scan, no write; the recorded report is printed as one JSON line.
    let (code, again, e) = run_decontam(&w, &target, &drop);
    assert_eq!(code, 0, "{e}");
    // The recorded report (its timings read back through f64 parsing may differ in the last
    // digit; everything else, `time` included, is the first run's).
    let facts = |s: &str| {
        let mut v: serde_json::Value = serde_json::from_str(s.trim()).unwrap();
        for k in ["seconds", "scan_seconds", "mb_per_s"] {
            v.as_object_mut().unwrap().remove(k);
        }
        v
    };
    assert_eq!(facts(&again), facts(&first));
    assert_eq!(again.trim().lines().count(), 1);
    assert_eq!(files(&sft), rb);
    assert_eq!(files(&copy), copy_files);

    // Another --ngram: scanned again.
    let (code, _, e) = run_decontam(&w, &target, &[&drop[..], &["--ngram", "12"]].concat());
    assert_eq!(code, 0, "{e}");
    assert!(mtime(&report) > rb["decontam.json"].1);
    let r = dlm_data::decontam::report::load(&report).unwrap();
    assert_eq!(r.ngram, 12);

    // The --drop copy's report gone: the copy is rewritten.
    let r12 = files(&sft);
    tick();
    std::fs::remove_file(copy.join("decontam.json")).unwrap();
    let (code, _, e) = run_decontam(&w, &target, &[&drop[..], &["--ngram", "12"]].concat());
    assert_eq!(code, 0, "{e}");
    assert!(copy.join("decontam.json").is_file());
    assert!(mtime(&report) > r12["decontam.json"].1);

    // The scanned data changed (other prompts): scanned again.
    let pr = out.join("prompts.jsonl");
    let (code, _, e) = run_decontam(&w, &["--prompts", p(&pr)], &[]);
    assert_eq!(code, 0, "{e}");
    let pr_report = out.join("prompts.decontam.json");
    let t0 = mtime(&pr_report);
    tick();
    let (code, _, e) = run_decontam(&w, &["--prompts", p(&pr)], &[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(mtime(&pr_report), t0);
    let (code, _, e) = run_mcq(&w, &out, &["--seed", "9"]);
    assert_eq!(code, 0, "{e}");
    let (code, _, e) = run_decontam(&w, &["--prompts", p(&pr)], &[]);
    assert_eq!(code, 0, "{e}");
    let r = dlm_data::decontam::report::load(&pr_report).unwrap();
    assert_eq!(r.scanned.sha256, dlm_data::util::sha256_file(&pr).unwrap());
}

/// Off a terminal, mcq's tokenizing and decontam's scan write plain progress lines (no ANSI
/// codes; the last one with the totals); `--quiet` writes none.
#[test]
fn mcq_and_decontam_logs_get_plain_progress_lines() {
    let w = world();
    let go = |global: &[&str], args: &[&str]| {
        let o = bin()
            .args(global)
            .args(args)
            .env("RUST_LOG", "info")
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    for (k, global) in [&["--progress-interval", "1"][..], &["--quiet"][..]]
        .into_iter()
        .enumerate()
    {
        let out = w.root().join(format!("out{k}"));
        let err = go(
            global,
            &mcq_args(&w, &out, &["--tokenizer", p(&w.tokenizer)]),
        );
        let pr = out.join("prompts.jsonl");
        let items = prompts::read(&pr).unwrap().len();
        let line = format!("mcq tokenize: {items}/{items} items (100.0%)");
        let err2 = go(global, &decontam_args(&w, &["--prompts", p(&pr)]));
        let line2 = format!("decontam scan: {items}/{items} documents (100.0%)");
        if k == 0 {
            assert!(!err.contains('\x1b'), "ANSI codes in a log file:\n{err}");
            assert!(err.lines().any(|l| l.starts_with(&line)), "{line}\n{err}");
            assert!(
                err2.lines().any(|l| l.starts_with(&line2)),
                "{line2}\n{err2}"
            );
        } else {
            assert_eq!(err, "", "--quiet");
            assert_eq!(err2, "", "--quiet");
        }
    }
}
