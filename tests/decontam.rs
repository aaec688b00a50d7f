//! `dlm-data decontam`: a benchmark question pasted into a training row is found (in prompts
//! and in SFT shards) with its benchmark, row and n-gram; clean fixtures give no hit; `--drop`
//! writes a filtered copy with its own clean report.

mod mcq_support;

use dlm_data::decontam::report::{self, DecontamReport};
use dlm_data::mcq::prompts;
use dlm_data::shards::index as shard_index;
use mcq_support::*;

/// A world whose sciq train row 5 carries sciq test row 3's question inside a longer text.
fn planted() -> World {
    let mut qs = questions(11, SCIQ_ROWS, 14);
    let bench = questions(33, 10, 16)[3].clone();
    qs[5] = format!(
        "Before we start: {}, as the textbook says.",
        bench.to_uppercase()
    );
    let w = world_with(qs);
    assert_eq!(w.sciq_test_questions[3], bench);
    w
}

fn mcq(w: &World, out: &std::path::Path) {
    let (code, _, err) = run_mcq(w, out, &["--tokenizer", p(&w.tokenizer)]);
    assert_eq!(code, 0, "{err}");
}

fn decontam(w: &World, target: &[&str], extra: &[&str]) -> DecontamReport {
    let (code, out, err) = run_decontam(w, target, extra);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap()
}

#[test]
fn planted_question_found_in_prompts_and_shards() {
    let w = planted();
    let out = w.root().join("out");
    mcq(&w, &out);
    let pr = out.join("prompts.jsonl");
    let r = decontam(&w, &["--prompts", p(&pr)], &[]);
    assert_eq!(r.contaminated_documents, 1, "{:?}", r.hits);
    let h = &r.hits[0];
    assert_eq!(h.benchmark, "sciq-test");
    assert_eq!(h.benchmark_row, 3);
    assert_eq!(h.benchmark_file, SCIQ_TEST);
    assert_eq!(h.document.id.as_deref(), Some("sciq-train-000005"));
    assert_eq!(h.document.file.as_deref(), Some(SCIQ_TRAIN));
    assert_eq!(h.document.row, Some(5));
    assert_eq!(h.ngram.split(' ').count(), 13);
    assert!(
        dlm_data::decontam::ngram::words(&w.sciq_test_questions[3])
            .join(" ")
            .contains(&h.ngram),
        "{}",
        h.ngram
    );
    assert_eq!(r.index_items, 20);
    // The report beside prompts.jsonl describes exactly this file.
    let saved = report::load(&out.join("prompts.decontam.json")).unwrap();
    assert_eq!(
        saved.scanned.sha256,
        dlm_data::util::sha256_file(&pr).unwrap()
    );
    assert_eq!(saved.hits, r.hits);

    // Shards: the same row, found by decoding the SFT tokens.
    let r = decontam(&w, &["--shards", p(&out.join("sft"))], &[]);
    assert_eq!(r.contaminated_documents, 1, "{:?}", r.hits);
    assert_eq!(r.hits[0].document.id.as_deref(), Some("sciq-train-000005"));
    assert_eq!(
        r.hits[0].document.shard.as_deref(),
        Some("data/part-00000.parquet")
    );
    assert!(out.join("sft/decontam.json").exists());
}

#[test]
fn clean_fixtures_have_no_hits() {
    let w = world();
    let out = w.root().join("out");
    mcq(&w, &out);
    for n in ["13", "8"] {
        let r = decontam(
            &w,
            &["--prompts", p(&out.join("prompts.jsonl"))],
            &["--ngram", n],
        );
        assert_eq!(r.contaminated_documents, 0, "n={n}: {:?}", r.hits);
        assert!(r.index_ngrams > 0);
        let r = decontam(&w, &["--shards", p(&out.join("sft"))], &["--ngram", n]);
        assert_eq!(r.contaminated_documents, 0, "n={n}: {:?}", r.hits);
        assert_eq!(r.scanned.documents, (SCIQ_ROWS + MMLU_ROWS) as u64);
    }
}

