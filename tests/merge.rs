//! `dlm-data merge` without Slurm: `--shard I/N` worker runs merged with `dlm-data merge` are
//! byte-identical to one process (distill, pack in every format), and missing or incomplete
//! parts are refused by name with nothing written.

mod mcq_support;
mod pack_common;
mod teacher_support;

use std::path::Path;
use std::process::{Command, Output};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_dlm-data")
}

fn run(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .env("RUST_LOG", "warn")
        .env_remove("SLURM_ARRAY_TASK_ID")
        .env_remove("JOB_COMPLETION_INDEX")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(
        o.status.success(),
        "exit {:?}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `merge --json`'s keys, in the order printed (the line's contract: kind, out, workers, then
/// the kind's counts).
fn keys(v: &serde_json::Value) -> Vec<&str> {
    v.as_object().unwrap().keys().map(|k| k.as_str()).collect()
}

fn fails(o: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
}

fn write_prompts(path: &Path, n: usize) {
    let mut s = String::new();
    for i in 0..n {
        let options: Vec<String> = (0..4).map(|o| format!("choice {o} for {i}")).collect();
        let gold = ["A", "B", "C", "D"][i % 4];
        let v = serde_json::json!({"id": format!("sciq-train-{i:06}"), "source": "sciq",
            "repo": "allenai/sciq", "commit": "a".repeat(40), "file": "data/train.parquet",
            "row": i, "prompt": format!("Question {i}: which is right?"), "options": options,
            "gold": gold});
        s.push_str(&v.to_string());
        s.push('\n');
    }
    std::fs::write(path, s).unwrap();
}

fn distill(prompts: &Path, out: &Path, extra: &[&str]) -> Output {
    let t = teacher_support::teacher_dir();
    let mut a = vec![
        "distill",
        "--teacher",
        t.to_str().unwrap(),
        "--prompts",
        prompts.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--gen-length",
        "8",
        "--block-length",
        "4",
        "--steps",
        "4",
        "--batch-size",
        "2",
    ];
    a.extend_from_slice(extra);
    run(&a)
}

#[test]
fn distill_workers_merge_to_the_single_process_bytes() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("prompts.jsonl");
    write_prompts(&prompts, 9);
    for (name, fmt) in [("one.json", "json"), ("one.jsonl", "jsonl")] {
        let single = d.path().join(name);
        ok(&distill(&prompts, &single, &["--format", fmt]));
        let sharded = d.path().join(format!("sharded-{name}"));
        let s = sharded.to_str().unwrap();
        // Worker 2 of 3 first, then 0: merging before all are done is refused by name.
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "2/3"],
        ));
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "0/3"],
        ));
        fails(&run(&["merge", s]), 2, "00001-of-00003");
        assert!(!sharded.exists(), "nothing written on refusal");
        ok(&distill(
            &prompts,
            &sharded,
            &["--format", fmt, "--shard", "1/3"],
        ));
        assert!(!sharded.exists(), "workers do not finalise");
        let out = ok(&run(&["merge", s, "--json"]));
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["records"], 9);
        assert_eq!(v["workers"], 3);
        let want = [
            "kind", "out", "workers", "parts", "records", "batches", "sha256",
        ];
        assert_eq!(keys(&v), want);
        assert_eq!(
            std::fs::read(&sharded).unwrap(),
            std::fs::read(&single).unwrap(),
            "{name}: merged differs from one process"
        );
    }
}

