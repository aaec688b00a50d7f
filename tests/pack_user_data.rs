//! `pack --input` on the user's own data: repeatable `--input`, directories and globs in a
//! fixed sorted order, `.parquet` / `.json` / `.jsonl` and their `.gz` / `.zst` forms,
//! `--text` templates with nested fields, each input's sha256 in index.json (changed content
//! is a different run), and a bad row in a compressed file named with its file and row.

mod pack_common;

use std::io::Write;
use std::path::{Path, PathBuf};

use pack_common::*;

fn gz(path: &Path, bytes: &[u8]) {
    let mut e = flate2::write::GzEncoder::new(
        std::fs::File::create(path).unwrap(),
        flate2::Compression::default(),
    );
    e.write_all(bytes).unwrap();
    e.finish().unwrap();
}

fn jsonl(docs: &[String]) -> String {
    docs.iter()
        .map(|d| serde_json::json!({ "text": d }).to_string() + "\n")
        .collect()
}

fn pack(args: &[&str]) -> std::process::Output {
    run(&[&["pack"], args].concat(), &[])
}

/// The user's corpus: a directory of mixed formats and codecs, and a loose file.
struct Corpus {
    dir: PathBuf,
    loose: PathBuf,
    /// Documents of each file, in the order pack must read them.
    ordered: Vec<String>,
}

fn corpus(root: &Path) -> Corpus {
    let dir = root.join("data");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let a = docs(1, 30);
    let b = docs(2, 25);
    let c = docs(3, 40);
    let d = docs(4, 20);
    let e = docs(5, 15);
    // Sorted order under data/: a.jsonl.gz, b.json.zst, c.parquet, sub/d.jsonl.
    gz(&dir.join("a.jsonl.gz"), jsonl(&a).as_bytes());
    let arr = serde_json::to_vec(
        &b.iter()
            .map(|t| serde_json::json!({ "text": t }))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    std::fs::write(
        dir.join("b.json.zst"),
        zstd::encode_all(&arr[..], 3).unwrap(),
    )
    .unwrap();
    write_parquet(
        &dir.join("c.parquet"),
        &c.iter().cloned().map(Some).collect::<Vec<_>>(),
        16,
    );
    std::fs::write(dir.join("sub/d.jsonl"), jsonl(&d)).unwrap();
    std::fs::write(dir.join("notes.txt"), "not data").unwrap();
    let loose = root.join("extra.parquet.zst");
    let tmp = root.join("tmp.parquet");
    write_parquet(&tmp, &e.iter().cloned().map(Some).collect::<Vec<_>>(), 8);
    std::fs::write(
        &loose,
        zstd::encode_all(&std::fs::read(&tmp).unwrap()[..], 3).unwrap(),
    )
    .unwrap();
    std::fs::remove_file(tmp).unwrap();
    Corpus {
        dir,
        loose,
        ordered: [a, b, c, d, e].concat(),
    }
}

#[test]
fn directories_globs_and_compressed_files_pack_in_sorted_order_with_their_sha256() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let c = corpus(t.path());
    let out = t.path().join("out");
    let (dir, loose) = (c.dir.display().to_string(), c.loose.display().to_string());
    // The directory, then a glob that matches a file already named (read once), then a file.
    let glob = format!("{dir}/*.jsonl.gz");
    let args = [
        "--input",
        &dir,
        "--input",
        &glob,
        "--input",
        &loose,
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "32",
        "--shard-bytes",
        "4KiB",
    ];
    ok(&pack(&args));
    let stream = expected_stream(&tok, &c.ordered);
    let rows = parquet_rows(&out);
    assert_eq!(rows.concat(), stream[..rows.len() * 32]);
    let idx = index(&out);
    assert_eq!(idx["totals"]["documents"], c.ordered.len());
    let inputs = idx["args"]["inputs"].as_array().unwrap();
    let names: Vec<&str> = inputs
        .iter()
        .map(|i| i["path"].as_str().unwrap().rsplit('/').next().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "a.jsonl.gz",
            "b.json.zst",
            "c.parquet",
            "d.jsonl",
            "extra.parquet.zst"
        ]
    );
    for i in inputs {
        let p = Path::new(i["path"].as_str().unwrap());
        assert_eq!(i["sha256"], dlm_data::util::sha256_file(p).unwrap());
        assert_eq!(i["bytes"], std::fs::metadata(p).unwrap().len());
    }
    let prov: Vec<&str> = idx["provenance"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["source"].as_str().unwrap())
        .collect();
    assert!(prov.iter().all(|s| *s == "input"), "{prov:?}");

    // The same command again: a no-op. One byte of one input changed (same size): a
    // different run, refused; --force packs it afresh.
    let before = tree(&out);
    ok(&pack(&args));
    assert_eq!(tree(&out), before);
    let d = c.dir.join("sub/d.jsonl");
    let mut bytes = std::fs::read(&d).unwrap();
    // A letter of the first document's text (not of the `text` key, which strict own-data
    // reading would refuse).
    let from = bytes.windows(3).position(|w| w == b"\":\"").unwrap() + 3;
    let k = from
        + bytes[from..]
            .iter()
            .position(|b| b.is_ascii_lowercase())
            .unwrap();
    bytes[k] = if bytes[k] == b'a' { b'b' } else { b'a' };
    std::fs::write(&d, &bytes).unwrap();
    let o = pack(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("index.json"), "{}", stderr(&o));
    ok(&pack(&[&args[..], &["--force"]].concat()));
    assert_ne!(index(&out)["args"]["inputs"], before_inputs(&before));
}