#[test]
fn drop_writes_filtered_copies() {
    let w = planted();
    let out = w.root().join("out");
    mcq(&w, &out);
    let clean = w.root().join("clean.jsonl");
    let r = decontam(
        &w,
        &["--prompts", p(&out.join("prompts.jsonl"))],
        &["--drop", p(&clean)],
    );
    assert_eq!(r.contaminated_documents, 1);
    let kept = prompts::read(&clean).unwrap();
    assert_eq!(kept.len(), SCIQ_ROWS + MMLU_ROWS - 1);
    assert!(kept.iter().all(|k| k.id != "sciq-train-000005"));
    let cr = report::load(&w.root().join("clean.decontam.json")).unwrap();
    assert_eq!(cr.contaminated_documents, 0);
    assert_eq!(
        cr.scanned.sha256,
        dlm_data::util::sha256_file(&clean).unwrap()
    );
    assert_eq!(cr.filtered_from.as_ref().unwrap().dropped_documents, 1);
    // Scanning the copy again finds nothing.
    let again = decontam(
        &w,
        &["--prompts", p(&clean)],
        &["--report", p(&w.root().join("x.json"))],
    );
    assert_eq!(again.contaminated_documents, 0);

    let sclean = w.root().join("sft-clean");
    decontam(
        &w,
        &["--shards", p(&out.join("sft"))],
        &["--drop", p(&sclean)],
    );
    let idx = shard_index::load(&sclean).unwrap();
    assert_eq!(idx.totals.rows, (SCIQ_ROWS + MMLU_ROWS - 1) as u64);
    assert_eq!(idx.totals.extra["dropped_contaminated_rows"], 1);
    let sh = &idx.shards[0];
    assert_eq!(
        dlm_data::util::sha256_file(&sclean.join(&sh.file)).unwrap(),
        sh.sha256
    );
    let again = decontam(&w, &["--shards", p(&sclean)], &[]);
    assert_eq!(again.contaminated_documents, 0);
    assert_eq!(again.scanned.documents, (SCIQ_ROWS + MMLU_ROWS - 1) as u64);
}

