//! Issue 57: `audit` and `inspect` take nothing false for done — an index listing shards
//! outside its directory, a Megatron `.idx` whose pointers lie past its `.bin`, a report line
//! that checked nothing.

mod pack_common;

use std::path::{Path, PathBuf};

use pack_common::*;

/// A pack output of the user's own file in `format`, several shards.
fn packed(t: &Path, format: &str) -> PathBuf {
    let tok = tokenizer(t);
    let input = t.join("docs.jsonl");
    let text: String = docs(21, 60)
        .iter()
        .map(|d| serde_json::json!({ "text": d }).to_string() + "\n")
        .collect();
    std::fs::write(&input, text).unwrap();
    let out = t.join(format!("out-{format}"));
    ok(&run_pack(
        &input,
        &tok,
        &out,
        &[
            "--format",
            format,
            "--seq-len",
            "32",
            "--shard-bytes",
            "2KiB",
        ],
        &[],
    ));
    out
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Rewrite the index's shard entry `k` (its file, or the sha256 of an extra file) as `edit`
/// says, keeping the index otherwise as written.
fn edit_index(out: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let p = out.join("index.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

/// Row 11: an index.json listing a shard outside its directory (absolute, or `../`) is
/// refused by `inspect`, naming it, as `audit` refuses it.
#[test]
fn inspect_refuses_an_index_listing_shards_outside_its_directory() {
    let t = tempfile::tempdir().unwrap();
    let out = packed(t.path(), "parquet");
    ok(&run(&["inspect", s(&out)], &[]));
    // A copy of a real shard outside the directory, listed by an absolute and a `..` path.
    let first = out.join("data/part-00000.parquet");
    let outside = t.path().join("elsewhere.parquet");
    std::fs::copy(&first, &outside).unwrap();
    for listed in [s(&outside).to_string(), "../elsewhere.parquet".to_string()] {
        let bak = std::fs::read(out.join("index.json")).unwrap();
        edit_index(&out, |v| v["shards"][0]["file"] = listed.clone().into());
        let o = run(&["inspect", s(&out)], &[]);
        let e = stderr(&o);
        assert_ne!(o.status.code(), Some(0), "{listed}: {e}");
        assert!(
            e.contains(&listed) && e.contains("shards[0]"),
            "{listed}: {e}"
        );
        let o = run(&["audit", "--shards", s(&out)], &[]);
        assert_eq!(o.status.code(), Some(1), "{listed}");
        std::fs::write(out.join("index.json"), bak).unwrap();
    }
}

/// Row 12: a Megatron `.idx` whose pointer lies past its `.bin` (its sha256 in index.json
/// rewritten to match): `audit --deep` fails naming the `.idx`, `inspect` exits non-zero.
#[test]
fn a_megatron_pointer_past_its_bin_fails_deep_audit_and_inspect() {
    let t = tempfile::tempdir().unwrap();
    let out = packed(t.path(), "megatron");
    let audit = |extra: &[&str]| {
        let mut a = vec!["audit", "--shards", s(&out)];
        a.extend_from_slice(extra);
        run(&a, &[])
    };
    ok(&audit(&["--deep"]));
    ok(&run(&["inspect", s(&out)], &[]));
    let idx = out.join("part-00000.idx");
    let mut b = std::fs::read(&idx).unwrap();
    let seqs = u64::from_le_bytes(b[18..26].try_into().unwrap()) as usize;
    assert!(seqs >= 2, "{seqs} sequences");
    // The second sequence's pointer, 1 MiB past the .bin; lengths unchanged.
    let at = 34 + 4 * seqs + 8;
    b[at..at + 8].copy_from_slice(&(1i64 << 20).to_le_bytes());
    std::fs::write(&idx, &b).unwrap();
    let sha = dlm_data::util::sha256_file(&idx).unwrap();
    edit_index(&out, |v| {
        v["shards"][0]["extra_files"]["part-00000.idx"] = sha.clone().into();
    });
    // Without --deep the sha256 and sizes hold; --deep reads the pointers.
    let o = audit(&["--deep"]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("part-00000.idx") && text.contains("pointer") || text.contains("points at"),
        "{text}"
    );
    let o = run(&["inspect", s(&out)], &[]);
    let e = stderr(&o);
    assert_ne!(o.status.code(), Some(0), "{e}");
    assert!(
        e.contains("part-00000.idx") && e.contains("points at"),
        "{e}"
    );
}

/// The `--json` report's checks: name → (status, summary, problems, notes).
fn checks(o: &std::process::Output) -> std::collections::BTreeMap<String, serde_json::Value> {
    let out = String::from_utf8_lossy(&o.stdout);
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_else(|_| panic!("{out}"));
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["check"].as_str().unwrap().to_string(), c.clone()))
        .collect()
}

/// Row 13: a check that checked nothing is SKIP (never PASS on "0 declared source(s)"); a
/// FAIL is never followed by a line saying the same files were found.
#[test]
fn the_report_skips_what_it_did_not_check_and_never_contradicts_itself() {
    let t = tempfile::tempdir().unwrap();
    let out = packed(t.path(), "parquet");
    let o = run(&["audit", "--shards", s(&out), "--json"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let c = checks(&o);
    for name in ["manifest-pinned", "download-log", "local-sources"] {
        assert_eq!(c[name]["status"], "skip", "{name}: {}", c[name]);
    }
    assert_eq!(c["shards"]["status"], "pass", "{}", c["shards"]);
    let o = run(&["audit", "--shards", s(&out)], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("[SKIP] manifest-pinned"), "{text}");
    assert!(!text.contains("0 declared source(s)"), "{text}");
    // The input it was packed from, truncated: one FAIL naming it, no "found" line beside it.
    let input = t.path().join("docs.jsonl");
    let b = std::fs::read(&input).unwrap();
    std::fs::write(&input, &b[..b.len() / 2]).unwrap();
    let o = run(&["audit", "--shards", s(&out)], &[]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{text}");
    assert!(
        text.contains("docs.jsonl is ") && text.contains("[FAIL] shards"),
        "{text}"
    );
    assert!(!text.contains("found at their recorded sizes"), "{text}");
}
