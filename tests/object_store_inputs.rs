//! `pack --input s3://…` and `pack --input hf://datasets/…`: data read in place from a real
//! S3-compatible server on loopback (moto, tests/objstore_support) and from the hub emulator.
//! A file, a prefix, a glob and a `.jsonl.zst` object pack to the same bytes as the same files
//! packed from local disk — index.json and the card too, but for the inputs' names (the URL
//! where the local run has the path); a parquet object is read by ranged GETs of its footer
//! and projected column chunk only; a missing object or bucket fails naming it; an hf://
//! file packs as its local copy does, pinned to its commit, and an evaluation file is refused;
//! 503 SlowDown and connection resets on the inputs' GETs (through tests/objstore_support's
//! fault proxy) are retried to the same bytes; `audit --hash` finds a changed input object.

mod objstore_support;
mod pack_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use objstore_support::*;
use pack_common::*;

const BUCKET: &str = "dlm-in";
const EXTRA: &[&str] = &["--seq-len", "64", "--shard-bytes", "8KiB"];

/// `text` beside a much larger `padding` column, which a projected read never fetches.
fn write_padded_parquet(path: &Path, texts: &[String]) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("padding", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
    ]));
    let mut rng = dlm_data::util::SplitMix(99);
    let pad: Vec<String> = (0..texts.len())
        .map(|_| {
            (0..3000)
                .map(|_| (b'a' + rng.below(26) as u8) as char)
                .collect()
        })
        .collect();
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(pad)),
        Arc::new(StringArray::from(texts.to_vec())),
    ];
    let rb = RecordBatch::try_new(schema.clone(), cols).unwrap();
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(40))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(path).unwrap(),
        schema,
        Some(props),
    )
    .unwrap();
    w.write(&rb).unwrap();
    w.close().unwrap();
}

struct Fx {
    dir: tempfile::TempDir,
    tok: PathBuf,
    s3: S3Server,
}

/// `in/` holds a.parquet (padded), b.parquet, c.jsonl.zst, notes.txt (left out of a
/// directory of structured data) and a hidden file; all of it is uploaded to `s3://dlm-in/in/`.
fn fixture() -> Fx {
    let dir = tempfile::tempdir().unwrap();
    let tok = tokenizer(dir.path());
    let d = dir.path().join("in");
    std::fs::create_dir_all(&d).unwrap();
    write_padded_parquet(&d.join("a.parquet"), &docs(11, 150));
    let texts: Vec<Option<String>> = docs(12, 120).into_iter().map(Some).collect();
    write_parquet(&d.join("b.parquet"), &texts, 32);
    let lines: String = docs(13, 140)
        .iter()
        .map(|t| serde_json::json!({ "text": t }).to_string() + "\n")
        .collect();
    std::fs::write(
        d.join("c.jsonl.zst"),
        zstd::encode_all(lines.as_bytes(), 3).unwrap(),
    )
    .unwrap();
    std::fs::write(d.join("notes.txt"), "not data").unwrap();
    std::fs::write(d.join(".hidden.jsonl"), "{\"text\": \"never read\"}\n").unwrap();
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    s3.upload_dir(BUCKET, "in", &d);
    Fx { dir, tok, s3 }
}

