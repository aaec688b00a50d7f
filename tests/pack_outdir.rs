//! `pack` (and `merge`) output directories: a run deletes or overwrites only files its own
//! journal (index.json) proves it wrote — never an input, never a foreign file — and on a full
//! disk it fails naming the file, leaving no temp file and nothing marked complete (issue 18).

mod pack_common;

use std::path::{Path, PathBuf};

use pack_common::*;

fn setup(d: &Path) -> (PathBuf, PathBuf) {
    let tok = tokenizer(d);
    let input = d.join("in.parquet");
    let texts: Vec<Option<String>> = docs(3, 60).into_iter().map(Some).collect();
    write_parquet(&input, &texts, 20);
    (tok, input)
}

fn pack(input: &Path, tok: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut a = vec!["--shard-bytes", "1K"];
    if !extra.contains(&"--seq-len") {
        a.extend(["--seq-len", "16"]);
    }
    a.extend_from_slice(extra);
    run_pack(input, tok, out, &a, &[])
}

/// The files of `dir`, those of its parquet `data/` as `data/NAME`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n == "data" && e.path().is_dir() {
            v.extend(
                std::fs::read_dir(e.path())
                    .unwrap()
                    .flatten()
                    .map(|f| format!("data/{}", f.file_name().to_string_lossy())),
            );
        } else {
            v.push(n);
        }
    }
    v.sort();
    v
}

/// The reported data loss: `--input DIR/part-00000.parquet --out DIR` deleted the input.
#[test]
fn the_input_inside_out_is_never_deleted() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let inside = out.join("part-00000.parquet");
    std::fs::copy(&input, &inside).unwrap();
    let before = std::fs::read(&inside).unwrap();
    for force in [false, true] {
        let o = pack(
            &inside,
            &tok,
            &out,
            if force { &["--force"][..] } else { &[][..] },
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let e = stderr(&o);
        assert!(e.contains("part-00000.parquet"), "{e}");
        if force {
            assert!(e.contains("is an input"), "{e}");
        }
        assert_eq!(std::fs::read(&inside).unwrap(), before, "the input changed");
        assert_eq!(names(&out), vec!["part-00000.parquet"]);
    }
}

#[test]
fn foreign_files_refuse_a_fresh_run_and_force_clears_only_own_formats() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("part-00001.parquet"), b"someone else's shard").unwrap();
    std::fs::write(out.join("notes.txt"), b"keep me").unwrap();
    let o = pack(&input, &tok, &out, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("part-00001.parquet") || e.contains("notes.txt"),
        "{e}"
    );
    assert_eq!(names(&out), vec!["notes.txt", "part-00001.parquet"]);
    // --force clears dlm-data's own formats only: notes.txt still refuses the run.
    let o = pack(&input, &tok, &out, &["--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("notes.txt"), "{}", stderr(&o));
    assert_eq!(names(&out), vec!["notes.txt", "part-00001.parquet"]);
    std::fs::rename(out.join("notes.txt"), d.path().join("notes.txt")).unwrap();
    ok(&pack(&input, &tok, &out, &["--force"]));
    let idx = index(&out);
    assert_eq!(idx["complete"], true);
    let listed: Vec<String> = idx["shards"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["file"].as_str().unwrap().to_string())
        .collect();
    assert!(listed.len() > 1, "{listed:?}");
    let mut expect = listed.clone();
    // index.json and the dataset card beside it (#41).
    expect.extend(["index.json".into(), "README.md".into()]);
    expect.sort();
    assert_eq!(names(&out), expect);
}

#[test]
fn a_different_run_is_refused_and_force_replaces_only_what_the_index_lists() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    ok(&pack(&input, &tok, &out, &[]));
    let first = tree(&out);
    // Same command: already complete, nothing touched.
    ok(&pack(&input, &tok, &out, &[]));
    assert_eq!(tree(&out), first);
    // Different arguments: refused, untouched.
    let o = pack(&input, &tok, &out, &["--seq-len", "32"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(tree(&out), first);
    // A foreign file beside a dlm-data index is still refused, even with --force.
    std::fs::write(out.join("README.md"), b"mine").unwrap();
    let o = pack(&input, &tok, &out, &["--seq-len", "32", "--force"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("README.md"), "{}", stderr(&o));
    std::fs::remove_file(out.join("README.md")).unwrap();
    ok(&pack(&input, &tok, &out, &["--seq-len", "32", "--force"]));
    assert_eq!(index(&out)["seq_len"], 32);
}

/// A resumed run removes only the one shard an interrupted writer may have renamed before
/// journaling it (and temp files); an unlisted shard further on is not ours and refuses.
#[test]
fn resume_removes_only_the_next_unjournaled_shard() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    ok(&pack(&input, &tok, &out, &[]));
    let full = tree(&out);
    // Turn the finished output into an interrupted one: the index journals 2 shards.
    let mut idx: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("index.json")).unwrap()).unwrap();
    let n = idx["shards"].as_array().unwrap().len();
    assert!(n >= 4, "{n} shards");
    // Rebuild the journal at shard 2 by running a throttled pack and killing it is slow;
    // instead truncate to the first two shards with a cursor taken from a real run.
    let out2 = d.path().join("out2");
    let mut child = pack_cmd(
        &input,
        &tok,
        &out2,
        &["--seq-len", "16", "--shard-bytes", "1K"],
    )
    .env("DLM_PACK_THROTTLE_MS", "400")
    .spawn()
    .unwrap();
    let t0 = std::time::Instant::now();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let ok = std::fs::read_to_string(out2.join("index.json"))
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .is_some_and(|v| v["shards"].as_array().is_some_and(|s| s.len() >= 2));
        if ok || t0.elapsed().as_secs() > 60 {
            break;
        }
    }
    unsafe {
        libc::kill(child.id() as i32, libc::SIGKILL);
    }
    let _ = child.wait();
    idx = serde_json::from_str(&std::fs::read_to_string(out2.join("index.json")).unwrap()).unwrap();
    let k = idx["shards"].as_array().unwrap().len();
    assert!(k < n, "the run finished before the kill");
    // The next shard (renamed, not journaled) and a temp file: ours, removed on resume. They
    // sit where the writer puts shards until the index commits, the staging dot-directory.
    let next = format!(".incomplete/data/part-{k:05}.parquet");
    std::fs::write(out2.join(&next), b"half-journaled").unwrap();
    std::fs::write(
        out2.join(format!(".incomplete/data/.part-{k:05}.parquet.tmp")),
        b"tmp",
    )
    .unwrap();
    // A shard two further on cannot be ours: refused, nothing removed.
    let far = format!(".incomplete/data/part-{:05}.parquet", k + 5);
    std::fs::write(out2.join(&far), b"foreign").unwrap();
    let o = pack(&input, &tok, &out2, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(&far), "{}", stderr(&o));
    assert!(out2.join(&next).exists());
    std::fs::remove_file(out2.join(&far)).unwrap();
    ok(&pack(&input, &tok, &out2, &[]));
    assert_eq!(
        tree(&out2),
        full,
        "resume is byte-identical to an uninterrupted run"
    );
}

