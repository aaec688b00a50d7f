//! `dlm-data pack` inputs: the manifest path (lock + cache, four formats incl. nested struct
//! fields, JSON array, JSONL, the `-` filter), mixing and budgets, the split policy, worker
//! parts that merge exactly, and bad input (truncated parquet, missing column, invalid UTF-8,
//! malformed JSON, a 100 MB document) failing clearly with nothing marked complete.

mod pack_common;

use std::io::Write;
use std::path::{Path, PathBuf};

use dlm_data::hub::cache::Cache;
use dlm_data::manifest::{Lock, LockedFile, LockedSource, Role};
use pack_common::*;

const C1: &str = "1111111111111111111111111111111111111111";
const C2: &str = "2222222222222222222222222222222222222222";
const C3: &str = "3333333333333333333333333333333333333333";
const C4: &str = "4444444444444444444444444444444444444444";

struct Fixture {
    dir: tempfile::TempDir,
    tok: PathBuf,
    manifest: PathBuf,
    cache: PathBuf,
    /// (source, file) → documents in row order.
    docs: std::collections::HashMap<(String, String), Vec<String>>,
    filtered: usize,
}

fn locked(cache: &Cache, repo: &str, commit: &str, path: &str, bytes: &[u8]) -> LockedFile {
    let p = cache.snapshot_path(Role::Train, repo, commit, path);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(&p, bytes).unwrap();
    LockedFile {
        path: path.into(),
        size: bytes.len() as u64,
        sha256: dlm_data::util::sha256_hex(bytes),
        git_oid: None,
    }
}

fn fixture(weights: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path());
    let cache_root = dir.path().join("cache");
    let cache = Cache {
        root: cache_root.clone(),
    };
    let mut docs = std::collections::HashMap::new();
    let mut lock = Lock {
        version: 1,
        sources: vec![],
    };
    // web: two parquet files.
    let mut files = vec![];
    for (k, name) in ["sample/000.parquet", "sample/001.parquet"]
        .iter()
        .enumerate()
    {
        let d = pack_common::docs(100 + k as u64, 60 + 20 * k);
        let tmp = dir.path().join("tmp.parquet");
        write_parquet(&tmp, &d.iter().cloned().map(Some).collect::<Vec<_>>(), 16);
        files.push(locked(
            &cache,
            "o/web",
            C1,
            name,
            &std::fs::read(&tmp).unwrap(),
        ));
        docs.insert(("web".to_string(), name.to_string()), d);
    }
    lock.sources.push(LockedSource {
        name: "web".into(),
        repo: "o/web".into(),
        revision: "main".into(),
        commit: C1.into(),
        config: "default".into(),
        split: "train".into(),
        role: Role::Train,
        files,
    });
    // math: one JSON array, MetaMathQA fields.
    let qa: Vec<(String, String)> = pack_common::docs(200, 40)
        .chunks(2)
        .map(|c| (c[0].clone(), c[1].clone()))
        .collect();
    let arr: Vec<serde_json::Value> = qa
        .iter()
        .map(|(q, r)| serde_json::json!({"query": q, "response": r, "type": "GSM_AnsAug"}))
        .collect();
    let f = locked(
        &cache,
        "meta-math/MetaMathQA",
        C2,
        "MetaMathQA-395K.json",
        serde_json::to_string_pretty(&arr).unwrap().as_bytes(),
    );
    docs.insert(
        ("math".into(), "MetaMathQA-395K.json".into()),
        qa.iter().map(|(q, r)| format!("{q}\n\n{r}")).collect(),
    );
    lock.sources.push(LockedSource {
        name: "math".into(),
        repo: "meta-math/MetaMathQA".into(),
        revision: "main".into(),
        commit: C2.into(),
        config: "default".into(),
        split: "train".into(),
        role: Role::Train,
        files: vec![f],
    });
    // code: JSONL with input "-" rows filtered.
    let mut lines = String::new();
    let mut code_docs = vec![];
    let mut filtered = 0;
    for (i, t) in pack_common::docs(300, 30).iter().enumerate() {
        let input = if i % 4 == 1 {
            "-".to_string()
        } else {
            format!("Problem {i}: {t}")
        };
        if input == "-" {
            filtered += 1;
        } else {
            code_docs.push(format!("{input}\n\ndef f(): return {i}"));
        }
        lines.push_str(
            &serde_json::json!({"id": i, "input": input, "output": format!("def f(): return {i}")})
                .to_string(),
        );
        lines.push('\n');
    }
    let f = locked(
        &cache,
        "nvidia/OCR",
        C3,
        "split_0/train-00000-of-00001.jsonl",
        lines.as_bytes(),
    );
    docs.insert(
        ("code".into(), "split_0/train-00000-of-00001.jsonl".into()),
        code_docs,
    );
    lock.sources.push(LockedSource {
        name: "code".into(),
        repo: "nvidia/OCR".into(),
        revision: "main".into(),
        commit: C3.into(),
        config: "split_0".into(),
        split: "split_0".into(),
        role: Role::Train,
        files: vec![f],
    });
    // mmlu: a struct column.
    let qs = pack_common::docs(400, 25);
    let tmp = dir.path().join("tmp2.parquet");
    write_struct_parquet(&tmp, &qs);
    let f = locked(
        &cache,
        "cais/mmlu",
        C4,
        "auxiliary_train/train-00000-of-00001.parquet",
        &std::fs::read(&tmp).unwrap(),
    );
    docs.insert(
        (
            "mmlu".into(),
            "auxiliary_train/train-00000-of-00001.parquet".into(),
        ),
        qs,
    );
    lock.sources.push(LockedSource {
        name: "mmlu".into(),
        repo: "cais/mmlu".into(),
        revision: "main".into(),
        commit: C4.into(),
        config: "auxiliary_train".into(),
        split: "train".into(),
        role: Role::Train,
        files: vec![f],
    });
    let w = |x: f64| {
        if weights {
            format!("weight = {x}\n")
        } else {
            String::new()
        }
    };
    let manifest = dir.path().join("m.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[source]]\nname='web'\nrepo='o/web'\nrevision='main'\nsplit='train'\nformat='parquet'\ntext='{{text}}'\n{}\
             [[source]]\nname='math'\nrepo='meta-math/MetaMathQA'\nrevision='main'\nsplit='train'\nformat='json'\ntext=\"{{query}}\\n\\n{{response}}\"\n{}\
             [[source]]\nname='code'\nrepo='nvidia/OCR'\nrevision='main'\nconfig='split_0'\nsplit='split_0'\nformat='jsonl'\ntext=\"{{input}}\\n\\n{{output}}\"\n{}\
             [[source]]\nname='mmlu'\nrepo='cais/mmlu'\nrevision='main'\nconfig='auxiliary_train'\nsplit='train'\nformat='parquet'\ntext='{{train.question}}'\n{}",
            w(0.6),
            w(0.2),
            w(0.1),
            w(0.1)
        ),
    )
    .unwrap();
    lock.save(&manifest.with_extension("lock")).unwrap();
    Fixture {
        dir,
        tok,
        manifest,
        cache: cache_root,
        docs,
        filtered,
    }
}