impl Fx {
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    fn pack(&self, input: &str, out: &str, extra: &[&str]) -> Output {
        let mut c = Command::new(bin());
        c.args(pack_args(
            Path::new(input),
            &self.tok,
            &self.path(out),
            EXTRA,
        ));
        c.args(extra);
        self.s3.apply(&mut c, &self.path("staging"));
        c.output().unwrap()
    }
    /// Pack `local` (a path under the fixture) and `url`; the outputs equal but for the
    /// inputs' names: each local path `in/X` is the URL `s3://dlm-in/in/X` in the bucket run.
    /// The bucket run's `--json` summary.
    fn same_as_local(&self, local: &str, url: &str, out: &str) -> serde_json::Value {
        let lo = format!("{out}-local");
        ok(&self.pack(&self.path(local).display().to_string(), &lo, &[]));
        let o = self.pack(url, out, &["--json"]);
        ok(&o);
        let (l, r) = (tree(&self.path(&lo)), tree(&self.path(out)));
        same_shards(&l, &r);
        let local_root = std::fs::canonicalize(self.path("in")).unwrap();
        let local_names = format!("{}/", local_root.display());
        // index.json names each local input by its absolute path; the card by its name
        // under their common directory (`in/`), a URL in full.
        for (f, local_name) in [("index.json", local_names.as_str()), ("README.md", "")] {
            let lt = String::from_utf8(l[f].clone()).unwrap();
            let rt = String::from_utf8(r[f].clone()).unwrap();
            assert!(rt.contains("s3://dlm-in/in/"), "{f} names no URL:\n{rt}");
            assert!(!rt.contains(&local_names), "{f}:\n{rt}");
            let rt = rt
                .replace("s3://dlm-in/in/", local_name)
                .replace("(input files,", "(local files,");
            assert_eq!(lt, rt, "{f} differs beyond the inputs' names");
        }
        let idx = index(&self.path(out));
        for i in idx["args"]["inputs"].as_array().unwrap() {
            assert!(
                i["path"].as_str().unwrap().starts_with("s3://dlm-in/in/"),
                "{i}"
            );
            assert_eq!(i["sha256"].as_str().unwrap().len(), 64);
        }
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

#[test]
fn pack_from_an_s3_object_equals_the_local_pack_and_reads_only_the_projected_chunks() {
    let fx = fixture();
    let line = fx.same_as_local("in/a.parquet", "s3://dlm-in/in/a.parquet", "one");
    let reads = line["object_reads"].as_array().expect("object_reads");
    assert_eq!(reads.len(), 1, "{line}");
    let r = &reads[0];
    assert_eq!(r["url"], "s3://dlm-in/in/a.parquet");
    let size = std::fs::metadata(fx.path("in/a.parquet")).unwrap().len();
    assert_eq!(r["size"], size);
    let (read, requests) = (
        r["bytes_read"].as_u64().unwrap(),
        r["requests"].as_u64().unwrap(),
    );
    eprintln!("a.parquet: {read} of {size} bytes in {requests} ranged GETs");
    // The padding column is ~20 times the text: a whole-object read would be ~size.
    assert!(
        read > 0 && read * 3 < size,
        "read {read} of {size}: not a projected read"
    );
    assert!(requests >= 2, "{requests}: footer then column chunks");

    // audit finds the input objects as recorded; with --hash it re-reads them, and an object
    // changed since (same size, other bytes) fails naming its URL.
    let audit = |hash: bool| -> Output {
        let mut c = Command::new(bin());
        c.args(["audit", "--shards", fx.path("one").to_str().unwrap()]);
        if hash {
            c.arg("--hash");
        }
        fx.s3.apply(&mut c, &fx.path("staging"));
        c.output().unwrap()
    };
    ok(&audit(true));
    let mut bytes = std::fs::read(fx.path("in/a.parquet")).unwrap();
    bytes[10] ^= 0xff;
    std::fs::create_dir_all(fx.path("tampered")).unwrap();
    std::fs::write(fx.path("tampered/a.parquet"), &bytes).unwrap();
    fx.s3.upload_dir(BUCKET, "in", &fx.path("tampered"));
    ok(&audit(false));
    let o = audit(true);
    assert!(!o.status.success(), "{}", stderr(&o));
    let said = format!("{}{}", String::from_utf8_lossy(&o.stdout), stderr(&o));
    assert!(
        said.contains("s3://dlm-in/in/a.parquet has sha256"),
        "{said}"
    );
    fx.s3.upload_dir(BUCKET, "in", &fx.path("in"));

    // The same command again: complete (the inputs' sha256, from the bucket, match the
    // fingerprint), nothing read.
    let o = fx.pack("s3://dlm-in/in/a.parquet", "one", &["--json"]);
    ok(&o);
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["already_complete"], true, "{}", stderr(&o));
    // Bucket to bucket: the same shards.
    let mut c = Command::new(bin());
    c.args(pack_args(
        Path::new("s3://dlm-in/in/a.parquet"),
        &fx.tok,
        Path::new("s3://dlm-in/out/a"),
        EXTRA,
    ));
    c.arg("--json");
    fx.s3.apply(&mut c, &fx.path("staging"));
    let o = c.output().unwrap();
    ok(&o);
    let line: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["out"], "s3://dlm-in/out/a");
    assert_eq!(
        line["object_reads"][0]["url"], "s3://dlm-in/in/a.parquet",
        "{line}"
    );
    let got = fx.path("got");
    std::fs::create_dir_all(&got).unwrap();
    fx.s3.download(BUCKET, "out/a", &got);
    same_shards(&tree(&fx.path("one")), &tree(&got));

