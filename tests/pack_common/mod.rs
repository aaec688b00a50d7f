//! Shared helpers for the pack integration tests: fixture tokenizer, generated corpora in
//! parquet, running the binary, the Python reader check.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, StructArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dlm-data")
}

/// The fixture tokenizer directory (tokenizer.json + tokenizer_config.json).
pub fn tokenizer(dir: &Path) -> PathBuf {
    let d = dir.join("tok");
    dlm_data::fixtures::tokenizer::write_tokenizer(&d).unwrap();
    d
}

/// `n` generated documents with some variety (long/short, unicode, blank lines).
pub fn docs(seed: u64, n: usize) -> Vec<String> {
    let mut rng = dlm_data::util::SplitMix(seed);
    (0..n)
        .map(|i| {
            let k = 1 + rng.below(if i % 17 == 0 { 40 } else { 6 }) as usize;
            let mut t = dlm_data::fixtures::text::paragraph(&mut rng, k);
            if i % 5 == 0 {
                t.push_str("\n\n  Naïve café — “quoted” it's 1,234.5\tdone.  ");
            }
            t
        })
        .collect()
}

/// A parquet file with `text` among other columns (text not first, like cosmopedia).
pub fn write_parquet(path: &Path, texts: &[Option<String>], row_group: usize) {
    let n = texts.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("text", DataType::Utf8, true),
    ]));
    let ids: ArrayRef = Arc::new(Int64Array::from((0..n as i64).collect::<Vec<_>>()));
    let txt: ArrayRef = Arc::new(StringArray::from(texts.to_vec()));
    let rb = RecordBatch::try_new(schema.clone(), vec![ids, txt]).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(row_group))
        .build();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, schema, Some(props)).unwrap();
    w.write(&rb).unwrap();
    w.close().unwrap();
}

/// MMLU auxiliary_train style: a single struct column `train` {answer, question}.
pub fn write_struct_parquet(path: &Path, questions: &[String]) {
    let q: ArrayRef = Arc::new(StringArray::from(questions.to_vec()));
    let a: ArrayRef = Arc::new(Int64Array::from(vec![1i64; questions.len()]));
    let st = StructArray::from(vec![
        (Arc::new(Field::new("answer", DataType::Int64, false)), a),
        (Arc::new(Field::new("question", DataType::Utf8, true)), q),
    ]);
    let schema = Arc::new(Schema::new(vec![Field::new(
        "train",
        st.data_type().clone(),
        false,
    )]));
    let rb = RecordBatch::try_new(schema.clone(), vec![Arc::new(st) as ArrayRef]).unwrap();
    let f = std::fs::File::create(path).unwrap();
    let mut w = ArrowWriter::try_new(f, schema, None).unwrap();
    w.write(&rb).unwrap();
    w.close().unwrap();
}

/// `pack --input INPUT --tokenizer TOK --out OUT` then `extra`: the command line every pack
/// test starts from.
pub fn pack_args(input: &Path, tok: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut a: Vec<String> = ["pack", "--input"].map(String::from).to_vec();
    a.push(input.display().to_string());
    a.push("--tokenizer".into());
    a.push(tok.display().to_string());
    a.push("--out".into());
    a.push(out.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

/// [`pack_args`] as a command (for a spawned, killed or throttled run).
pub fn pack_cmd(input: &Path, tok: &Path, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(bin());
    c.args(pack_args(input, tok, out, extra));
    c
}

/// [`run`] [`pack_args`] with `env`.
pub fn run_pack(
    input: &Path,
    tok: &Path,
    out: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let a = pack_args(input, tok, out, extra);
    run(&a.iter().map(String::as_str).collect::<Vec<_>>(), env)
}

pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

pub fn ok(o: &Output) {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// All files of a directory (recursively) → bytes, for byte-identity checks.
pub fn tree(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    fn walk(base: &Path, d: &Path, m: &mut std::collections::BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(base, &p, m);
            } else {
                m.insert(
                    p.strip_prefix(base).unwrap().display().to_string(),
                    std::fs::read(&p).unwrap(),
                );
            }
        }
    }
    let mut m = std::collections::BTreeMap::new();
    walk(dir, dir, &mut m);
    m
}

/// The dlm-data index object of an output (either layout).
pub fn index(dir: &Path) -> serde_json::Value {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("index.json")).unwrap()).unwrap();
    match v.get("dlm_data") {
        Some(x) => x.clone(),
        None => v,
    }
}

/// Run tests/py/check_pack.py; `false` (with a loud message) when DLM_PYTHON is unset.
pub fn python_check(out: &Path, tok_dir: &Path, docs: &[String], format: &str) -> bool {
    let Ok(py) = std::env::var("DLM_PYTHON") else {
        eprintln!(
            "\n*** SKIPPED the Python reader check: DLM_PYTHON is not set (make test sets it) ***\n"
        );
        return false;
    };
    let docs_path = out.with_extension("docs.json");
    std::fs::write(&docs_path, serde_json::to_string(docs).unwrap()).unwrap();
    let o = Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/py/check_pack.py"
        ))
        .arg(out)
        .arg(tok_dir.join("tokenizer.json"))
        .arg(&docs_path)
        .arg(format)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "python check failed:\n{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("ok "));
    if format == "parquet" {
        // The output's data/ directory, read whole as a dataset (no file names).
        let o = Command::new(std::env::var("DLM_PYTHON").unwrap())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/py/check_dataset_dir.py"
            ))
            .arg(out)
            .output()
            .unwrap();
        let so = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success() && so.contains("pq.read_table, pyarrow.dataset"),
            "dataset-directory check failed:\n{so}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        eprintln!("{}", so.trim());
    }
    if format == "mds" && std::env::var_os("DLM_REQUIRE_STREAMING").is_some() {
        assert!(
            stdout.contains("read with streaming.StreamingDataset"),
            "DLM_REQUIRE_STREAMING is set but the MDS check did not use StreamingDataset:\n{stdout}"
        );
    }
    true
}

/// Expected token stream (ids + EOS per document) from the Rust `tokenizers` crate.
pub fn expected_stream(tok_dir: &Path, docs: &[String]) -> Vec<u32> {
    let t = tokenizers::Tokenizer::from_file(tok_dir.join("tokenizer.json")).unwrap();
    let eos = t
        .token_to_id(dlm_data::fixtures::tokenizer::MC5_EOS)
        .unwrap();
    let mut v = Vec::new();
    for d in docs {
        v.extend(t.encode(d.as_str(), false).unwrap().get_ids());
        v.push(eos);
    }
    v
}

/// All `input_ids` of the parquet shards (`OUT/data/`), in file-name order.
pub fn parquet_rows(out: &Path) -> Vec<Vec<u32>> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::UInt32Type;
    let mut files: Vec<PathBuf> = std::fs::read_dir(out.join("data"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    let mut rows = Vec::new();
    for f in files {
        let r = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(f).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        for b in r {
            let b = b.unwrap();
            let l = b.column_by_name("input_ids").unwrap().as_list::<i32>();
            for i in 0..l.len() {
                rows.push(l.value(i).as_primitive::<UInt32Type>().values().to_vec());
            }
        }
    }
    rows
}
