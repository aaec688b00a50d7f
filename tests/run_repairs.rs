//! Issue 57: the nightly `run` repairs what it finds instead of losing nights — a manifest's
//! local `path =` sources are inputs of fetch and pack, a complete step's outputs are checked
//! against its journal, `--hash` reads contents, and what changed is named.

use std::path::Path;
use std::process::Command;

mod fixture_dirs;
use fixture_dirs::{copy_dir, expect, fixtures};

/// A working directory of the user's own files: tok/ (the fixture tokenizer), corpus/docs.jsonl,
/// and an HF cache of its own under hf-home/ (nothing is fetched from the Hub).
struct Work {
    dir: tempfile::TempDir,
}

fn corpus_line(i: usize) -> String {
    format!(
        "{{\"text\":\"Document {i}: the lantern lit {} barges on the canal before the bell rang.\"}}\n",
        i * 11 % 97
    )
}

fn work() -> Work {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    copy_dir(&fixtures().join("tokenizer"), &root.join("tok"));
    std::fs::create_dir_all(root.join("corpus")).unwrap();
    let docs: String = (0..300).map(corpus_line).collect();
    std::fs::write(root.join("corpus/docs.jsonl"), docs).unwrap();
    Work { dir }
}

impl Work {
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn cmd(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_dlm-data"));
        c.current_dir(self.root())
            .env("HF_HOME", self.root().join("hf-home"))
            .env("HF_HUB_OFFLINE", "0")
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .env_remove("HF_TOKEN")
            .env_remove("DLM_TEST_PAUSE");
        c
    }
    /// `run pipeline.toml --json EXTRA…`: exit code, the JSON line, stderr.
    fn night(&self, extra: &[&str]) -> (i32, serde_json::Value, String) {
        let o = self
            .cmd()
            .args(["run", "pipeline.toml", "--json"])
            .args(extra)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        let v = match out.lines().collect::<Vec<_>>().as_slice() {
            [one] => serde_json::from_str(one).unwrap_or(serde_json::Value::Null),
            _ => serde_json::Value::Null,
        };
        (
            o.status.code().unwrap_or(-1),
            v,
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    }
    fn write(&self, rel: &str, text: &str) {
        std::fs::write(self.root().join(rel), text).unwrap();
    }
    fn append(&self, rel: &str, text: &str) {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.root().join(rel))
            .unwrap();
        std::io::Write::write_all(&mut f, text.as_bytes()).unwrap();
    }
    fn index(&self, out: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.root().join(out).join("index.json")).unwrap())
            .unwrap()
    }
}

/// A `[pack]` over a manifest whose one source is a local `path =` (the form that allows a
/// template per file).
const MANIFEST_PIPELINE: &str = r#"
version = 1
tokenizer = "tok"

[pack]
manifest = "m.toml"
out = "shards/own"
seq_len = 64
"#;

const LOCAL_MANIFEST: &str = "[[source]]\nname = 'mine'\npath = 'corpus'\nformat = 'jsonl'\n";

/// Row 1: one local file gains 20 documents; the next night re-locks (fetch runs) and rebuilds
/// pack with no flag, and the audit holds.
#[test]
fn a_manifests_local_source_edited_relocks_and_rebuilds() {
    let w = work();
    w.write("m.toml", LOCAL_MANIFEST);
    w.write("pipeline.toml", MANIFEST_PIPELINE);
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("fetch", "ran"), ("pack", "ran"), ("audit", "ran")]);
    assert_eq!(v["verdict"], "pass", "{v}");
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    expect(
        &v,
        &[("fetch", "skipped"), ("pack", "skipped"), ("audit", "ran")],
    );

    let more: String = (300..320).map(corpus_line).collect();
    w.append("corpus/docs.jsonl", &more);
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}\n{v}");
    expect(
        &v,
        &[("fetch", "ran"), ("pack", "rebuilt"), ("audit", "ran")],
    );
    assert_eq!(v["verdict"], "pass", "{v}");
    assert!(e.contains("corpus/docs.jsonl"), "the change is named: {e}");
    assert_eq!(w.index("shards/own")["totals"]["documents"], 320);
    // A new file in the source's directory is a change too.
    w.write("corpus/more.jsonl", &corpus_line(999));
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}\n{v}");
    expect(
        &v,
        &[("fetch", "ran"), ("pack", "rebuilt"), ("audit", "ran")],
    );
    assert_eq!(w.index("shards/own")["totals"]["documents"], 321);
}