fn pack_manifest(f: &Fixture, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut a = vec![
        "pack",
        "--manifest",
        f.manifest.to_str().unwrap(),
        "--cache",
        f.cache.to_str().unwrap(),
        "--tokenizer",
        f.tok.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--seq-len",
        "32",
        "--shard-bytes",
        "4KiB",
    ];
    a.extend_from_slice(extra);
    run(&a, &[])
}

/// Documents in the order the index's provenance lists the files.
fn docs_in_order(f: &Fixture, idx: &serde_json::Value) -> Vec<String> {
    let mut v = vec![];
    for p in idx["provenance"].as_array().unwrap() {
        let key = (
            p["source"].as_str().unwrap().to_string(),
            p["file"].as_str().unwrap().to_string(),
        );
        v.extend(f.docs[&key].iter().cloned());
    }
    v
}

#[test]
fn manifest_sources_in_all_formats_with_provenance() {
    let f = fixture(true);
    let out = f.dir.path().join("out");
    let o = pack_manifest(&f, &out, &[]);
    ok(&o);
    let idx = index(&out);
    let prov = idx["provenance"].as_array().unwrap();
    assert_eq!(prov.len(), 5, "every locked file once");
    let sources: Vec<&str> = prov.iter().map(|p| p["source"].as_str().unwrap()).collect();
    // Weighted interleave: web (0.6) first, the others before web's second file ends.
    assert_eq!(sources[0], "web");
    assert_ne!(sources[1], "web");
    for p in prov {
        let repo = p["repo"].as_str().unwrap();
        let commit = p["commit"].as_str().unwrap();
        assert_eq!(commit.len(), 40, "{repo}");
        assert_eq!(p["role"], "train");
    }
    assert_eq!(idx["totals"]["skipped_filtered"], f.filtered);
    assert_eq!(idx["manifest"], f.manifest.display().to_string());
    assert_eq!(
        idx["lock_sha256"],
        dlm_data::util::sha256_file(&f.manifest.with_extension("lock")).unwrap()
    );
    let docs = docs_in_order(&f, &idx);
    assert_eq!(idx["totals"]["documents"], docs.len());
    let stream = expected_stream(&f.tok, &docs);
    let rows = parquet_rows(&out);
    assert_eq!(rows.concat(), stream[..rows.len() * 32]);
    python_check(&out, &f.tok, &docs, "parquet");
}