#[test]
fn index_records_absolute_paths() {
    let d = tempfile::tempdir().unwrap();
    let (_tok, input) = setup(d.path());
    let o = std::process::Command::new(bin())
        .current_dir(d.path())
        .args([
            "pack",
            "--input",
            "in.parquet",
            "--tokenizer",
            "tok",
            "--out",
            "rel-out",
            "--seq-len",
            "16",
        ])
        .output()
        .unwrap();
    ok(&o);
    let idx = index(&d.path().join("rel-out"));
    let p = idx["tokenizer"]["path"].as_str().unwrap();
    assert!(Path::new(p).is_absolute(), "{p}");
    assert!(Path::new(p).exists(), "{p}");
    // --input too (issue 27): the provenance names the file absolutely, and a rerun from
    // another directory with the path spelled absolutely is the same run (already complete).
    let f = idx["provenance"][0]["file"].as_str().unwrap();
    assert_eq!(Path::new(f), input.canonicalize().unwrap(), "{f}");
    let again = std::process::Command::new(bin())
        .current_dir("/")
        .arg("pack")
        .arg("--input")
        .arg(&input)
        .arg("--tokenizer")
        .arg(d.path().join("tok"))
        .arg("--out")
        .arg(d.path().join("rel-out"))
        .args(["--seq-len", "16"])
        .output()
        .unwrap();
    ok(&again);
    assert!(
        stderr(&again).contains("already complete"),
        "{}",
        stderr(&again)
    );
}

/// A full disk (RLIMIT_FSIZE, no root needed): the error names the shard file and the OS
/// error (not "shard writer stopped"), no hidden temp file is left, nothing is complete.
#[test]
fn disk_full_names_the_file_and_leaves_no_temp_files() {
    let d = tempfile::tempdir().unwrap();
    let tok = tokenizer(d.path());
    let input = d.path().join("in.parquet");
    let texts: Vec<Option<String>> = docs(9, 400).into_iter().map(Some).collect();
    write_parquet(&input, &texts, 100);
    for format in ["parquet", "megatron"] {
        let out = d.path().join(format!("full-{format}"));
        // 16 KiB per file: index.json fits, the first shard (~24k tokens) does not.
        let cmd = format!(
            "trap '' XFSZ; ulimit -f 16; exec '{}' pack --input '{}' --tokenizer '{}' --out '{}' --seq-len 64 --shard-bytes 256K --format {format}",
            bin(),
            input.display(),
            tok.display(),
            out.display()
        );
        let o = std::process::Command::new("bash")
            .args(["-c", &cmd])
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{format}: {e}");
        assert!(!e.contains("shard writer stopped"), "{format}: {e}");
        assert!(e.contains("part-00000"), "{format}: {e}");
        assert!(e.contains("File too large"), "{format}: {e}");
        let left: Vec<String> = names(&out)
            .into_iter()
            .filter(|n| n.contains(".tmp"))
            .collect();
        assert!(left.is_empty(), "{format}: temp files left: {left:?}");
        if out.join("index.json").exists() {
            assert_eq!(index(&out)["complete"], false);
        }
    }
}

#[test]
fn absurd_sizes_and_stream_with_input_exit_2() {
    let d = tempfile::tempdir().unwrap();
    let (tok, input) = setup(d.path());
    let out = d.path().join("out");
    for extra in [
        &["--seq-len", "4611686018427387904"][..],
        &["--seq-len", "4294967296"][..],
        &["--shard-bytes", "1e30"][..],
        &["--stream"][..],
    ] {
        let o = pack(&input, &tok, &out, extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(!out.exists(), "{extra:?} created the output");
    }
}
