//! `dlm-data mcq` on hostile rows and output directories (issue 18): a blank distractor keeps
//! the item with its other options (recorded in `blank_options`), an item that cannot be kept
//! is named (file, row, reason) in the log and the `--json` summary, options are stored
//! exactly as rendered, oversized items are skipped and named, and `--out` is claimed — only
//! what an earlier mcq run wrote is replaced.

mod mcq_support;

use dlm_data::mcq::prompts;
use mcq_support::*;

fn hostile_world() -> World {
    let qs = questions(11, SCIQ_ROWS, 14);
    let mut b = sciq_batch(&qs, 11);
    // Row 3: one blank distractor → kept with three options.
    b = set_cell(&b, "distractor2", 3, "   ");
    // Row 5: all distractors blank → skipped (fewer than two options).
    for c in ["distractor1", "distractor2", "distractor3"] {
        b = set_cell(&b, c, 5, "");
    }
    // Row 7: blank question → skipped.
    b = set_cell(&b, "question", 7, " \t ");
    // Row 9: options with spaces around them.
    b = set_cell(&b, "distractor1", 9, "  padded option  ");
    world_with_sciq(b)
}

#[test]
fn blank_distractors_keep_the_item_or_name_the_row() {
    let w = hostile_world();
    let out = w.root().join("out");
    let (code, stdout, err) = run_mcq(&w, &out, &["--tokenizer", p(&w.tokenizer), "--json"]);
    assert_eq!(code, 0, "{err}");
    let recs = prompts::read(&out.join("prompts.jsonl")).unwrap();
    assert_eq!(recs.len(), SCIQ_ROWS - 2 + MMLU_ROWS);
    let r3 = recs
        .iter()
        .find(|r| r.source == "sciq" && r.row == 3)
        .unwrap();
    assert_eq!(r3.options.len(), 3);
    assert_eq!(r3.blank_options, vec!["distractor2".to_string()]);
    assert!(recs.iter().all(|r| r.row != 5 || r.source != "sciq"));
    // Options are stored exactly as the prompt renders them.
    let r9 = recs
        .iter()
        .find(|r| r.source == "sciq" && r.row == 9)
        .unwrap();
    assert!(
        r9.options.contains(&"padded option".to_string()),
        "{:?}",
        r9.options
    );
    for r in &recs {
        for (i, o) in r.options.iter().enumerate() {
            let line = format!("{}. {o}\n", dlm_data::mcq::item::letter(i));
            assert!(
                format!("{}\n", r.prompt).contains(&line),
                "{}: option {o:?} not rendered as stored",
                r.id
            );
        }
    }
    // The summary names both skipped rows with file and reason; the log names them too.
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["items"], (SCIQ_ROWS - 2 + MMLU_ROWS) as u64);
    assert_eq!(v["kept_without_blank_options"], 1);
    let skipped = v["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert_eq!(skipped[0]["row"], 5);
    assert_eq!(skipped[0]["file"], SCIQ_TRAIN);
    assert!(skipped[0]["reason"]
        .as_str()
        .unwrap()
        .contains("fewer than two"));
    assert_eq!(skipped[1]["row"], 7);
    assert!(skipped[1]["reason"]
        .as_str()
        .unwrap()
        .contains("question is blank"));
    assert!(err.contains("row 5") && err.contains("row 7"), "{err}");
    let idx = dlm_data::shards::index::load_complete(&out.join("sft")).unwrap();
    assert_eq!(idx.totals.skipped_empty, 2);
    assert_eq!(idx.totals.extra["kept_without_blank_options"], 1);
    assert!(std::path::Path::new(&idx.tokenizer.path).is_absolute());
}