#[test]
fn token_budget_splits_by_weight() {
    let f = fixture(true);
    let out = f.dir.path().join("out");
    ok(&pack_manifest(&f, &out, &["--tokens", "3000"]));
    let idx = index(&out);
    let by = &idx["totals"]["tokens_by_source"];
    let web = by["web"].as_u64().unwrap();
    let math = by["math"].as_u64().unwrap();
    // 60% of 3000 = 1800 for web; it stops at the first document past its budget.
    assert!((1800..1800 + 1200).contains(&web), "{web}");
    assert!((600..600 + 600).contains(&math), "{math}");
    // Tiny batches cut into tiny chunks, several in flight on 3 threads: chunks of a batch
    // that start after a source's budget is spent are skipped, and the result is the same.
    let small = f.dir.path().join("small");
    let mut a = vec!["pack", "--manifest", f.manifest.to_str().unwrap()];
    a.extend([
        "--cache",
        f.cache.to_str().unwrap(),
        "--tokenizer",
        f.tok.to_str().unwrap(),
    ]);
    a.extend([
        "--out",
        small.to_str().unwrap(),
        "--seq-len",
        "32",
        "--shard-bytes",
        "4KiB",
    ]);
    a.extend(["--tokens", "3000"]);
    let env = [
        ("RAYON_NUM_THREADS", "3"),
        ("DLM_PACK_BATCH_KB", "1"),
        ("DLM_PACK_CHUNK_KB", "1"),
        ("DLM_PACK_AHEAD", "2"),
    ];
    ok(&run(&a, &env));
    assert_eq!(index(&small)["totals"], idx["totals"]);
    assert_eq!(parquet_rows(&small), parquet_rows(&out));
}