fn before_inputs(tree: &std::collections::BTreeMap<String, Vec<u8>>) -> serde_json::Value {
    let v: serde_json::Value = serde_json::from_slice(&tree["index.json"]).unwrap();
    v["args"]["inputs"].clone()
}

#[test]
fn text_templates_take_nested_fields_and_text_column_still_works() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let rows: Vec<(String, String, String)> = docs(9, 30)
        .into_iter()
        .enumerate()
        .map(|(i, b)| {
            (
                format!("Title {i}"),
                b,
                if i % 2 == 0 { "en" } else { "fr" }.into(),
            )
        })
        .collect();
    let mut text = String::new();
    for (ti, b, l) in &rows {
        text += &serde_json::json!({"title": ti, "body": b, "meta": {"lang": l}}).to_string();
        text.push('\n');
    }
    let input = t.path().join("articles.jsonl.zst");
    std::fs::write(&input, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
    let out = t.path().join("out");
    let o = pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text",
        "{title}\n\n{body} [{meta.lang}]",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "16",
    ]);
    ok(&o);
    let want: Vec<String> = rows
        .iter()
        .map(|(ti, b, l)| format!("{ti}\n\n{b} [{l}]"))
        .collect();
    let rows_out = parquet_rows(&out);
    assert_eq!(
        rows_out.concat(),
        expected_stream(&tok, &want)[..rows_out.len() * 16]
    );
    let idx = index(&out);
    assert_eq!(idx["args"]["text"], "{title}\n\n{body} [{meta.lang}]");
    assert_eq!(idx["args"]["text_column"], serde_json::Value::Null);
    // --text-column names one field, as before.
    let out2 = t.path().join("out2");
    ok(&pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text-column",
        "title",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out2.to_str().unwrap(),
        "--seq-len",
        "16",
    ]));
    assert_eq!(index(&out2)["args"]["text_column"], "title");
    assert!(index(&out2)["args"].get("text").is_none());
    // A template naming a field no row has: own data is strict, the run fails naming the
    // file, the row and the fields the row has ...
    let out3 = t.path().join("out3");
    let o = pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text",
        "{meta.missing}",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out3.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("articles.jsonl.zst")
            && e.contains("row 0")
            && e.contains("no field \"meta.missing\" (fields present: \"lang\")"),
        "{e}"
    );
    // ... or, with --on-missing-text skip, skips and counts every row; an output of no
    // document at all is an error (issue 57): exit 1, the skips named, index not complete.
    let out3 = t.path().join("out3s");
    let o = pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text",
        "{meta.missing}",
        "--on-missing-text",
        "skip",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out3.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("contributed 0 documents"), "{e}");
    assert!(
        e.contains(&format!("{} rows had no text field", rows.len())),
        "{e}"
    );
    if out3.join("index.json").exists() {
        assert_eq!(index(&out3)["complete"], false);
    }
    // A malformed template is a usage error.
    let o = pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text",
        "{title",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        t.path().join("o4").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("unclosed"), "{}", stderr(&o));
}