#[test]
fn local_benchmark_file_and_bad_usage() {
    let w = world();
    let out = w.root().join("out");
    mcq(&w, &out);
    // A local JSONL benchmark holding one of our own training questions (8-grams).
    let recs = prompts::read(&out.join("prompts.jsonl")).unwrap();
    let target = &recs[30];
    let q = target.prompt.lines().nth(2).unwrap().to_string();
    let bench = w.root().join("mybench.jsonl");
    std::fs::write(
        &bench,
        format!(
            "{}\n{}\n",
            serde_json::json!({"q": "nothing to see"}),
            serde_json::json!({"q": q, "a": 1})
        ),
    )
    .unwrap();
    let (code, outj, err) = run(&[
        "decontam",
        "--against",
        p(&bench),
        "--prompts",
        p(&out.join("prompts.jsonl")),
        "--ngram",
        "8",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let r: DecontamReport = serde_json::from_str(&outj).unwrap();
    assert_eq!(r.hits.len(), 1, "{:?}", r.hits);
    assert_eq!(r.hits[0].benchmark, "mybench");
    assert_eq!(r.hits[0].benchmark_row, 1);
    assert_eq!(r.hits[0].document.id.as_deref(), Some(target.id.as_str()));
    // --ngram outside 8..=13 and a manifest without eval-reference sources are usage errors.
    let (code, _, _) = run(&[
        "decontam",
        "--against",
        p(&bench),
        "--prompts",
        p(&out.join("prompts.jsonl")),
        "--ngram",
        "5",
    ]);
    assert_eq!(code, 2);
    let (code, _, err) = run(&[
        "decontam",
        "--against",
        p(&w.manifest),
        "--prompts",
        p(&out.join("prompts.jsonl")),
    ]);
    assert_eq!(code, 2, "{err}");
    // A broken benchmark line is named.
    std::fs::write(&bench, "{\"q\": 1}\nnot json\n").unwrap();
    let (code, _, err) = run(&[
        "decontam",
        "--against",
        p(&bench),
        "--prompts",
        p(&out.join("prompts.jsonl")),
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("mybench.jsonl") && err.contains("line 2"),
        "{err}"
    );
}

#[test]
fn planted_document_found_in_pack_shards_parquet_and_megatron() {
    use std::sync::Arc;
    let w = world();
    let mut docs = questions(55, 40, 30);
    docs[17] = format!(
        "Some preface text. {} And then the document goes on.",
        w.sciq_test_questions[3]
    );
    let batch = arrow::array::RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("text", arrow::datatypes::DataType::Utf8, false),
        ])),
        vec![Arc::new(arrow::array::StringArray::from_iter_values(
            docs.iter(),
        ))],
    )
    .unwrap();
    let input = w.root().join("corpus.parquet");
    {
        let f = std::fs::File::create(&input).unwrap();
        let mut wr = parquet::arrow::ArrowWriter::try_new(f, batch.schema(), None).unwrap();
        wr.write(&batch).unwrap();
        wr.close().unwrap();
    }
    for fmt in ["parquet", "megatron"] {
        let out = w.root().join(format!("packed-{fmt}"));
        let (code, _, err) = run(&[
            "pack",
            "--input",
            p(&input),
            "--tokenizer",
            p(&w.tokenizer),
            "--out",
            p(&out),
            "--seq-len",
            "64",
            "--format",
            fmt,
        ]);
        assert_eq!(code, 0, "{fmt}: {err}");
        let r = decontam(&w, &["--shards", p(&out)], &[]);
        assert_eq!(r.scanned.documents, 40, "{fmt}");
        assert_eq!(r.contaminated_documents, 1, "{fmt}: {:?}", r.hits);
        assert_eq!(r.hits[0].benchmark, "sciq-test");
        assert_eq!(r.hits[0].benchmark_row, 3);
        assert!(r.hits[0].document.shard.is_some());
    }
}

/// MDS and Megatron SFT sets: the planted row is found by decoding the tokens, `--drop`
/// rewrites the shards in the same format without exactly that row, and the copy scans clean.
#[test]
fn mds_and_megatron_shards_scan_and_drop() {
    let w = planted();
    for fmt in ["mds", "megatron"] {
        let out = w.root().join(fmt);
        let (code, _, err) = run_mcq_shards(&w, &out, fmt, "9");
        assert_eq!(code, 0, "{err}");
        let recs = prompts::read(&out.join("prompts.jsonl")).unwrap();
        let pos = recs
            .iter()
            .position(|r| r.id == "sciq-train-000005")
            .unwrap();
        let sft = out.join("sft");
        let r = decontam(&w, &["--shards", p(&sft)], &[]);
        assert_eq!(r.contaminated_documents, 1, "{fmt}: {:?}", r.hits);
        let h = &r.hits[0];
        assert_eq!(h.benchmark_row, 3, "{fmt}");
        let idx = shard_index::load(&sft).unwrap();
        assert_eq!(
            h.document.shard.as_deref(),
            Some(idx.shards[pos / 9].file.as_str()),
            "{fmt}"
        );
        assert_eq!(h.document.shard_row, Some((pos % 9) as u64), "{fmt}");
        assert_eq!(h.document.id.as_deref(), Some("sciq-train-000005"));
        assert_eq!(h.document.row, Some(5));

        let clean = w.root().join(format!("{fmt}-clean"));
        decontam(&w, &["--shards", p(&sft)], &["--drop", p(&clean)]);
        let cidx = shard_index::load_complete(&clean).unwrap();
        assert_eq!(cidx.format.name(), fmt);
        assert_eq!(cidx.totals.rows, (recs.len() - 1) as u64);
        assert_eq!(cidx.totals.extra["dropped_contaminated_rows"], 1);
        for sh in &cidx.shards {
            assert_eq!(
                dlm_data::util::sha256_file(&clean.join(&sh.file)).unwrap(),
                sh.sha256,
                "{fmt}"
            );
        }
        let mut want = dlm_data::mcq::sft_shards::read_dir(&sft).unwrap();
        want.remove(pos);
        let got = dlm_data::mcq::sft_shards::read_dir(&clean).unwrap();
        assert_eq!(got, want, "{fmt}: exactly the planted row is gone");
        let again = decontam(&w, &["--shards", p(&clean)], &[]);
        assert_eq!(again.contaminated_documents, 0, "{fmt}");
        assert_eq!(again.scanned.documents, (recs.len() - 1) as u64);
    }
}