#[test]
fn eval_splits_and_roles_are_refused() {
    let f = fixture(false);
    let text = std::fs::read_to_string(&f.manifest).unwrap();
    // A test split.
    std::fs::write(
        &f.manifest,
        text.replacen("split='train'", "split='test'", 1),
    )
    .unwrap();
    let o = pack_manifest(&f, &f.dir.path().join("o1"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("evaluation split"));
    // An eval-reference source.
    std::fs::write(
        &f.manifest,
        text.replacen(
            "format='parquet'",
            "format='parquet'\nrole='eval-reference'",
            1,
        ),
    )
    .unwrap();
    let o = pack_manifest(&f, &f.dir.path().join("o2"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("eval-reference"));
    // A locked file that looks like an eval file.
    std::fs::write(&f.manifest, &text).unwrap();
    let lp = f.manifest.with_extension("lock");
    let lock = std::fs::read_to_string(&lp).unwrap();
    std::fs::write(
        &lp,
        lock.replace("sample/001.parquet", "sample/validation-001.parquet"),
    )
    .unwrap();
    let o = pack_manifest(&f, &f.dir.path().join("o3"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("validation-001"));
}

#[test]
fn missing_cache_file_names_it_and_suggests_fetch() {
    let f = fixture(false);
    let p = Cache {
        root: f.cache.clone(),
    }
    .snapshot_path(
        Role::Train,
        "meta-math/MetaMathQA",
        C2,
        "MetaMathQA-395K.json",
    );
    std::fs::remove_file(&p).unwrap();
    let o = pack_manifest(&f, &f.dir.path().join("o"), &[]);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("MetaMathQA-395K.json") && e.contains("dlm-data fetch"),
        "{e}"
    );
}

#[test]
fn worker_parts_concatenate_to_the_single_process_stream() {
    let f = fixture(false);
    let whole = f.dir.path().join("whole");
    ok(&pack_manifest(&f, &whole, &[]));
    let out = f.dir.path().join("par");
    for w in ["0/2", "1/2"] {
        ok(&pack_manifest(&f, &out, &["--shard", w]));
    }
    let parts = [
        out.join("parts/00000-of-00002"),
        out.join("parts/00001-of-00002"),
    ];
    let part_rows: Vec<Vec<Vec<u32>>> = parts.iter().map(|p| parquet_rows(p)).collect();
    let part_idx: Vec<serde_json::Value> = parts.iter().map(|p| index(p)).collect();
    let units = part_idx[0]["units"].as_array().unwrap();
    let mut stream = vec![];
    for u in units {
        let owner = u["owner"].as_u64().unwrap() as usize;
        let prov = part_idx[owner]["provenance"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["file"] == u["file"])
            .unwrap();
        let (a, b) = (
            prov["out_row_start"].as_u64().unwrap() as usize,
            prov["out_row_end"].as_u64().unwrap() as usize,
        );
        for r in &part_rows[owner][a..b] {
            stream.extend_from_slice(r);
        }
    }
    let single = parquet_rows(&whole).concat();
    assert_eq!(stream[..single.len()], single[..]);
    assert_eq!(
        stream.len() as u64 - single.len() as u64,
        index(&whole)["totals"]["dropped_tail_tokens"]
            .as_u64()
            .unwrap()
    );
    // Budgets are refused with --shard.
    let o = pack_manifest(
        &f,
        &f.dir.path().join("x"),
        &["--shard", "0/2", "--tokens", "1M"],
    );
    assert_eq!(o.status.code(), Some(2));
}

fn assert_failed_cleanly(o: &std::process::Output, out: &Path, needles: &[&str]) {
    assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
    let e = stderr(o);
    for n in needles {
        assert!(e.contains(n), "missing {n:?} in: {e}");
    }
    if out.join("index.json").exists() {
        assert_eq!(index(out)["complete"], false);
    }
}

fn pack_input(d: &Path, input: &Path, extra: &[&str]) -> (std::process::Output, PathBuf) {
    let tok = d.join("tok");
    if !tok.exists() {
        tokenizer(d);
    }
    let out = d.join(format!(
        "out-{}",
        input.file_name().unwrap().to_string_lossy()
    ));
    let mut a = vec!["--seq-len", "16"];
    a.extend_from_slice(extra);
    (run_pack(input, &tok, &out, &a, &[]), out)
}

#[test]
fn bad_parquet_inputs() {
    let d = tempfile::tempdir().unwrap();
    // Truncated.
    let good = d.path().join("good.parquet");
    let texts: Vec<Option<String>> = docs(1, 50).into_iter().map(Some).collect();
    write_parquet(&good, &texts, 10);
    let bytes = std::fs::read(&good).unwrap();
    let trunc = d.path().join("trunc.parquet");
    std::fs::write(&trunc, &bytes[..bytes.len() / 2]).unwrap();
    let (o, out) = pack_input(d.path(), &trunc, &[]);
    assert_failed_cleanly(&o, &out, &["trunc.parquet", "not a readable parquet file"]);
    // Missing column.
    let (o, out) = pack_input(d.path(), &good, &["--text-column", "content"]);
    assert_failed_cleanly(
        &o,
        &out,
        &["good.parquet", "missing column \"content\"", "id, text"],
    );
    // Invalid UTF-8 in row 37.
    let bad = d.path().join("utf8.parquet");
    {
        use parquet::data_type::{ByteArray, ByteArrayType};
        use parquet::file::writer::SerializedFileWriter;
        let schema = std::sync::Arc::new(
            parquet::schema::parser::parse_message_type(
                "message m { required binary text (UTF8); }",
            )
            .unwrap(),
        );
        let mut w = SerializedFileWriter::new(
            std::fs::File::create(&bad).unwrap(),
            schema,
            Default::default(),
        )
        .unwrap();
        let mut rg = w.next_row_group().unwrap();
        let mut col = rg.next_column().unwrap().unwrap();
        let vals: Vec<ByteArray> = (0..60)
            .map(|i| {
                if i == 37 {
                    ByteArray::from(vec![b'o', 0xff, 0xfe, b'k'])
                } else {
                    ByteArray::from(format!("document {i}").as_str())
                }
            })
            .collect();
        col.typed::<ByteArrayType>()
            .write_batch(&vals, None, None)
            .unwrap();
        col.close().unwrap();
        rg.close().unwrap();
        w.close().unwrap();
    }
    let (o, out) = pack_input(d.path(), &bad, &[]);
    assert_failed_cleanly(&o, &out, &["utf8.parquet", "row 37"]);
    // A page parquet-rs panics on (the fuzzer's corpus input): an error naming the file, exit
    // 1, and no "panicked" line from the hook on stderr.
    let corrupt = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus/parquet_footer/byte-array-page-div-by-zero.parquet");
    let (o, out) = pack_input(d.path(), &corrupt, &[]);
    assert_failed_cleanly(
        &o,
        &out,
        &["byte-array-page-div-by-zero.parquet", "corrupt file"],
    );
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
}

#[test]
fn bad_json_inputs() {
    let d = tempfile::tempdir().unwrap();
    let arr = d.path().join("arr.json");
    std::fs::write(
        &arr,
        "[{\"text\": \"one\"},\n {\"text\": \"two\"},\n {\"text\": \"three\",, }\n]",
    )
    .unwrap();
    let (o, out) = pack_input(d.path(), &arr, &[]);
    assert_failed_cleanly(&o, &out, &["arr.json", "row 2", "malformed JSON", "line 3"]);

    let jl = d.path().join("lines.jsonl");
    std::fs::write(
        &jl,
        "{\"text\": \"a\"}\n{\"text\": \"b\"}\n{\"text\": \"c\"\n",
    )
    .unwrap();
    let (o, out) = pack_input(d.path(), &jl, &[]);
    assert_failed_cleanly(&o, &out, &["lines.jsonl", "row 2", "line 3"]);

    let inv = d.path().join("inv.jsonl");
    let mut bytes = b"{\"text\": \"a\"}\n{\"text\": \"b".to_vec();
    bytes.extend_from_slice(&[0xc3, 0x28]);
    bytes.extend_from_slice(b"\"}\n");
    std::fs::write(&inv, bytes).unwrap();
    let (o, out) = pack_input(d.path(), &inv, &[]);
    assert_failed_cleanly(&o, &out, &["inv.jsonl", "row 1"]);
}

#[test]
fn a_100_mb_document_fails_by_policy_or_is_skipped_and_counted() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("big.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        writeln!(f, "{{\"text\": \"small one\"}}").unwrap();
        write!(f, "{{\"text\": \"").unwrap();
        let chunk = "word ".repeat(1 << 16);
        for _ in 0..(100 << 20) / chunk.len() {
            f.write_all(chunk.as_bytes()).unwrap();
        }
        writeln!(f, "\"}}").unwrap();
        writeln!(f, "{{\"text\": \"small two\"}}").unwrap();
    }
    // By default the 100 MB line is longer than any row is read (--max-row-bytes, 64 MiB):
    // the run ends naming the file, the row and the flag, having read no more than that.
    let (o, out) = pack_input(d.path(), &p, &[]);
    assert_failed_cleanly(&o, &out, &["big.jsonl", "row 1", "--max-row-bytes"]);
    std::fs::remove_dir_all(&out).unwrap();
    // Rows that long allowed: the document policy decides (fail names both flags) ...
    let (o, out) = pack_input(d.path(), &p, &["--max-row-bytes", "256MiB"]);
    assert_failed_cleanly(
        &o,
        &out,
        &["big.jsonl", "row 1", "--max-doc-bytes", "--on-oversize"],
    );
    std::fs::remove_dir_all(&out).unwrap();
    // ... or skips and counts it.
    let (o, out) = pack_input(
        d.path(),
        &p,
        &[
            "--max-row-bytes",
            "256MiB",
            "--on-oversize",
            "skip",
            "--pad-last",
        ],
    );
    ok(&o);
    let idx = index(&out);
    assert_eq!(idx["totals"]["skipped_oversize"], 1);
    assert_eq!(idx["totals"]["documents"], 2);
}

/// A one-column parquet file of `array` named `text`.
fn write_column(path: &Path, array: arrow::array::ArrayRef) {
    use arrow::datatypes::{Field, Schema};
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new(
        "text",
        array.data_type().clone(),
        true,
    )]));
    let rb = arrow::array::RecordBatch::try_new(schema.clone(), vec![array]).unwrap();
    let mut w =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), schema, None)
            .unwrap();
    w.write(&rb).unwrap();
    w.close().unwrap();
}