/// A locked manifest of one source with five parquet files (five units) in a private cache.
fn pack_fixture(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use dlm_data::hub::cache::Cache;
    use dlm_data::manifest::{Lock, LockedFile, LockedSource, Role};
    let tok = pack_common::tokenizer(dir);
    let cache = Cache {
        root: dir.join("cache"),
    };
    let commit = "c".repeat(40);
    let mut files = vec![];
    for k in 0..5u64 {
        let name = format!("sample/{k:03}.parquet");
        let d = pack_common::docs(7 + k, 15 + 10 * k as usize);
        let tmp = dir.join("tmp.parquet");
        pack_common::write_parquet(&tmp, &d.into_iter().map(Some).collect::<Vec<_>>(), 8);
        let bytes = std::fs::read(&tmp).unwrap();
        let p = cache.snapshot_path(Role::Train, "o/web", &commit, &name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, &bytes).unwrap();
        files.push(LockedFile {
            path: name,
            size: bytes.len() as u64,
            sha256: dlm_data::util::sha256_hex(&bytes),
            git_oid: None,
        });
    }
    let manifest = dir.join("m.toml");
    std::fs::write(
        &manifest,
        "[[source]]\nname='web'\nrepo='o/web'\nrevision='main'\nsplit='train'\nformat='parquet'\ntext='{text}'\n",
    )
    .unwrap();
    Lock {
        version: 1,
        sources: vec![LockedSource {
            name: "web".into(),
            repo: "o/web".into(),
            revision: "main".into(),
            commit,
            config: "default".into(),
            split: "train".into(),
            role: Role::Train,
            files,
        }],
    }
    .save(&manifest.with_extension("lock"))
    .unwrap();
    (manifest, dir.join("cache"), tok)
}

#[test]
fn pack_workers_merge_to_the_single_process_bytes_in_every_format() {
    let d = tempfile::tempdir().unwrap();
    let (manifest, cache, tok) = pack_fixture(d.path());
    let pack = |out: &Path, extra: &[&str]| {
        let mut a = vec![
            "pack",
            "--manifest",
            manifest.to_str().unwrap(),
            "--cache",
            cache.to_str().unwrap(),
            "--tokenizer",
            tok.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--seq-len",
            "24",
            "--shard-bytes",
            "1KiB",
        ];
        a.extend_from_slice(extra);
        run(&a)
    };
    let cases: [&[&str]; 4] = [
        &["--format", "parquet"],
        &["--format", "mds", "--shuffle-seed", "7"],
        &["--format", "megatron", "--dtype", "uint16", "--pad-last"],
        &["--format", "parquet", "--pad-last", "--shuffle-seed", "3"],
    ];
    for (c, extra) in cases.iter().enumerate() {
        let single = d.path().join(format!("single{c}"));
        ok(&pack(&single, extra));
        let merged = d.path().join(format!("merged{c}"));
        let workers = if c % 2 == 0 { 3 } else { 2 };
        for w in 0..workers {
            let mut a = extra.to_vec();
            let sh = format!("{w}/{workers}");
            a.extend(["--shard", &sh]);
            ok(&pack(&merged, &a));
            if w == 0 {
                // Refused by name while the other workers have not run; nothing written.
                fails(
                    &run(&["merge", merged.to_str().unwrap()]),
                    2,
                    &format!("00001-of-{workers:05}"),
                );
                assert!(!merged.join("index.json").exists());
            }
        }
        // An interrupted part (complete: false) is refused by name; nothing written.
        let last = merged.join(format!(
            "parts/{:05}-of-{workers:05}/index.json",
            workers - 1
        ));
        let text = std::fs::read_to_string(&last).unwrap();
        std::fs::write(
            &last,
            text.replace("\"complete\": true", "\"complete\": false"),
        )
        .unwrap();
        fails(
            &run(&["merge", merged.to_str().unwrap()]),
            2,
            &format!("{:05}-of-{workers:05} (interrupted", workers - 1),
        );
        assert!(!merged.join("index.json").exists());
        std::fs::write(&last, text).unwrap();
        if c == 0 {
            // OUT holds a file no merge journal lists: refused by name, untouched, nothing
            // written (issue 18: never delete or overwrite what this tool did not write).
            std::fs::write(merged.join("part-00000.parquet"), b"not ours").unwrap();
            fails(
                &run(&["merge", merged.to_str().unwrap()]),
                2,
                "part-00000.parquet",
            );
            assert_eq!(
                std::fs::read(merged.join("part-00000.parquet")).unwrap(),
                b"not ours"
            );
            assert!(!merged.join("index.json").exists());
            std::fs::remove_file(merged.join("part-00000.parquet")).unwrap();
        }
        let out = ok(&run(&["merge", merged.to_str().unwrap(), "--json"]));
        assert!(
            !merged.join("parts").exists(),
            "parts removed after the merge"
        );
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["workers"], workers);
        let want = [
            "kind",
            "out",
            "workers",
            "format",
            "shards",
            "rows",
            "tokens",
            "documents",
            "seconds",
        ];
        assert_eq!(keys(&v), want);
        let (a, b) = (pack_common::tree(&single), pack_common::tree(&merged));
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "case {c}: files differ"
        );
        for (k, x) in &a {
            assert!(
                x == &b[k],
                "case {c}: {k} differs:\n{}\nvs\n{}",
                String::from_utf8_lossy(x)
                    .chars()
                    .take(3000)
                    .collect::<String>(),
                String::from_utf8_lossy(&b[k])
                    .chars()
                    .take(3000)
                    .collect::<String>()
            );
        }
    }
}