    // A compressed JSON Lines object: streamed, decompressed on the fly, read once whole.
    let line = fx.same_as_local("in/c.jsonl.zst", "s3://dlm-in/in/c.jsonl.zst", "zst");
    let r = &line["object_reads"][0];
    assert_eq!(r["bytes_read"], r["size"], "{line}");
}

#[test]
fn pack_from_an_s3_prefix_or_glob_equals_the_local_directory_or_glob() {
    let fx = fixture();
    // A prefix with or without its slash is the directory: a, b, c (not notes.txt, not the
    // hidden file), sorted by key.
    let line = fx.same_as_local("in", "s3://dlm-in/in/", "dir");
    let urls: Vec<&str> = line["object_reads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["url"].as_str().unwrap())
        .collect();
    assert_eq!(
        urls,
        [
            "s3://dlm-in/in/a.parquet",
            "s3://dlm-in/in/b.parquet",
            "s3://dlm-in/in/c.jsonl.zst"
        ]
    );
    fx.same_as_local("in", "s3://dlm-in/in", "dir2");
    fx.same_as_local("in/*.parquet", "s3://dlm-in/in/*.parquet", "glob");
    let o = fx.pack("s3://dlm-in/**/b.parquet", "glob2", &["--json"]);
    ok(&o);
    let line: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(line["object_reads"][0]["url"], "s3://dlm-in/in/b.parquet");
}

#[test]
fn a_missing_object_prefix_or_bucket_fails_naming_it() {
    let fx = fixture();
    for (i, (url, names)) in [
        ("s3://dlm-in/in/nope.parquet", "s3://dlm-in/in/nope.parquet"),
        ("s3://dlm-in/in/*.csv", "s3://dlm-in/in/*.csv"),
        ("s3://no-such-bucket/in/a.parquet", "no-such-bucket"),
    ]
    .into_iter()
    .enumerate()
    {
        let o = fx.pack(url, &format!("out-{i}"), &[]);
        assert!(!o.status.success(), "{url}: {}", stderr(&o));
        assert!(stderr(&o).contains(names), "{url}: {}", stderr(&o));
        assert!(!stderr(&o).contains(SECRET) && !stderr(&o).contains(SESSION));
        assert!(!fx.path(&format!("out-{i}/index.json")).exists());
    }
    // A format pack does not read, named.
    fx.s3.put(BUCKET, "in/x.csv", "a,b\n");
    let o = fx.pack("s3://dlm-in/in/x.csv", "csv", &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("s3://dlm-in/in/x.csv"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn input_reads_through_503s_and_resets_are_retried_to_the_same_bytes() {
    let fx = fixture();
    let proxy = objstore_support::faults::FaultProxy::start(&fx.s3, fx.dir.path());
    proxy.arm(serde_json::json!([
        {"method": "GET", "path": "^/dlm-in/in/a\\.parquet$", "fault": "status", "status": 503, "code": "SlowDown", "times": 2},
        {"method": "GET", "path": "^/dlm-in/in/c\\.jsonl\\.zst$", "fault": "reset", "times": 1},
    ]));
    ok(&fx.pack(&fx.path("in").display().to_string(), "local", &[]));
    let mut c = Command::new(bin());
    c.args(pack_args(
        Path::new("s3://dlm-in/in/"),
        &fx.tok,
        &fx.path("faulty"),
        EXTRA,
    ));
    proxy.apply(&fx.s3, &mut c, &fx.path("staging"));
    let o = c.output().unwrap();
    ok(&o);
    assert!(!stderr(&o).contains(SECRET) && !stderr(&o).contains(SESSION));
    same_shards(&tree(&fx.path("local")), &tree(&fx.path("faulty")));
    let seen = proxy.seen();
    let fired = |tail: &str, fault: &str| {
        let hits: Vec<_> = seen.iter().filter(|r| r.path.ends_with(tail)).collect();
        let f = hits
            .iter()
            .filter(|r| r.fault.as_deref() == Some(fault))
            .count();
        (f, hits.len())
    };
    let (f, n) = fired("/in/a.parquet", "status");
    assert!(f == 2 && n > f, "a.parquet: {f} SlowDowns of {n} GETs");
    let (f, n) = fired("/in/c.jsonl.zst", "reset");
    assert!(f == 1 && n > f, "c.jsonl.zst: {f} resets of {n} GETs");
}

mod hub {
    use super::*;
    use dlm_data::fixtures::datasets::write_hub_fixtures;
    use dlm_data::hub::emulator::{Emulator, Options};

    const REPO: &str = "HuggingFaceFW/fineweb-edu";

    fn cmd(emu: &Emulator, dir: &Path, args: &[String]) -> Output {
        Command::new(bin())
            .args(args)
            .env("HF_ENDPOINT", emu.endpoint())
            .env("HF_HOME", dir.join("hf-home"))
            .env("DLM_NO_PROGRESS", "1")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE")
            .output()
            .unwrap()
    }

    #[test]
    fn an_hf_input_equals_the_local_pack_and_eval_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("hub");
        std::fs::create_dir_all(&root).unwrap();
        let repos = write_hub_fixtures(&root).unwrap();
        let commit = repos.iter().find(|r| r.id == REPO).unwrap().commit.clone();
        let emu = Emulator::start(&root, Options::default()).unwrap();
        let tok = tokenizer(dir.path());
        let local = root.join(REPO).join("sample/10BT");
        let log = dir.path().join("download.log");
        let args = |input: &str, out: &str, extra: &[&str]| -> Vec<String> {
            let mut a = pack_args(Path::new(input), &tok, &dir.path().join(out), EXTRA);
            a.extend(extra.iter().map(|s| s.to_string()));
            a
        };
        ok(&cmd(
            &emu,
            dir.path(),
            &args(&format!("{}/*.parquet", local.display()), "out-local", &[]),
        ));
        let url = format!("hf://datasets/{REPO}/sample/10BT/*.parquet");
        let o = cmd(
            &emu,
            dir.path(),
            &args(&url, "out-hub", &["--log", log.to_str().unwrap()]),
        );
        ok(&o);
        let (l, r) = (
            tree(&dir.path().join("out-local")),
            tree(&dir.path().join("out-hub")),
        );
        same_shards(&l, &r);
        let pinned = format!("hf://datasets/{REPO}@{commit}/sample/10BT/");
        let local_root = format!("{}/", std::fs::canonicalize(&local).unwrap().display());
        for (f, local_name) in [("index.json", local_root.as_str()), ("README.md", "")] {
            let rt = String::from_utf8(r[f].clone()).unwrap();
            assert!(rt.contains(&pinned), "{f} does not name the commit:\n{rt}");
            let rt = rt
                .replace(&pinned, local_name)
                .replace("(input files,", "(local files,");
            assert_eq!(String::from_utf8(l[f].clone()).unwrap(), rt, "{f}");
        }
        // One download.log line per file, streamed: fewer bytes than the files hold.
        let recs: Vec<serde_json::Value> = std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(recs.len(), 3, "{recs:?}");
        let (mut read, mut size) = (0, 0);
        for rec in &recs {
            assert_eq!(rec["streamed"], true);
            assert_eq!(rec["commit"], commit.as_str());
            let p = rec["path"].as_str().unwrap();
            size += std::fs::metadata(root.join(REPO).join(p)).unwrap().len();
            read += rec["bytes"].as_u64().unwrap();
        }
        assert!(read < size, "read {read} of {size}: not a projected read");

        // Evaluation data through hf://: refused by name (exit 2), a named file before any
        // request, a glob once it lists one.
        let refused = |input: &str, out: &str| -> String {
            let o = cmd(
                &emu,
                dir.path(),
                &args(input, out, &["--text", "{question}"]),
            );
            assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
            assert!(!dir.path().join(out).join("index.json").exists());
            stderr(&o)
        };
        let n = emu.request_count();
        let test = "hf://datasets/allenai/sciq/data/test-00000-of-00001.parquet";
        let e = refused(test, "t1");
        assert!(e.contains(test), "{e}");
        assert_eq!(emu.request_count(), n, "a request before the refusal");
        let e = refused("hf://datasets/allenai/sciq/data/*.parquet", "t2");
        for f in [
            "test-00000-of-00001.parquet",
            "validation-00000-of-00001.parquet",
        ] {
            assert!(e.contains(f), "{e}");
        }
        assert!(!dir.path().join("t2/index.json").exists());
    }
}