#[test]
fn a_bad_row_in_a_compressed_file_names_the_file_and_row() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let dir = t.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    gz(&dir.join("a.jsonl.gz"), jsonl(&docs(1, 10)).as_bytes());
    let mut bad = jsonl(&docs(2, 5));
    bad += "{\"text\": \"unterminated\n";
    gz(&dir.join("b.jsonl.gz"), bad.as_bytes());
    // Not gzip at all, under a .gz name.
    std::fs::write(dir.join("c.jsonl.gz"), b"plain text").unwrap();
    let out = t.path().join("out");
    let o = pack(&[
        "--input",
        dir.to_str().unwrap(),
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "16",
        "--shard-bytes",
        "64",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("b.jsonl.gz") && e.contains("row 5"), "{e}");
    assert_eq!(index(&out)["complete"], false);
    std::fs::remove_file(dir.join("b.jsonl.gz")).unwrap();
    let o = pack(&[
        "--input",
        dir.to_str().unwrap(),
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "16",
        "--shard-bytes",
        "64",
        "--force",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("c.jsonl.gz") && e.contains("gzip"), "{e}");
    // An unknown extension, an empty directory, a glob matching nothing: usage errors.
    let empty = t.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(t.path().join("notes.docx"), "x").unwrap();
    for bad in [
        t.path().join("notes.docx").display().to_string(),
        empty.display().to_string(),
        format!("{}/*.parquet", empty.display()),
    ] {
        let o = pack(&[
            "--input",
            &bad,
            "--tokenizer",
            tok.to_str().unwrap(),
            "--out",
            t.path().join("o2").to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
    }
}

#[test]
fn own_data_is_strict_about_text_fields() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let dir = t.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.jsonl"), jsonl(&docs(1, 4))).unwrap();
    // A file whose rows hold the text under another name.
    let content: String = docs(2, 3)
        .iter()
        .map(|d| serde_json::json!({ "id": 1, "content": d }).to_string() + "\n")
        .collect();
    std::fs::write(dir.join("b.jsonl"), content).unwrap();
    let run = |extra: &[&str], out: &str| {
        let out = t.path().join(out);
        let mut a = vec![
            "--input",
            dir.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--seq-len",
            "16",
        ];
        a.extend_from_slice(extra);
        let o = pack(&[&a[..], &["--out", out.to_str().unwrap()]].concat());
        (o, out)
    };
    // `--text-column body` on files whose field is `text`: an error, not 0 rows and exit 0.
    let (o, _) = run(&["--text-column", "body"], "o1");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("a.jsonl: row 0: no field \"body\" (fields present: \"text\")"),
        "{e}"
    );
    // A directory mixing `text` and `content` files: the `content` one is named.
    let (o, _) = run(&[], "o2");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o)
            .contains("b.jsonl: row 0: no field \"text\" (fields present: \"id\", \"content\")"),
        "{}",
        stderr(&o)
    );
    // Skipped and counted with the policy; per-input documents in index.json and --json.
    let (o, out) = run(&["--on-missing-text", "skip", "--json"], "o3");
    ok(&o);
    let idx = index(&out);
    assert_eq!(idx["totals"]["skipped_missing_text"], 3);
    assert_eq!(idx["totals"]["documents"], 4);
    let summary: serde_json::Value = serde_json::from_slice(o.stdout.trim_ascii()).unwrap();
    let inputs = summary["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 2);
    assert_eq!(inputs[0]["documents"], 4);
    assert_eq!(inputs[1]["documents"], 0);
    assert!(inputs[1]["file"].as_str().unwrap().ends_with("b.jsonl"));
    assert!(
        stderr(&o).contains("b.jsonl: contributed 0 documents"),
        "{}",
        stderr(&o)
    );
    // A number where text should be: refused naming the row and field, as for parquet.
    std::fs::remove_file(dir.join("b.jsonl")).unwrap();
    std::fs::write(dir.join("c.jsonl"), "{\"text\": \"fine\"}\n{\"text\": 5}\n").unwrap();
    let (o, _) = run(&[], "o4");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("c.jsonl: row 1: field \"text\" is a number, not text"),
        "{}",
        stderr(&o)
    );
}