#[test]
fn fetch_log_parts_join_in_worker_order() {
    let d = tempfile::tempdir().unwrap();
    let manifest = d.path().join("m.toml");
    std::fs::write(&manifest, "").unwrap();
    let log = d.path().join("download.log");
    let line = |w: usize| format!("{{\"source\":\"s\",\"path\":\"f{w}\",\"verified\":true}}\n");
    std::fs::write(d.path().join("download.log.part-00001-of-00002"), line(1)).unwrap();
    let m = manifest.to_str().unwrap();
    let l = log.to_str().unwrap();
    fails(&run(&["merge", m, "--log", l]), 2, "00000-of-00002");
    assert!(!log.exists());
    std::fs::write(d.path().join("download.log.part-00000-of-00002"), line(0)).unwrap();
    let out = ok(&run(&["merge", m, "--log", l, "--json"]));
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(v["lines"], 2);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), line(0) + &line(1));
    assert!(!d.path().join("download.log.part-00000-of-00002").exists());
}

/// `mcq --shard I/N` workers (or a Slurm array's environment) + `merge` write exactly the
/// bytes of one `mcq` process: prompts.jsonl, and the SFT shards with their index.json in
/// every format, items over `--seq-len` left out alike.
#[test]
fn mcq_workers_merge_to_the_single_process_bytes() {
    use mcq_support::{p, run_mcq, world};
    let w = world();
    let tok = p(&w.tokenizer).to_string();
    // A --seq-len that leaves some items out, so the too-long counts are merged too.
    let probe = w.root().join("probe");
    let (code, _, err) = run_mcq(&w, &probe, &["--tokenizer", &tok]);
    assert_eq!(code, 0, "{err}");
    let mut lens: Vec<usize> = dlm_data::mcq::sft_shards::read_dir(&probe.join("sft"))
        .unwrap()
        .iter()
        .map(|r| r.input_ids.len())
        .collect();
    lens.sort();
    let seq_len = lens[lens.len() * 3 / 4].to_string();
    let cases: Vec<(Vec<&str>, usize)> = vec![
        (
            vec![
                "--tokenizer",
                &tok,
                "--format",
                "parquet",
                "--rows-per-shard",
                "7",
                "--seq-len",
                &seq_len,
            ],
            3,
        ),
        (
            vec![
                "--tokenizer",
                &tok,
                "--format",
                "mds",
                "--rows-per-shard",
                "5",
                "--seed",
                "4",
            ],
            2,
        ),
        (
            vec![
                "--tokenizer",
                &tok,
                "--format",
                "megatron",
                "--rows-per-shard",
                "4",
                "--seq-len",
                &seq_len,
            ],
            3,
        ),
        (vec!["--seed", "9"], 2),
    ];
    for (c, (extra, workers)) in cases.iter().enumerate() {
        let single = w.root().join(format!("mcq-single{c}"));
        let (code, _, err) = run_mcq(&w, &single, extra);
        assert_eq!(code, 0, "{err}");
        if c == 0 {
            let idx = dlm_data::shards::index::load_complete(&single.join("sft")).unwrap();
            assert!(idx.totals.skipped_filtered > 0, "some items are too long");
        }
        let merged = w.root().join(format!("mcq-merged{c}"));
        for k in 0..*workers {
            let mut a = vec![
                "mcq".to_string(),
                "--manifest".into(),
                p(&w.manifest).into(),
                "--cache".into(),
                p(&w.cache).into(),
                "--out".into(),
                p(&merged).into(),
            ];
            a.extend(extra.iter().map(|s| s.to_string()));
            let mut cmd = std::process::Command::new(bin());
            cmd.env("RUST_LOG", "warn")
                .env_remove("SLURM_ARRAY_TASK_ID")
                .env_remove("JOB_COMPLETION_INDEX");
            if c == 1 {
                // A Slurm array task: the slice comes from the environment.
                cmd.env("SLURM_ARRAY_TASK_ID", (k + 1).to_string())
                    .env("SLURM_ARRAY_TASK_MIN", "1")
                    .env("SLURM_ARRAY_TASK_COUNT", workers.to_string());
            } else {
                a.extend(["--shard".to_string(), format!("{k}/{workers}")]);
            }
            let o = cmd.args(&a).output().unwrap();
            ok(&o);
            assert!(merged
                .join(format!("parts/{k:05}-of-{workers:05}/prompts.jsonl"))
                .is_file());
            if k == 0 {
                // Refused by name while the other workers have not run; nothing written.
                fails(
                    &run(&["merge", merged.to_str().unwrap()]),
                    2,
                    &format!("00001-of-{workers:05}"),
                );
                assert!(!merged.join("prompts.jsonl").exists());
            }
        }
        if c == 0 {
            // An interrupted SFT part is refused by name; nothing written.
            let last = merged.join(format!(
                "parts/{:05}-of-{workers:05}/sft/index.json",
                workers - 1
            ));
            let text = std::fs::read_to_string(&last).unwrap();
            std::fs::write(
                &last,
                text.replace("\"complete\": true", "\"complete\": false"),
            )
            .unwrap();
            fails(
                &run(&["merge", merged.to_str().unwrap()]),
                2,
                &format!("{:05}-of-{workers:05} (sft/ interrupted", workers - 1),
            );
            assert!(!merged.join("prompts.jsonl").exists());
            std::fs::write(&last, text).unwrap();
        }
        let out = ok(&run(&["merge", merged.to_str().unwrap(), "--json"]));
        let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        assert_eq!(v["kind"], "mcq");
        assert_eq!(v["workers"], *workers);
        let k = keys(&v);
        assert_eq!(
            k[..5],
            ["kind", "out", "workers", "items", "prompts_sha256"]
        );
        assert!(k[5..] == [] as [&str; 0] || k[5..] == ["sft"], "{k:?}");
        assert!(
            !merged.join("parts").exists(),
            "parts removed after the merge"
        );
        let (a, b) = (pack_common::tree(&single), pack_common::tree(&merged));
        assert!(a.contains_key("prompts.jsonl"));
        assert_eq!(a.contains_key("sft/index.json"), c < 3, "case {c}");
        assert_eq!(
            a.keys().collect::<Vec<_>>(),
            b.keys().collect::<Vec<_>>(),
            "case {c}: files differ"
        );
        for (k, x) in &a {
            assert!(
                x == &b[k],
                "case {c}: {k} differs:\n{}\nvs\n{}",
                String::from_utf8_lossy(x)
                    .chars()
                    .take(3000)
                    .collect::<String>(),
                String::from_utf8_lossy(&b[k])
                    .chars()
                    .take(3000)
                    .collect::<String>()
            );
        }
    }
}