/// Issue 18: an SFT set made with a relative tokenizer path is scanned from another working
/// directory (index.json records absolute paths), and `--drop DIR` replaces only what an
/// earlier drop there journaled: a foreign file refuses it, the scanned directory is never a
/// target, and a prompts `--drop` never overwrites a file that is not a prompts.jsonl.
#[test]
fn relative_paths_and_drop_targets_are_safe() {
    let w = planted();
    let out = w.root().join("rel");
    let rel_tok = w.tokenizer.strip_prefix(w.root()).unwrap().to_path_buf();
    let o = bin()
        .current_dir(w.root())
        .env("RUST_LOG", "warn")
        .args(mcq_args(
            &w,
            std::path::Path::new("rel"),
            &["--tokenizer", rel_tok.to_str().unwrap()],
        ))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let sft = out.join("sft");
    // Scanned from a different directory: the recorded tokenizer path still resolves.
    let elsewhere = tempfile::tempdir().unwrap();
    let o = bin()
        .current_dir(elsewhere.path())
        .args(decontam_args(&w, &["--shards", p(&sft), "--json"]))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));

    // --drop into a directory holding a foreign file: refused, untouched.
    let clean = w.root().join("clean");
    std::fs::create_dir(&clean).unwrap();
    std::fs::write(clean.join("keep.txt"), b"mine").unwrap();
    let a = decontam_args(&w, &["--shards", p(&sft), "--drop", p(&clean)]);
    let (code, _, err) = run(&a);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("keep.txt"), "{err}");
    assert_eq!(std::fs::read(clean.join("keep.txt")).unwrap(), b"mine");
    std::fs::remove_file(clean.join("keep.txt")).unwrap();
    // Twice into the same directory: the second run replaces what the first journaled.
    for _ in 0..2 {
        let (code, _, err) = run(&a);
        assert_eq!(code, 0, "{err}");
    }
    assert!(shard_index::load_complete(&clean).is_ok());

    // prompts --drop: never onto a foreign file.
    let pr = out.join("prompts.jsonl");
    let foreign = w.root().join("notes.jsonl");
    std::fs::write(&foreign, b"{\"not\": \"a prompt\"}\n").unwrap();
    let (code, _, err) = run(&decontam_args(
        &w,
        &["--prompts", p(&pr), "--drop", p(&foreign)],
    ));
    assert_eq!(code, 2, "{err}");
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        b"{\"not\": \"a prompt\"}\n"
    );
}

/// A full disk (RLIMIT_FSIZE) during `--drop`: the error names the file and no hidden temp
/// file is left behind (decontam never cleaned them up).
#[test]
fn drop_on_a_full_disk_leaves_no_temp_files() {
    let w = planted();
    let out = w.root().join("out");
    mcq(&w, &out);
    let clean = w.root().join("clean");
    let sft = out.join("sft");
    let args = decontam_args(&w, &["--shards", p(&sft), "--drop", p(&clean)]);
    let (code, err) = run_disk_full(2, &args);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("File too large") && err.contains("part-00000"),
        "{err}"
    );
    // (A --drop directory the failed run created and left empty is removed with its lock.)
    // Parquet shards (and their temp files) sit in data/.
    let left: Vec<String> = [clean.clone(), clean.join("data")]
        .iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp") || n.ends_with(".lock"))
        .collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
    assert!(shard_index::load_complete(&clean).is_err());
}
