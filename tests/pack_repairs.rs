//! Issue 57: `pack` lets nothing partial or empty look done — an output of 0 documents is an
//! error, an output inside its own input is refused the first night, an oversized row under
//! `--on-oversize skip` is skipped and named, and a killed pack's shards stay hidden from
//! loaders until its index commits.

mod pack_common;
mod pause_support;

use pack_common::*;

fn jsonl(field: &str, docs: &[String]) -> String {
    docs.iter()
        .map(|d| serde_json::json!({ field: d }).to_string() + "\n")
        .collect()
}

/// Row 5: `--text-column` misspelled with the hint's own `--on-missing-text skip`: exit 1
/// naming the skips, index.json not complete, no dataset card; `--strict` alike.
#[test]
fn an_output_of_no_document_is_an_error_not_a_complete_index() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let input = t.path().join("docs.jsonl");
    std::fs::write(&input, jsonl("body", &docs(5, 30))).unwrap();
    for extra in [&[][..], &["--strict"][..]] {
        let out = t.path().join(format!("out{}", extra.len()));
        let mut a = vec!["--text-column", "text", "--on-missing-text", "skip"];
        a.extend_from_slice(extra);
        let o = run_pack(&input, &tok, &out, &a, &[]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{extra:?}: {e}");
        assert!(e.contains("0 documents"), "{extra:?}: {e}");
        assert!(
            e.contains("30 rows had no text field"),
            "{extra:?}: the skips are counted and named: {e}"
        );
        if let Ok(b) = std::fs::read(out.join("index.json")) {
            let idx: serde_json::Value = serde_json::from_slice(&b).unwrap();
            assert_eq!(idx["complete"], false, "{extra:?}: {idx}");
        }
        assert!(
            !out.join("README.md").exists(),
            "{extra:?}: a card for nothing"
        );
    }
}

/// Row 6: `pack --input corpus --out corpus/packed` is refused the first night (exit 2, both
/// named, nothing written), as `run --check` refuses it; an output under a hidden entry of
/// the input directory is never read, so allowed.
#[test]
fn an_output_inside_its_input_directory_is_refused_the_first_night() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let corpus = t.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(corpus.join("docs.jsonl"), jsonl("text", &docs(6, 20))).unwrap();
    let out = corpus.join("packed");
    let o = run_pack(&corpus, &tok, &out, &["--seq-len", "32"], &[]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(e.contains("corpus/packed") && e.contains("--input"), "{e}");
    assert!(!out.exists(), "nothing written");
    // Through a relative path from inside the input directory too.
    let o = std::process::Command::new(bin())
        .current_dir(&corpus)
        .args(pack_args(
            std::path::Path::new("."),
            &tok,
            std::path::Path::new("packed"),
            &[],
        ))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let hidden = corpus.join(".packed");
    ok(&run_pack(&corpus, &tok, &hidden, &["--seq-len", "32"], &[]));
    ok(&run_pack(&corpus, &tok, &hidden, &["--seq-len", "32"], &[]));
}

