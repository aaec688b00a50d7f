//! Manifest sources with `path = …` (the user's own files): `fetch` locks each file's sha256
//! like a Hub file (no network, no download log needed), `pack` reads exactly the locked
//! files (alongside a mixture with weights), and `audit` re-hashes them: one changed byte in
//! a local file fails `local-sources`, naming the file.

mod pack_common;

use std::path::Path;

use pack_common::*;

fn jsonl(docs: &[String]) -> String {
    docs.iter()
        .map(|d| serde_json::json!({ "title": "T", "body": d }).to_string() + "\n")
        .collect()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn local_sources_are_locked_packed_and_audited() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let tok = tokenizer(root);
    let cache = root.join("cache");
    std::fs::create_dir_all(root.join("mine/more")).unwrap();
    let a = docs(11, 40);
    let b = docs(12, 30);
    std::fs::write(root.join("mine/a.jsonl"), jsonl(&a)).unwrap();
    std::fs::write(root.join("mine/more/b.jsonl"), jsonl(&b)).unwrap();
    let notes = docs(13, 20);
    write_parquet(
        &root.join("notes.parquet"),
        &notes.iter().cloned().map(Some).collect::<Vec<_>>(),
        8,
    );
    let manifest = root.join("m.toml");
    std::fs::write(
        &manifest,
        "[[source]]\nname = 'mine'\npath = 'mine'\nformat = 'jsonl'\ntext = \"{title}\\n\\n{body}\"\nweight = 3\n\n\
         [[source]]\nname = 'notes'\npath = 'notes.parquet'\nformat = 'parquet'\nweight = 1\n",
    )
    .unwrap();
    let o = run(
        &["fetch", "--manifest", s(&manifest), "--cache", s(&cache)],
        &[],
    );
    ok(&o);
    let lock: toml::Value =
        toml::from_str(&std::fs::read_to_string(root.join("m.lock")).unwrap()).unwrap();
    let srcs = lock["source"].as_array().unwrap();
    let mine = srcs
        .iter()
        .find(|x| x["name"].as_str() == Some("mine"))
        .unwrap();
    let files: Vec<(&str, &str)> = mine["file"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["sha256"].as_str().unwrap()))
        .collect();
    assert_eq!(files.len(), 2);
    assert_eq!(files[0].0, "mine/a.jsonl");
    assert_eq!(files[1].0, "mine/more/b.jsonl");
    assert_eq!(
        files[0].1,
        dlm_data::util::sha256_file(&root.join("mine/a.jsonl")).unwrap()
    );
    assert_eq!(mine["split"].as_str(), Some("train"));
    assert_eq!(mine["commit"].as_str().unwrap().len(), 64);

    let out = root.join("out");
    ok(&run(
        &[
            "pack",
            "--manifest",
            s(&manifest),
            "--cache",
            s(&cache),
            "--tokenizer",
            s(&tok),
            "--out",
            s(&out),
            "--seq-len",
            "32",
        ],
        &[],
    ));
    let idx = index(&out);
    let by = &idx["totals"]["tokens_by_source"];
    assert!(by["mine"].as_u64().unwrap() > 0 && by["notes"].as_u64().unwrap() > 0);
    let prov = idx["provenance"].as_array().unwrap();
    assert_eq!(prov.len(), 3);
    let mine_docs: u64 = prov
        .iter()
        .filter(|p| p["source"] == "mine")
        .map(|p| p["documents"].as_u64().unwrap())
        .sum();
    assert_eq!(mine_docs as usize, a.len() + b.len());

    let audit = |extra: &[&str]| {
        let mut a = vec![
            "audit",
            "--manifest",
            s(&manifest),
            "--cache",
            s(&cache),
            "--shards",
            s(&out),
        ];
        a.extend_from_slice(extra);
        run(&a, &[])
    };
    let o = audit(&[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    for name in ["manifest-pinned", "local-sources", "shards"] {
        assert!(text.contains(&format!("[PASS] {name}")), "{name}\n{text}");
    }
    // Nothing downloaded, nothing logged: checked nothing (issue 57: SKIP, not PASS).
    assert!(text.contains("[SKIP] download-log"), "{text}");

    // One byte of one local file changed (same size): audit fails naming it; fetch --locked
    // refuses; pack itself still sees the locked size (audit is the hash check).
    let f = root.join("mine/more/b.jsonl");
    let mut bytes = std::fs::read(&f).unwrap();
    let k = bytes.iter().rposition(|c| c.is_ascii_lowercase()).unwrap();
    bytes[k] = if bytes[k] == b'x' { b'y' } else { b'x' };
    std::fs::write(&f, &bytes).unwrap();
    let o = audit(&[]);
    assert_ne!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert!(text.contains("[FAIL] local-sources"), "{text}");
    assert!(
        text.contains("mine/more/b.jsonl") && text.contains("sha256"),
        "{text}"
    );
    let o = run(
        &[
            "fetch",
            "--manifest",
            s(&manifest),
            "--cache",
            s(&cache),
            "--locked",
        ],
        &[],
    );
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("b.jsonl"), "{}", stderr(&o));
    // A file added under the path, unlocked: also named.
    std::fs::write(&f, std::fs::read(root.join("mine/a.jsonl")).unwrap()).unwrap();
    std::fs::write(root.join("mine/c.jsonl"), jsonl(&a)).unwrap();
    let o = audit(&[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert!(
        text.contains("c.jsonl") && text.contains("not in the lock"),
        "{text}"
    );
    // A fresh fetch locks the new state; pack of the changed data is then a different run.
    ok(&run(
        &["fetch", "--manifest", s(&manifest), "--cache", s(&cache)],
        &[],
    ));
    let o = audit(&[]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned() + &stderr(&o);
    assert!(text.contains("[PASS] local-sources"), "{text}");
}

#[test]
fn a_local_source_is_declared_one_way() {
    let t = tempfile::tempdir().unwrap();
    let m = t.path().join("m.toml");
    for (body, needle) in [
        ("path = 'x'\nrepo = 'o/n'\nrevision = 'main'\n", "not both"),
        ("path = ''\n", "path is empty"),
        ("path = 'x'\nfiles = ['*.jsonl']\n", "files"),
        ("path = 'x'\nsplit = 'test'\n", "evaluation split"),
        ("repo = 'o/n'\nrevision = 'main'\n", "split"),
    ] {
        std::fs::write(
            &m,
            format!("[[source]]\nname = 'a'\nformat = 'jsonl'\n{body}"),
        )
        .unwrap();
        let o = run(
            &[
                "fetch",
                "--manifest",
                s(&m),
                "--cache",
                s(&t.path().join("c")),
            ],
            &[],
        );
        assert_eq!(o.status.code(), Some(2), "{body}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{body}: {}", stderr(&o));
    }
}