/// Only text is packed as text: an int64 or list<string> column is refused naming the column
/// and its type; a binary column is read as UTF-8 and its first invalid row is named (it was
/// silently counted as "filtered").
#[test]
fn non_text_columns_and_invalid_binary_are_named() {
    use arrow::array::{ArrayRef, BinaryArray, Int64Array, ListBuilder, StringBuilder};
    use std::sync::Arc;
    let d = tempfile::tempdir().unwrap();
    let ints = d.path().join("ints.parquet");
    write_column(
        &ints,
        Arc::new(Int64Array::from(vec![1i64, 2, 3])) as ArrayRef,
    );
    let (o, out) = pack_input(d.path(), &ints, &[]);
    assert_failed_cleanly(&o, &out, &["ints.parquet", "\"text\"", "Int64", "not text"]);

    let lists = d.path().join("lists.parquet");
    let mut b = ListBuilder::new(StringBuilder::new());
    for _ in 0..3 {
        b.values().append_value("a");
        b.values().append_value("b");
        b.append(true);
    }
    write_column(&lists, Arc::new(b.finish()) as ArrayRef);
    let (o, out) = pack_input(d.path(), &lists, &[]);
    assert_failed_cleanly(&o, &out, &["lists.parquet", "\"text\"", "List", "not text"]);

    // Binary: valid UTF-8 is packed like a string column ...
    let good: Vec<Vec<u8>> = (0..40)
        .map(|i| format!("binary document {i}").into_bytes())
        .collect();
    let bin_ok = d.path().join("bin-ok.parquet");
    write_column(
        &bin_ok,
        Arc::new(BinaryArray::from_iter_values(good.iter())) as ArrayRef,
    );
    let (o, out) = pack_input(d.path(), &bin_ok, &[]);
    ok(&o);
    assert_eq!(index(&out)["totals"]["documents"], 40);
    assert_eq!(index(&out)["totals"]["skipped_filtered"], 0);
    // ... and an invalid value is named by row, not filtered.
    let mut bad = good.clone();
    bad[29] = vec![b'x', 0xff, 0xfe];
    let bin_bad = d.path().join("bin-bad.parquet");
    write_column(
        &bin_bad,
        Arc::new(BinaryArray::from_iter_values(bad.iter())) as ArrayRef,
    );
    let (o, out) = pack_input(d.path(), &bin_bad, &[]);
    assert_failed_cleanly(&o, &out, &["bin-bad.parquet", "row 29", "invalid UTF-8"]);
}

