//! Issue 54's end to end: the README's pipeline (read from README.md itself, as
//! tests/pipeline.rs runs it) with every shard, prompts and distilled output on a bucket (moto
//! on loopback), lineage.json too: each command exits 0, the audit of the bucket outputs says every link holds,
//! the objects are the local run's bytes, and a second round is a no-op.

mod fixture_dirs;
mod objstore_support;

use std::process::Output;

use fixture_dirs::{files_under, readme_commands, work, Work};
use objstore_support::S3Server;

const BUCKET: &str = "dlm-test";

/// A README path that is an output (or an output read back), on the bucket.
fn on_bucket(arg: &str) -> String {
    if arg.starts_with("shards/") || arg == "distilled.json" || arg == "lineage.json" {
        format!("s3://{BUCKET}/{arg}")
    } else {
        arg.to_string()
    }
}

fn run(w: &Work, s3: &S3Server, args: &[String]) -> Output {
    let mut c = w.cmd();
    s3.apply(&mut c, &w.root().join("staging"));
    c.args(args).output().unwrap()
}

#[test]
fn the_readme_pipeline_runs_with_every_output_on_a_bucket_and_audits_clean() {
    let cmds = readme_commands();
    // The local run, for the bytes.
    let local = work();
    for c in &cmds {
        let o = local.run(c);
        assert_eq!(o.status.code(), Some(0), "local `{}` failed", c.join(" "));
    }
    let w = work();
    let s3 = S3Server::start();
    s3.create_bucket(BUCKET);
    let bucket_cmds: Vec<Vec<String>> = cmds
        .iter()
        .map(|c| {
            let mut v: Vec<String> = c.iter().map(|a| on_bucket(a)).collect();
            // `lineage add` writes lineage.json (by default beside the working directory).
            if c[0] == "lineage" && !c.iter().any(|a| a == "--lineage") {
                v.extend(["--lineage".into(), format!("s3://{BUCKET}/lineage.json")]);
            }
            v
        })
        .collect();
    assert!(
        bucket_cmds
            .iter()
            .filter(|c| c.iter().any(|a| a.starts_with("s3://")))
            .count()
            >= 8,
        "the README's outputs did not move to the bucket: {bucket_cmds:?}"
    );
    for round in 1..=2 {
        for c in &bucket_cmds {
            let o = run(&w, &s3, c);
            assert_eq!(
                o.status.code(),
                Some(0),
                "round {round}: `dlm-data {}` failed:\n{}",
                c.join(" "),
                String::from_utf8_lossy(&o.stderr)
            );
            if c[0] == "audit" {
                let out = String::from_utf8_lossy(&o.stdout);
                assert!(out.contains("every link holds"), "{out}");
            }
        }
        // Nothing of the outputs is local: no shards/ directory, distilled.json, lineage.json.
        for name in ["shards", "distilled.json", "lineage.json"] {
            assert!(!w.root().join(name).exists(), "{name} was written locally");
        }
    }
    // The bucket holds the local run's bytes: every file of shards/ and distilled.json.
    let got = w.root().join("got");
    for prefix in ["shards", "distilled.json.parts"] {
        s3.download(BUCKET, prefix, &got.join(prefix));
    }
    let o = s3.boto(
        "s3.download_file(sys.argv[1], 'distilled.json', sys.argv[2])",
        &[BUCKET, &got.join("distilled.json").display().to_string()],
    );
    assert!(o.status.success());
    let mut compared = 0;
    for (rel, p) in files_under(&local.root().join("shards")) {
        let hidden = rel.split('/').any(|c| c.starts_with('.'));
        if hidden || rel.ends_with("decontam.json") {
            continue; // locks; the reports name the scanned path (a URL on the bucket)
        }
        let remote = got.join("shards").join(&rel);
        assert!(remote.exists(), "shards/{rel} is not on the bucket");
        let (a, b) = (std::fs::read(&p).unwrap(), std::fs::read(&remote).unwrap());
        if rel.ends_with("index.json") {
            // The index names its output (a URL on the bucket); the shards it lists are equal.
            let j = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap();
            assert_eq!(j(&a)["shards"], j(&b)["shards"], "shards/{rel}");
        } else {
            assert!(a == b, "shards/{rel} differs from the local run's");
        }
        compared += 1;
    }
    assert!(compared > 5, "{compared} files compared");
    // distilled.json: the same records, but for the teacher's path (each run's own directory).
    let records = |p: &std::path::Path| {
        let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
        for r in v.as_array_mut().unwrap() {
            r["teacher"]["path"] = serde_json::Value::Null;
        }
        v
    };
    let (l, r) = (
        records(&local.root().join("distilled.json")),
        records(&got.join("distilled.json")),
    );
    assert!(l.as_array().unwrap().len() > 2);
    assert!(
        l == r,
        "distilled.json's records differ from the local run's"
    );
}