/// Issue 41: `--strict` makes the warnings a nightly job wants fatal — here an input that
/// contributed 0 documents and rows skipped for a missing text field — exit 1 naming each,
/// before index.json is marked complete; the same run without it completes with warnings.
#[test]
fn strict_makes_a_zero_document_input_an_error_before_completion() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let dir = t.path().join("in");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.jsonl"), jsonl(&docs(1, 4))).unwrap();
    let content: String = docs(2, 3)
        .iter()
        .map(|d| serde_json::json!({ "content": d }).to_string() + "\n")
        .collect();
    std::fs::write(dir.join("b.jsonl"), content).unwrap();
    let out = t.path().join("out");
    let args = |extra: &[&'static str]| {
        let mut a: Vec<String> = [
            "--input",
            dir.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--seq-len",
            "16",
            "--on-missing-text",
            "skip",
            "--out",
            out.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    let a = args(&["--strict"]);
    let o = pack(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(e.contains("--strict: 2 problem(s)"), "{e}");
    assert!(e.contains("b.jsonl: contributed 0 documents"), "{e}");
    assert!(e.contains("3 rows had no text field"), "{e}");
    // Never marked complete (the journal of shards so far may be there, for a resume).
    if out.join("index.json").exists() {
        assert_eq!(index(&out)["complete"], false);
    }
    // Without --strict: the same output completes (resuming), the warnings stay warnings.
    let a = args(&[]);
    let o = pack(&a.iter().map(String::as_str).collect::<Vec<_>>());
    ok(&o);
    assert_eq!(index(&out)["complete"], true);
    assert!(stderr(&o).contains("b.jsonl: contributed 0 documents"));
}

#[test]
fn text_escapes_read_as_pack_md_writes_them() {
    let t = tempfile::tempdir().unwrap();
    let tok = tokenizer(t.path());
    let rows: Vec<(String, String)> = docs(3, 12)
        .into_iter()
        .enumerate()
        .map(|(i, b)| (format!("Title {i}"), b))
        .collect();
    let mut text = String::new();
    for (ti, b) in &rows {
        text += &serde_json::json!({"title": ti, "body": b}).to_string();
        text.push('\n');
    }
    let input = t.path().join("a.jsonl");
    std::fs::write(&input, text).unwrap();
    let out = t.path().join("out");
    // As typed in a shell: a backslash and an `n`, not a newline.
    ok(&pack(&[
        "--input",
        input.to_str().unwrap(),
        "--text",
        r"{title}\n\n{body}\t.",
        "--tokenizer",
        tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "16",
    ]));
    let want: Vec<String> = rows
        .iter()
        .map(|(ti, b)| format!("{ti}\n\n{b}\t."))
        .collect();
    let got = parquet_rows(&out);
    assert_eq!(got.concat(), expected_stream(&tok, &want)[..got.len() * 16]);
}