/// Row 14: the dataset card names no local path (it is published with the directory): the
/// input files by their names relative to the directory they share, each with its sha256;
/// the audit's card check still holds.
#[test]
fn the_dataset_card_names_no_local_path() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let corpus = t.path().join("corpus");
    std::fs::create_dir_all(corpus.join("more")).unwrap();
    std::fs::write(corpus.join("a.jsonl"), jsonl("text", &docs(7, 20))).unwrap();
    std::fs::write(corpus.join("more/b.jsonl"), jsonl("text", &docs(8, 20))).unwrap();
    let out = t.path().join("out");
    ok(&run_pack(&corpus, &tok, &out, &["--seq-len", "32"], &[]));
    let card = std::fs::read_to_string(out.join("README.md")).unwrap();
    let root = t.path().display().to_string();
    assert!(!card.contains(&root), "a local path in the card:\n{card}");
    for (name, f) in [("a.jsonl", "a.jsonl"), ("more/b.jsonl", "more/b.jsonl")] {
        let sha = dlm_data::util::sha256_file(&corpus.join(f)).unwrap();
        assert!(
            card.contains(&format!("`{name}` sha256 `{sha}`")),
            "{name}:\n{card}"
        );
    }
    let o = run(&["audit", "--shards", out.to_str().unwrap()], &[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
}

/// Row 7: with `--on-oversize skip`, a JSON Lines row over `--max-row-bytes` is read past
/// (never held), dropped, counted in `skipped_oversize` and named; the night is not lost.
/// Without `skip` it is the error it was; `--strict` makes the skip an error.
#[test]
fn an_oversized_row_is_skipped_counted_and_named_under_on_oversize_skip() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let input = t.path().join("docs.jsonl");
    let good = docs(9, 10);
    let mut text = jsonl("text", &good[..5]);
    // Row 5: a 3 MiB document (the line is over a 1 MiB row bound).
    text.push_str(&(serde_json::json!({ "text": "word ".repeat(600_000) }).to_string() + "\n"));
    text.push_str(&jsonl("text", &good[5..]));
    std::fs::write(&input, text).unwrap();
    let base = ["--seq-len", "32", "--max-row-bytes", "1MiB"];
    let out = t.path().join("out");
    let mut a = base.to_vec();
    a.extend(["--on-oversize", "skip", "--json"]);
    let o = run_pack(&input, &tok, &out, &a, &[]);
    ok(&o);
    let e = stderr(&o);
    assert!(e.contains("row 5 (line 6)") && e.contains("skipped"), "{e}");
    let idx = index(&out);
    assert_eq!(idx["totals"]["skipped_oversize"], 1, "{idx}");
    assert_eq!(idx["totals"]["documents"], 10);
    let summary: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&o.stdout).trim()).unwrap();
    assert_eq!(summary["skipped_oversize"], 1, "{summary}");
    // --strict: the skip fails the run, index not complete.
    let strict = t.path().join("strict");
    a.push("--strict");
    let o = run_pack(&input, &tok, &strict, &a, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("oversized"), "{}", stderr(&o));
    // Without skip: the error naming the row and the flag.
    let o = run_pack(&input, &tok, &t.path().join("fail"), &base, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-row-bytes"), "{}", stderr(&o));
}

/// Row 18: `.txt` corpora (plain and `.zst`): one document per file, or with `--paragraphs`
/// one per blank-line-separated paragraph (recorded in index.json `args`).
#[test]
fn txt_files_are_one_document_each_or_one_per_paragraph() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let corpus = t.path().join("corpus");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(
        corpus.join("a.txt"),
        "The mill stood by the river.\nIts wheel turned all night.\n\n\nThe miller slept.\n",
    )
    .unwrap();
    std::fs::write(
        corpus.join("b.txt.zst"),
        zstd::encode_all(&b"A lone paragraph about barges.\n"[..], 3).unwrap(),
    )
    .unwrap();
    let whole = t.path().join("whole");
    ok(&run_pack(
        &corpus,
        &tok,
        &whole,
        &["--seq-len", "16", "--pad-last"],
        &[],
    ));
    let idx = index(&whole);
    assert_eq!(idx["totals"]["documents"], 2, "{idx}");
    assert!(idx["args"].get("paragraphs").is_none(), "{idx}");
    let paras = t.path().join("paras");
    ok(&run_pack(
        &corpus,
        &tok,
        &paras,
        &["--seq-len", "16", "--pad-last", "--paragraphs"],
        &[],
    ));
    let idx = index(&paras);
    assert_eq!(idx["totals"]["documents"], 3, "{idx}");
    assert_eq!(idx["args"]["paragraphs"], true, "{idx}");
    // Rows are paragraphs: a.txt gave rows 0..2.
    let a: Vec<&serde_json::Value> = idx["provenance"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["file"].as_str().unwrap().ends_with("a.txt"))
        .collect();
    assert_eq!(
        a.iter()
            .map(|p| p["documents"].as_u64().unwrap())
            .sum::<u64>(),
        2
    );
}

/// Every file of `out` outside its staging dot-directory `.incomplete/`, relative.
fn visible(out: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = tree(out)
        .into_keys()
        .filter(|f| !f.starts_with(".incomplete/"))
        .collect();
    v.sort();
    v
}