/// The user's own files through `inputs = [...]`, several shards.
const INPUTS_PIPELINE: &str = r#"
version = 1
tokenizer = "tok"

[pack]
inputs = ["corpus/docs.jsonl"]
text_column = "text"
out = "shards/own"
seq_len = 64
args = ["--shard-bytes", "4KiB"]
"#;

fn shard_files(w: &Work) -> Vec<std::path::PathBuf> {
    w.index("shards/own")["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            w.root()
                .join("shards/own")
                .join(s["file"].as_str().unwrap())
        })
        .collect()
}

/// Row 2: a shard deleted, truncated, or (seen with `--hash`) altered in place after a
/// complete night: the next night names it and rebuilds pack; the output ends as it was.
#[test]
fn a_damaged_output_of_a_complete_step_is_rebuilt() {
    let w = work();
    w.write("pipeline.toml", INPUTS_PIPELINE);
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "ran"), ("audit", "ran")]);
    let shards = shard_files(&w);
    assert!(shards.len() > 2, "several shards: {shards:?}");
    let good: Vec<Vec<u8>> = shards.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let intact = |w: &Work| {
        for (p, b) in shards.iter().zip(&good) {
            assert_eq!(&std::fs::read(p).unwrap(), b, "{} differs", p.display());
        }
        assert_eq!(shard_files(w), shards);
    };

    // Deleted: named, rebuilt (also under --rerun, which used to say "nothing to do").
    for extra in [&[][..], &["--rerun"][..]] {
        std::fs::remove_file(&shards[1]).unwrap();
        let (code, v, e) = w.night(extra);
        assert_eq!(code, 0, "{extra:?}: {e}\n{v}");
        expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
        assert_eq!(v["verdict"], "pass", "{v}");
        let name = shards[1].file_name().unwrap().to_str().unwrap();
        assert!(
            e.contains(name),
            "{extra:?}: the missing shard is named: {e}"
        );
        intact(&w);
    }

    // Truncated: a size differs, seen every night.
    let f = std::fs::File::options()
        .write(true)
        .open(&shards[0])
        .unwrap();
    f.set_len(good[0].len() as u64 - 10).unwrap();
    drop(f);
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}\n{v}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
    intact(&w);

    // Same size, one byte changed, its time restored: the night's size check passes it (the
    // audit, which re-hashes shards, names it: exit 1); `--hash` reads contents and repairs.
    let p = &shards[2];
    let mtime = std::fs::metadata(p).unwrap().modified().unwrap();
    let mut b = good[2].clone();
    let at = b.len() / 2;
    b[at] ^= 0x55;
    std::fs::write(p, &b).unwrap();
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 1, "{e}\n{v}");
    expect(&v, &[("pack", "skipped"), ("audit", "ran")]);
    assert_eq!(v["failed"], serde_json::json!(["shards"]), "{v}");
    let (code, v, e) = w.night(&["--hash"]);
    assert_eq!(code, 0, "{e}\n{v}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
    intact(&w);
    // And then complete again, with or without --hash.
    for extra in [&[][..], &["--hash"][..]] {
        let (code, v, e) = w.night(extra);
        assert_eq!(code, 0, "{e}");
        expect(&v, &[("pack", "skipped"), ("audit", "ran")]);
    }
}

/// Row 3: an input edited with its size and modification time restored: the pre-check passes
/// it (documented), `run --hash` reads contents and rebuilds.
#[test]
fn run_hash_reads_input_contents_not_size_and_time() {
    let w = work();
    w.write("pipeline.toml", INPUTS_PIPELINE);
    let (code, _, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    let docs = w.root().join("corpus/docs.jsonl");
    let mtime = std::fs::metadata(&docs).unwrap().modified().unwrap();
    let text = std::fs::read_to_string(&docs).unwrap();
    std::fs::write(&docs, text.replacen("lantern", "Lantern", 1)).unwrap();
    std::fs::File::options()
        .write(true)
        .open(&docs)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "skipped"), ("audit", "ran")]);
    let (code, v, e) = w.night(&["--hash"]);
    assert_eq!(code, 0, "{e}\n{v}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
    assert!(e.contains("corpus/docs.jsonl"), "{e}");
    assert_eq!(
        w.index("shards/own")["args"]["inputs"][0]["sha256"],
        dlm_data::util::sha256_file(&docs).unwrap()
    );
}