/// One huge "word" (no whitespace) is what amplifies the tokenizer's memory (~75x its bytes):
/// a document with a run longer than --max-word-bytes is oversized — refused naming file and
/// row, or skipped and counted — while ordinary long text under the limits packs.
#[test]
fn a_single_huge_word_is_bounded_by_max_word_bytes() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("word.jsonl");
    let word = "a".repeat(3 << 20);
    std::fs::write(
        &p,
        format!("{{\"text\": \"small one\"}}\n{{\"text\": \"x {word} y\"}}\n{{\"text\": \"small two\"}}\n"),
    )
    .unwrap();
    let (o, out) = pack_input(d.path(), &p, &[]);
    assert_failed_cleanly(
        &o,
        &out,
        &[
            "word.jsonl",
            "row 1",
            "--max-word-bytes",
            "3145728-byte run",
        ],
    );
    std::fs::remove_dir_all(&out).unwrap();
    let (o, out) = pack_input(d.path(), &p, &["--on-oversize", "skip", "--pad-last"]);
    ok(&o);
    assert_eq!(index(&out)["totals"]["skipped_oversize"], 1);
    assert_eq!(index(&out)["totals"]["documents"], 2);
    // A lower limit applies to ordinary words too; a higher one lets the word through.
    std::fs::remove_dir_all(&out).unwrap();
    let (o, _) = pack_input(d.path(), &p, &["--max-word-bytes", "4"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("row 0"), "{}", stderr(&o));
}

/// The fixture's manifest with `code` given `extra` keys (e.g. `epochs = 3`).
fn with_code_keys(f: &Fixture, extra: &str) {
    let text = std::fs::read_to_string(&f.manifest).unwrap();
    let marker = "[[source]]\nname='code'\n";
    assert!(text.contains(marker));
    std::fs::write(
        &f.manifest,
        text.replace(marker, &format!("{marker}{extra}\n")),
    )
    .unwrap();
}

