//! `dlm-data inspect`: on pack outputs in all three formats, one shard file, mcq's SFT shards
//! (parquet and Megatron with its sidecar), prompts.jsonl and distilled.json, the counts agree
//! with what the writers recorded, the decoded rows show the documents' text with boundaries
//! marked, and bad paths exit 2 naming the path.

mod mcq_support;
mod pack_common;
mod teacher_support;

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn inspect(args: &[&str]) -> Output {
    let mut a = vec!["inspect"];
    a.extend_from_slice(args);
    pack_common::run(&a, &[("RUST_LOG", "warn")])
}

fn json(path: &Path, extra: &[&str]) -> Value {
    let mut a = vec![path.to_str().unwrap(), "--json"];
    a.extend_from_slice(extra);
    let o = inspect(&a);
    pack_common::ok(&o);
    let out = String::from_utf8(o.stdout).unwrap();
    assert_eq!(out.lines().count(), 1, "--json prints one line: {out}");
    serde_json::from_str(out.trim()).unwrap()
}

fn text(path: &Path, extra: &[&str]) -> String {
    let mut a = vec![path.to_str().unwrap()];
    a.extend_from_slice(extra);
    let o = inspect(&a);
    pack_common::ok(&o);
    String::from_utf8(o.stdout).unwrap()
}