#[test]
fn oversized_items_are_skipped_and_named() {
    let qs = questions(11, SCIQ_ROWS, 14);
    let big = "x".repeat(5000);
    let b = set_cell(&sciq_batch(&qs, 11), "support", 0, "fine");
    let b = set_cell(&b, "question", 2, &big);
    let w = world_with_sciq(b);
    let out = w.root().join("out");
    let (code, stdout, err) = run_mcq(&w, &out, &["--max-item-bytes", "4K", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["skipped_oversize"], 1);
    assert_eq!(v["skipped"][0]["row"], 2);
    assert!(v["skipped"][0]["reason"]
        .as_str()
        .unwrap()
        .contains("--max-item-bytes"));
}

#[test]
fn out_is_claimed_reruns_replace_only_their_own_files() {
    let w = world();
    let out = w.root().join("out");
    let (code, _, err) = run_mcq_shards(&w, &out, "parquet", "9");
    assert_eq!(code, 0, "{err}");
    // A rerun (fewer rows per shard: more shards) replaces what the first run wrote.
    let (code, _, err) = run_mcq_shards(&w, &out, "parquet", "5");
    assert_eq!(code, 0, "{err}");
    let idx = dlm_data::shards::index::load_complete(&out.join("sft")).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(out.join("sft"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "data")
        .collect();
    names.extend(
        std::fs::read_dir(out.join("sft").join("data"))
            .unwrap()
            .flatten()
            .map(|e| format!("data/{}", e.file_name().to_string_lossy())),
    );
    names.sort();
    let mut listed: Vec<String> = idx.shards.iter().map(|s| s.file.clone()).collect();
    // index.json and the dataset card beside it (#41).
    listed.extend(["index.json".into(), "README.md".into()]);
    listed.sort();
    assert_eq!(names, listed);
    // A foreign file in sft/ or a foreign prompts.jsonl: refused by a run that writes
    // (another --rows-per-shard: the same arguments would be an up-to-date no-op), untouched.
    std::fs::write(out.join("sft").join("part-00099.parquet"), b"not ours").unwrap();
    let (code, _, err) = run_mcq_shards(&w, &out, "parquet", "4");
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("part-00099.parquet"), "{err}");
    assert_eq!(
        std::fs::read(out.join("sft").join("part-00099.parquet")).unwrap(),
        b"not ours"
    );
    std::fs::remove_file(out.join("sft").join("part-00099.parquet")).unwrap();
    std::fs::write(out.join("prompts.jsonl"), b"my own notes\n").unwrap();
    let (code, _, err) = run_mcq(&w, &out, &[]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("prompts.jsonl"), "{err}");
    assert_eq!(
        std::fs::read(out.join("prompts.jsonl")).unwrap(),
        b"my own notes\n"
    );
    // --force replaces dlm-data's own file names.
    let (code, _, err) = run_mcq(&w, &out, &["--force"]);
    assert_eq!(code, 0, "{err}");
    assert!(prompts::read(&out.join("prompts.jsonl")).is_ok());
}

/// A full disk (RLIMIT_FSIZE): the error names the file, no hidden temp file is left.
#[test]
fn disk_full_leaves_no_temp_files() {
    let w = world();
    let out = w.root().join("full");
    let (code, err) = run_disk_full(4, &mcq_args(&w, &out, &["--tokenizer", p(&w.tokenizer)]));
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("File too large"), "{err}");
    assert!(
        err.contains("prompts.jsonl") || err.contains("part-00000"),
        "{err}"
    );
    fn temps(d: &std::path::Path, found: &mut Vec<String>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            if e.path().is_dir() {
                temps(&e.path(), found);
            } else if e.file_name().to_string_lossy().contains(".tmp") {
                found.push(e.path().display().to_string());
            }
        }
    }
    let mut found = Vec::new();
    temps(&out, &mut found);
    assert!(found.is_empty(), "temp files left: {found:?}");
}

#[test]
fn absurd_sizes_exit_2() {
    let w = world();
    let out = w.root().join("out");
    for extra in [
        &["--seq-len", "4294967296"][..],
        &["--rows-per-shard", "0"][..],
        &["--max-item-bytes", "1e30"][..],
    ] {
        let (code, _, err) = run_mcq(&w, &out, extra);
        assert_eq!(code, 2, "{extra:?}: {err}");
    }
    assert!(!out.exists());
}

/// Invalid UTF-8 in a sciq string column is named by file and row (it was "decoding FILE").
#[test]
fn invalid_utf8_names_the_row() {
    use parquet::data_type::{ByteArray, ByteArrayType};
    use parquet::file::writer::SerializedFileWriter;
    let cols = [
        "question",
        "distractor3",
        "distractor1",
        "distractor2",
        "correct_answer",
        "support",
    ];
    let msg = format!(
        "message m {{ {} }}",
        cols.iter()
            .map(|c| format!("required binary {c} (UTF8);"))
            .collect::<String>()
    );
    let schema = std::sync::Arc::new(parquet::schema::parser::parse_message_type(&msg).unwrap());
    let mut buf = Vec::new();
    {
        let mut w = SerializedFileWriter::new(&mut buf, schema, Default::default()).unwrap();
        let mut rg = w.next_row_group().unwrap();
        for c in cols {
            let mut col = rg.next_column().unwrap().unwrap();
            let vals: Vec<ByteArray> = (0..8)
                .map(|i| {
                    if c == "question" && i == 6 {
                        ByteArray::from(vec![b'q', 0xff, b'?'])
                    } else {
                        ByteArray::from(format!("{c} {i}").as_str())
                    }
                })
                .collect();
            col.typed::<ByteArrayType>()
                .write_batch(&vals, None, None)
                .unwrap();
            col.close().unwrap();
        }
        rg.close().unwrap();
        w.close().unwrap();
    }
    let w = world_with_sciq_file(buf);
    let out = w.root().join("out");
    let (code, _, err) = run_mcq(&w, &out, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("row 6") && err.contains("question"), "{err}");
    assert!(err.contains("invalid UTF-8"), "{err}");
    assert!(!out.join("prompts.jsonl").exists());
}