/// Row 15: a rebuilt step names the setting that changed, with both values.
#[test]
fn a_rebuild_names_the_setting_that_changed() {
    let w = work();
    w.write("pipeline.toml", INPUTS_PIPELINE);
    let (code, _, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    w.write(
        "pipeline.toml",
        &INPUTS_PIPELINE.replace("seq_len = 64", "seq_len = 32"),
    );
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    expect(&v, &[("pack", "rebuilt"), ("audit", "ran")]);
    assert!(e.contains("seq_len 64 → 32"), "{e}");
}

/// Row 16 (and row 14 for a manifest's card): a pipeline of local sources only writes nothing
/// into the HF cache (no empty download.log), and its dataset card names no local path.
#[test]
fn a_local_only_pipeline_writes_nothing_into_the_hf_cache() {
    let w = work();
    w.write("m.toml", LOCAL_MANIFEST);
    w.write("pipeline.toml", MANIFEST_PIPELINE);
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 0, "{e}");
    assert_eq!(v["verdict"], "pass", "{v}");
    let hf = w.root().join("hf-home");
    let written: Vec<_> = fixture_dirs::files_under(w.root())
        .into_keys()
        .filter(|k| k.starts_with("hf-home/"))
        .collect();
    assert!(
        written.is_empty() && !hf.join("hub/download.log").exists(),
        "{written:?}"
    );
    let card = std::fs::read_to_string(w.root().join("shards/own/README.md")).unwrap();
    assert!(!card.contains(&w.root().display().to_string()), "{card}");
}

/// Row 17: the user's own benchmark as a local `role = "eval-reference"` source is first-class:
/// `run` fetches (locks) it, `decontam` reads it from the lock and finds a copied question;
/// the benchmark edited, fetch re-locks it and decontam scans again.
#[test]
fn a_local_eval_reference_source_decontaminates() {
    let w = work();
    let question = "Which planet in the outer solar system has the longest orbital period of all the giants observed";
    w.write(
        "bench.jsonl",
        &format!(
            "{}\n{}\n",
            serde_json::json!({ "question": question }),
            serde_json::json!({ "question": "An unrelated question about rivers and the mills that stand on them today" })
        ),
    );
    w.append(
        "corpus/docs.jsonl",
        &(serde_json::json!({ "text": question }).to_string() + "\n"),
    );
    w.write(
        "evals.toml",
        "[[source]]\nname = 'mine-bench'\npath = 'bench.jsonl'\nformat = 'jsonl'\nrole = 'eval-reference'\ntext = '{question}'\n",
    );
    w.write(
        "pipeline.toml",
        &format!("{INPUTS_PIPELINE}\n[decontam]\nagainst = [\"evals.toml\"]\nngram = 8\n"),
    );
    // The copied question is found: the audit's `decontam` link names it (exit 1).
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 1, "{e}\n{v}");
    expect(
        &v,
        &[
            ("fetch", "ran"),
            ("pack", "ran"),
            ("decontam", "ran"),
            ("audit", "ran"),
        ],
    );
    assert_eq!(v["failed"], serde_json::json!(["decontam"]), "{v}");
    let report = |w: &Work| -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(w.root().join("shards/own/decontam.json")).unwrap())
            .unwrap()
    };
    let r = report(&w);
    assert_eq!(r["contaminated_documents"], 1, "{r}");
    assert_eq!(r["hits"][0]["benchmark"], "mine-bench", "{r}");
    // The benchmark gains a question: re-locked, scanned again.
    w.append(
        "bench.jsonl",
        &(serde_json::json!({ "question": "A third question that the corpus has never seen in any of its documents" }).to_string() + "\n"),
    );
    let (code, v, e) = w.night(&[]);
    assert_eq!(code, 1, "{e}\n{v}");
    expect(
        &v,
        &[
            ("fetch", "ran"),
            ("pack", "skipped"),
            ("decontam", "ran"),
            ("audit", "ran"),
        ],
    );
    assert_eq!(report(&w)["against"][0]["items"], 3, "{}", report(&w));
}