/// The histogram's buckets hold every length once.
fn check_histogram(v: &Value) {
    let h = &v["lengths"];
    let n: u64 = h["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            assert!(b["min"].as_u64() <= b["max"].as_u64());
            b["count"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(n, h["n"].as_u64().unwrap());
    assert!(h["min"].as_u64() <= h["max"].as_u64());
}

/// The debug-escaped opening of `s` (how inspect prints decoded text), without the quote.
fn escaped_prefix(s: &str, chars: usize) -> String {
    let head: String = s.chars().take(chars).collect();
    let e = format!("{head:?}");
    e[..e.len() - 1].to_string()
}

#[test]
fn pack_outputs_in_every_format() {
    let d = tempfile::tempdir().unwrap();
    let tok = pack_common::tokenizer(d.path());
    let docs = pack_common::docs(3, 60);
    let input = d.path().join("in.parquet");
    pack_common::write_parquet(
        &input,
        &docs.iter().cloned().map(Some).collect::<Vec<_>>(),
        16,
    );
    for fmt in ["parquet", "mds", "megatron"] {
        let out = d.path().join(fmt);
        pack_common::ok(&pack_common::run_pack(
            &input,
            &tok,
            &out,
            &["--format", fmt, "--seq-len", "64", "--shard-bytes", "4KiB"],
            &[],
        ));
        let idx = pack_common::index(&out);
        let idx = idx.get("dlm_data").unwrap_or(&idx).clone();
        let v = json(&out, &[]);
        assert_eq!(v["kind"], "pretrain");
        assert_eq!(v["format"], fmt);
        assert_eq!(v["rows"], idx["totals"]["rows"], "{fmt}");
        assert_eq!(v["tokens"], idx["totals"]["tokens"], "{fmt}");
        assert_eq!(v["documents"], idx["totals"]["documents"], "{fmt}");
        assert_eq!(v["documents"], docs.len() as u64);
        assert_eq!(
            v["shards"].as_u64().unwrap(),
            idx["shards"].as_array().unwrap().len() as u64
        );
        assert!(v["shards"].as_u64().unwrap() > 1, "{fmt}: several shards");
        let src = &v["per_source"]["in"];
        assert_eq!(src["documents"], docs.len() as u64);
        assert_eq!(src["tokens"], idx["totals"]["tokens_by_source"]["in"]);
        check_histogram(&v);
        // Segments cover every stored token exactly once.
        assert_eq!(v["lengths"]["sum"], v["tokens"], "{fmt}");
        let t = text(&out, &["--rows", "3"]);
        assert_eq!(t.matches("-- row ").count(), 3, "{t}");
        // The first row starts with the first document, decoded.
        let first = t.lines().nth(1).unwrap();
        assert!(
            first.contains(&escaped_prefix(&docs[0], 30)),
            "{fmt}: {first}\nwant {}",
            escaped_prefix(&docs[0], 30)
        );
        let many = text(&out, &["--rows", "40"]);
        assert!(many.contains("</s>"), "{fmt}: EOS is shown: {many}");
        if fmt == "megatron" {
            // One document per row: no boundary inside a row.
            assert_eq!(v["extra"]["document_boundaries_in_rows"], 0);
            assert_eq!(v["rows"], docs.len() as u64);
        } else {
            let b = v["extra"]["document_boundaries_in_rows"].as_u64().unwrap();
            assert!(b > 0, "{fmt}: packed rows hold several documents");
            assert!(many.contains("▶ new document"), "{many}");
            // --from moves the window; --rows 0 prints only the summary.
            let t2 = text(&out, &["--rows", "1", "--from", "2"]);
            assert!(
                t2.contains("-- row 2 ") && !t2.contains("-- row 0 "),
                "{t2}"
            );
            let t0 = text(&out, &["--rows", "0"]);
            assert!(!t0.contains("-- row"), "{t0}");
            assert!(t0.contains("rows ") && t0.contains(" – "), "{t0}");
        }
        // One shard file: its rows only.
        let sh = &idx["shards"][1];
        let one = json(&out.join(sh["file"].as_str().unwrap()), &[]);
        assert_eq!(one["shards"], 1);
        assert_eq!(one["rows"], sh["rows"], "{fmt}");
        assert_eq!(one["tokens"], sh["tokens"], "{fmt}");
        // Without a tokenizer (the recorded one gone, none given): ids, not text.
        if fmt == "parquet" {
            let moved = d.path().join("tok-moved");
            std::fs::rename(&tok, &moved).unwrap();
            let t = text(&out, &["--rows", "1"]);
            assert!(t.contains("ids ["), "{t}");
            let t = text(
                &out,
                &["--rows", "1", "--tokenizer", moved.to_str().unwrap()],
            );
            assert!(t.contains(&escaped_prefix(&docs[0], 30)), "{t}");
            std::fs::rename(&moved, &tok).unwrap();
        }
    }
    // A damaged shard is an error naming it (exit 1), not a silent count.
    let out = d.path().join("parquet");
    let idx = pack_common::index(&out);
    let f = out.join(idx["shards"][0]["file"].as_str().unwrap());
    let bytes = std::fs::read(&f).unwrap();
    std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    let o = inspect(&[out.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", pack_common::stderr(&o));
    assert!(
        pack_common::stderr(&o).contains("part-00000.parquet"),
        "{}",
        pack_common::stderr(&o)
    );
}

#[test]
fn sft_shards_and_prompts() {
    let w = mcq_support::world();
    let base = w.root().join("base");
    let (code, _, err) = mcq_support::run_mcq_shards(&w, &base, "parquet", "7");
    assert_eq!(code, 0, "{err}");
    let recs = dlm_data::mcq::prompts::read(&base.join("prompts.jsonl")).unwrap();
    let sft_rows = dlm_data::mcq::sft_shards::read_dir(&base.join("sft")).unwrap();
    for fmt in ["parquet", "megatron"] {
        let out = w.root().join(format!("mcq-{fmt}"));
        let (code, _, err) = mcq_support::run_mcq_shards(&w, &out, fmt, "7");
        assert_eq!(code, 0, "{err}");
        let sft = out.join("sft");
        let idx = dlm_data::shards::index::load_complete(&sft).unwrap();
        let v = json(&sft, &[]);
        assert_eq!(v["kind"], "sft");
        assert_eq!(v["rows"], idx.totals.rows);
        assert_eq!(v["tokens"], idx.totals.tokens);
        assert_eq!(v["documents"], idx.totals.rows);
        assert_eq!(
            v["extra"]["prompt_tokens"], idx.totals.extra["prompt_tokens"],
            "{fmt}"
        );
        // Per source: rows counted from the rows' own provenance (the sidecar for Megatron).
        let sources: std::collections::BTreeSet<&str> =
            recs.iter().map(|r| r.source.as_str()).collect();
        assert_eq!(sources.len(), 2, "{sources:?}");
        for &s in &sources {
            let want = sft_rows.iter().filter(|r| r.prov.source == s).count() as u64;
            assert!(want > 0);
            assert_eq!(v["per_source"][s]["rows"], want, "{fmt} {s}");
        }
        check_histogram(&v);
        assert_eq!(v["lengths"]["sum"], v["tokens"]);
        let t = text(&sft, &["--rows", "2", "--chars", "0"]);
        let first = &sft_rows[0];
        assert!(t.contains(&format!(" {} (", first.id)), "{t}");
        let prompt_line = t.lines().find(|l| l.starts_with("  prompt [0, ")).unwrap();
        let rec = recs.iter().find(|r| r.id == first.id).unwrap();
        assert!(
            prompt_line.ends_with(&format!("{:?}", rec.prompt)),
            "{fmt}: the prompt decodes to the rendered prompt\n{prompt_line}\n{:?}",
            rec.prompt
        );
        assert!(t.contains("  answer ["), "{t}");
    }
    // prompts.jsonl
    let v = json(&base.join("prompts.jsonl"), &[]);
    assert_eq!(v["kind"], "prompts");
    assert_eq!(v["rows"], recs.len() as u64);
    assert_eq!(v["extra"]["mcq_items"], recs.len() as u64);
    for r0 in &recs {
        let s = r0.source.as_str();
        let want = recs.iter().filter(|r| r.source == s).count() as u64;
        assert_eq!(v["per_source"][s]["rows"], want);
    }
    check_histogram(&v);
    let golds: u64 = v["extra"]["gold_letters"]
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_u64().unwrap())
        .sum();
    assert_eq!(golds, recs.len() as u64);
    // With a tokenizer the lengths are tokens.
    let v = json(
        &base.join("prompts.jsonl"),
        &["--tokenizer", w.tokenizer.to_str().unwrap()],
    );
    assert_eq!(v["lengths_of"], "prompt tokens");
    assert_eq!(v["tokens"], v["lengths"]["sum"]);
    assert!(v["tokens"].as_u64().unwrap() > 0);
    let t = text(&base.join("prompts.jsonl"), &["--rows", "1"]);
    assert!(t.contains(&recs[0].id) && t.contains("  A. "), "{t}");
    // The mcq output directory itself: told which parts to inspect.
    let o = inspect(&[base.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        pack_common::stderr(&o).contains("prompts.jsonl"),
        "{}",
        pack_common::stderr(&o)
    );
}

#[test]
fn inspects_distilled_json() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    let mut s = String::new();
    for i in 0..5 {
        let v = serde_json::json!({"id": format!("p-{i}"), "source": if i % 2 == 0 {"a"} else {"b"},
            "prompt": format!("Question {i}: which is right?"),
            "options": ["one", "two", "three"], "gold": "B"});
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(&prompts, s).unwrap();
    let out = d.path().join("distilled.json");
    let t = teacher_support::teacher_dir();
    let mut a: Vec<String> = [
        "distill",
        "--teacher",
        t.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec();
    a.extend(teacher_support::small_sampler_args(&[], "2"));
    pack_common::ok(&pack_common::run(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        &[("RUST_LOG", "warn")],
    ));
    let recs = dlm_data::model::lineage::read_records(&out).unwrap();
    let v = json(&out, &[]);
    assert_eq!(v["kind"], "distilled");
    assert_eq!(v["rows"], 5);
    let toks: u64 = recs
        .iter()
        .map(|r| r["response_ids"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(v["tokens"], toks);
    assert_eq!(v["per_source"]["a"]["rows"], 3);
    assert_eq!(v["per_source"]["b"]["rows"], 2);
    let e = &v["extra"];
    assert_eq!(
        e["stop_eos"].as_u64().unwrap() + e["stop_length"].as_u64().unwrap(),
        5
    );
    assert_eq!(e["answered"], 5);
    let correct = recs.iter().filter(|r| r["correct"] == true).count() as u64;
    assert_eq!(e["correct"], correct);
    check_histogram(&v);
    let t = text(&out, &["--rows", "2"]);
    assert_eq!(t.matches("-- record ").count(), 2, "{t}");
    assert!(t.contains("p-0") && t.contains("Question 0"), "{t}");
    // The prompts file itself is recognised as prompts, not records.
    assert_eq!(json(&prompts, &[])["kind"], "prompts");
}

#[test]
fn bad_paths_are_named() {
    let d = tempfile::tempdir().unwrap();
    let cases: Vec<(std::path::PathBuf, &str)> = vec![
        (d.path().join("missing"), "no such file"),
        (d.path().to_path_buf(), "no index.json"),
        (d.path().join("x.jsonl"), "neither"),
        (d.path().join("empty.json"), "no records"),
        (d.path().join("notes.txt"), "not a shard"),
        (d.path().join("broken.jsonl"), "malformed JSON"),
    ];
    std::fs::write(d.path().join("x.jsonl"), "{\"a\": 1}\n").unwrap();
    std::fs::write(d.path().join("empty.json"), "").unwrap();
    std::fs::write(d.path().join("notes.txt"), "hello").unwrap();
    std::fs::write(d.path().join("broken.jsonl"), "{oops\n").unwrap();
    for (p, needle) in cases {
        let o = inspect(&[p.to_str().unwrap()]);
        let err = pack_common::stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{}: {err}", p.display());
        assert!(
            err.contains(&p.display().to_string()) && err.contains(needle),
            "{}: want {needle:?} in {err}",
            p.display()
        );
    }
}