#[test]
fn a_source_short_of_its_share_is_reported_refused_when_strict_and_epochs_reach_it() {
    let f = fixture(true);
    // All of `code` (weight 0.1 of 1.0), with no budget.
    let full = f.dir.path().join("full");
    ok(&pack_manifest(&f, &full, &[]));
    let code_all = index(&full)["totals"]["tokens_by_source"]["code"]
        .as_u64()
        .unwrap();
    assert!(index(&full)["totals"].get("mixture").is_none());
    // A budget asking `code` for twice what it has.
    let tokens = (20 * code_all).to_string();
    let out = f.dir.path().join("short");
    let o = pack_manifest(&f, &out, &["--tokens", &tokens, "--json"]);
    ok(&o);
    let e = stderr(&o);
    assert!(e.contains("\"code\" ran out of data"), "{e}");
    let idx = index(&out);
    assert_eq!(idx["complete"], true);
    let mix = idx["totals"]["mixture"].as_array().unwrap();
    assert_eq!(mix.len(), 4);
    let total: u64 = mix.iter().map(|m| m["tokens"].as_u64().unwrap()).sum();
    for m in mix {
        let (t, b) = (m["tokens"].as_u64().unwrap(), m["budget"].as_u64().unwrap());
        assert_eq!(m["short"], t < b, "{m}");
        let w = m["weight"].as_f64().unwrap();
        assert!(
            (m["requested_share"].as_f64().unwrap() - w).abs() < 1e-9,
            "{m}"
        );
        assert_eq!(b, (20.0 * code_all as f64 * w).round() as u64, "{m}");
        let share = m["achieved_share"].as_f64().unwrap();
        assert!((share - t as f64 / total as f64).abs() < 1e-9, "{m}");
    }
    let code = mix.iter().find(|m| m["source"] == "code").unwrap();
    assert_eq!(code["short"], true);
    assert_eq!(code["tokens"], code_all);
    assert_eq!(code["epochs"], 1);
    let summary: serde_json::Value =
        serde_json::from_slice(o.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
    assert_eq!(summary["mixture"], idx["totals"]["mixture"]);

    // --strict-mixture: an error, and the output is not marked complete.
    let strict = f.dir.path().join("strict");
    let o = pack_manifest(&f, &strict, &["--tokens", &tokens, "--strict-mixture"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("--strict-mixture"), "{}", stderr(&o));
    // It stops at the first short source whose last file is read (one of those reported).
    let short: Vec<String> = mix
        .iter()
        .filter(|m| m["short"] == true)
        .map(|m| format!("source {} ran out of data", m["source"]))
        .collect();
    assert!(
        short.iter().any(|n| stderr(&o).contains(n.as_str())),
        "{short:?}: {}",
        stderr(&o)
    );
    if strict.join("index.json").exists() {
        assert_eq!(index(&strict)["complete"], false);
    }

    // epochs = 3: `code` is read three times over and now meets its share exactly (it stops
    // at its budget like a large source); the strict run succeeds for it.
    with_code_keys(&f, "epochs = 3");
    let ep = f.dir.path().join("epochs");
    let o = pack_manifest(&f, &ep, &["--tokens", &tokens]);
    ok(&o);
    let idx = index(&ep);
    let code = idx["totals"]["mixture"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["source"] == "code")
        .unwrap()
        .clone();
    assert_eq!(code["short"], false, "{code}");
    assert_eq!(code["epochs"], 3);
    assert!(code["tokens"].as_u64().unwrap() >= code["budget"].as_u64().unwrap());
    assert!(!stderr(&o).contains("\"code\" ran out"), "{}", stderr(&o));
    // Its file appears once per epoch read (two full, one cut at the budget).
    let reads = idx["provenance"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["source"] == "code")
        .count();
    assert_eq!(reads, 3);
    // Deterministic: the same command elsewhere gives the same bytes.
    let ep2 = f.dir.path().join("epochs2");
    ok(&pack_manifest(&f, &ep2, &["--tokens", &tokens]));
    let shards = |d: &Path| {
        let mut t = tree(d);
        t.remove("index.json");
        t
    };
    assert_eq!(shards(&ep), shards(&ep2));
    // Bad epochs: a usage error naming the source.
    let text = std::fs::read_to_string(&f.manifest).unwrap();
    std::fs::write(&f.manifest, text.replace("epochs = 3", "epochs = 0")).unwrap();
    let o = pack_manifest(&f, &f.dir.path().join("bad"), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("epochs"), "{}", stderr(&o));
}