/// With DLM_PYTHON: how many parquet files pyarrow's dataset discovery finds under `out`
/// (what `pq.read_table(OUT/data)` and `load_dataset` read; dot-directories are skipped).
fn discovered_parquet(out: &std::path::Path) -> Option<usize> {
    let py = std::env::var("DLM_PYTHON").ok()?;
    let o = std::process::Command::new(py)
        .args([
            "-c",
            "import sys, pyarrow.dataset as ds; \
             print(len(ds.dataset(sys.argv[1], format='parquet', exclude_invalid_files=True).files))",
        ])
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    Some(String::from_utf8_lossy(&o.stdout).trim().parse().unwrap())
}

/// Row 4: `pack` killed (-9) after its 2nd journaled shard, in every format: the output shows
/// no shard — its shards wait in `OUT/.incomplete/` under their final names, at their
/// recorded sizes; pyarrow's discovery finds no parquet file; `inspect` still reads them — and
/// the same command resumes to the bytes of an uninterrupted run, the dot-directory gone. An
/// output written before shards were staged (its shards in place) resumes alike, and so does
/// a kill after the shards were moved into place but before the index said complete.
#[test]
fn a_killed_packs_shards_are_invisible_to_loaders_until_the_index_commits() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let input = t.path().join("in.parquet");
    let texts: Vec<Option<String>> = docs(5, 120).into_iter().map(Some).collect();
    write_parquet(&input, &texts, 30);
    for format in ["parquet", "mds", "megatron"] {
        let flags = ["--seq-len", "16", "--shard-bytes", "1K", "--format", format];
        let reference = t.path().join(format!("reference-{format}"));
        ok(&run_pack(&input, &tok, &reference, &flags, &[]));
        assert!(!reference.join(".incomplete").exists(), "{format}");
        let killed = |name: &str, point: &str| {
            let out = t.path().join(format!("{name}-{format}"));
            let (child, pause) =
                pause_support::spawn_paused(pack_cmd(&input, &tok, &out, &flags), point, t.path());
            pause_support::signal(&child, libc::SIGKILL);
            child.wait_with_output().unwrap();
            let _ = std::fs::remove_file(&pause);
            out
        };
        let out = killed("killed", "pack-shard:2");
        let idx = dlm_data::shards::index::load(&out).unwrap();
        assert!(!idx.complete, "{format}");
        assert_eq!(idx.shards.len(), 2, "{format}");
        assert_eq!(
            visible(&out),
            vec![".dlm-data.lock".to_string(), "index.json".to_string()]
                .into_iter()
                .filter(|f| out.join(f).exists())
                .collect::<Vec<_>>(),
            "{format}: a partial shard is visible"
        );
        for s in &idx.shards {
            let f = out.join(".incomplete").join(&s.file);
            assert_eq!(std::fs::metadata(&f).unwrap().len(), s.bytes, "{f:?}");
        }
        if format == "parquet" {
            if let Some(n) = discovered_parquet(&out) {
                assert_eq!(n, 0, "pyarrow found the killed run's shards");
                assert!(discovered_parquet(&reference).unwrap() > 0);
            }
        }
        let o = run(&["inspect", out.to_str().unwrap()], &[]);
        ok(&o);
        if format == "megatron" {
            // An output killed before shards were staged: its shards in place.
            let staged = out.join(".incomplete");
            for s in &idx.shards {
                for f in std::iter::once(&s.file).chain(s.extra_files.keys()) {
                    std::fs::rename(staged.join(f), out.join(f)).unwrap();
                }
            }
        }
        let o = run_pack(&input, &tok, &out, &flags, &[]);
        ok(&o);
        assert!(stderr(&o).contains("resuming after 2"), "{}", stderr(&o));
        assert!(!out.join(".incomplete").exists(), "{format}");
        assert_eq!(tree(&out), tree(&reference), "{format}: resumed bytes");

        // Killed with every shard moved into place, the index not yet complete.
        let out = killed("promoted", "pack-promoted");
        assert!(!dlm_data::shards::index::load(&out).unwrap().complete);
        ok(&run_pack(&input, &tok, &out, &flags, &[]));
        assert!(!out.join(".incomplete").exists(), "{format}");
        assert_eq!(tree(&out), tree(&reference), "{format}: resumed bytes");
    }
}
