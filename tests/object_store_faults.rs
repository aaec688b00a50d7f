//! Issue 54 item 6: `pack --out s3://…` through a fault-injecting proxy (tests/objstore_support/
//! faultproxy.py) in front of the moto server. Transient faults — 503 SlowDown, a connection
//! reset in the middle of an upload, a 500 on a PUT, answers slower than the client's timeout —
//! are retried and the output is byte-identical to the local run's; a multipart completion that
//! keeps failing ends the run with exit 1 naming the object and the operation, the upload
//! aborted, nothing committed, and the rerun (faults gone) resumes to the same bytes.

mod objstore_support;
mod pack_common;

use std::path::Path;
use std::process::Output;

use objstore_support::faults::FaultProxy;
use objstore_support::*;
use pack_common::*;
use serde_json::json;

#[path = "objstore_support/pack_fixture.rs"]
mod pack_fixture;
use pack_fixture::{PackFx, BUCKET, EXTRA};

/// The pack world with the fault proxy in front of its server.
struct Fx {
    p: PackFx,
    proxy: FaultProxy,
}

impl std::ops::Deref for Fx {
    type Target = PackFx;
    fn deref(&self) -> &PackFx {
        &self.p
    }
}

fn fixture(moto_env: &[(&str, &str)]) -> Fx {
    let p = PackFx::new(23, 400, moto_env);
    let proxy = FaultProxy::start(&p.s3, p.dir.path());
    Fx { p, proxy }
}

impl Fx {
    /// `pack --out URL` through the proxy, with `env` added.
    fn pack(&self, url: &str, env: &[(&str, &str)]) -> Output {
        let mut c = std::process::Command::new(bin());
        c.args(pack_args(&self.input, &self.tok, Path::new(url), EXTRA));
        self.proxy
            .apply(&self.s3, &mut c, &self.dir.path().join("staging"));
        c.envs(env.iter().copied());
        c.output().unwrap()
    }
    /// How many requests `method` on a path ending in `tail` the proxy saw, and how many of
    /// those it answered with `fault`.
    fn count(&self, method: &str, tail: &str, fault: Option<&str>) -> (usize, usize) {
        let seen = self.proxy.seen();
        let hits: Vec<_> = seen
            .iter()
            .filter(|s| s.method == method && s.path.ends_with(tail))
            .collect();
        let faulted = hits.iter().filter(|s| s.fault.as_deref() == fault).count();
        (hits.len(), faulted)
    }
}

fn no_secret(o: &Output) {
    let all = format!("{}{}", stderr(o), String::from_utf8_lossy(&o.stdout));
    for s in [SECRET, SESSION, "uploadId=", "X-Amz-"] {
        assert!(!all.contains(s), "{s} reached the output:\n{all}");
    }
}

#[test]
fn transient_faults_are_retried_and_the_output_is_byte_identical() {
    let fx = fixture(&[]);
    let local = fx.local();
    let p = "/dlm-test/runs/t";
    fx.proxy.arm(json!([
        // Answers slower than the client's timeout (AWS_TIMEOUT=2s): the (safe) request is retried.
        {"method": "GET", "path": format!("^{p}/index\\.json$"), "fault": "delay", "seconds": 4, "times": 1},
        {"method": "PUT", "path": format!("^{p}/data/part-00001\\.parquet$"), "fault": "status", "status": 503, "code": "SlowDown", "times": 2},
        {"method": "PUT", "path": format!("^{p}/data/part-00002\\.parquet$"), "fault": "reset", "times": 1},
        {"method": "PUT", "path": format!("^{p}/README\\.md$"), "fault": "status", "status": 500, "code": "InternalError", "times": 1},
        // A slow answer within the timeout: waited for.
        {"method": "PUT", "path": format!("^{p}/index\\.json$"), "fault": "delay", "seconds": 1, "times": 1},
    ]));
    let o = fx.pack("s3://dlm-test/runs/t", &[("AWS_TIMEOUT", "2s")]);
    ok(&o);
    no_secret(&o);
    same_shards(&local, &fx.remote("runs/t").1);
    // Every fault fired, and each faulted request was sent again.
    let (n, f) = fx.count("PUT", "/data/part-00001.parquet", Some("status"));
    assert_eq!(f, 2, "503 SlowDown fired {f} times");
    assert!(
        n >= 3,
        "part-00001 was sent {n} times: not retried past SlowDown"
    );
    let (n, f) = fx.count("PUT", "/data/part-00002.parquet", Some("reset"));
    assert_eq!(f, 1);
    assert!(n >= 2, "part-00002 was not sent again after the reset");
    let (n, f) = fx.count("PUT", "/runs/t/README.md", Some("status"));
    assert_eq!((f, n >= 2), (1, true), "README.md: {n} PUTs");
    let (n, f) = fx.count("GET", "/runs/t/index.json", Some("delay"));
    assert_eq!(f, 1);
    assert!(
        n >= 2,
        "the slow GET of index.json was not retried after the timeout"
    );
    assert_eq!(fx.count("PUT", "/runs/t/index.json", Some("delay")).1, 1);
    assert_eq!(fx.s3.open_uploads(BUCKET), 0);
}

#[test]
fn a_failing_multipart_completion_exits_1_naming_the_object_and_the_rerun_resumes() {
    // Small parts so the 8 KiB shards go up as multipart uploads (moto allows small parts).
    let fx = fixture(&[("S3_UPLOAD_PART_MIN_SIZE", "256")]);
    let local = fx.local();
    let env = [
        ("DLM_DATA_PART_BYTES", "2KiB"),
        ("DLM_DATA_S3_RETRIES", "2"),
        ("DLM_DATA_S3_RETRY_SECS", "20"),
    ];
    fx.proxy.arm(json!([
        {"method": "POST", "path": "^/dlm-test/runs/m/data/part-00003\\.parquet$", "query": "uploadId=",
         "fault": "status", "status": 500, "code": "InternalError", "times": 1000},
    ]));
    let o = fx.pack("s3://dlm-test/runs/m", &env);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    no_secret(&o);
    let err = stderr(&o);
    assert!(
        err.contains(
            "completing the multipart upload of s3://dlm-test/runs/m/data/part-00003.parquet"
        ),
        "the error does not name the object and the operation:\n{err}"
    );
    let (_, f) = fx.count("POST", "/data/part-00003.parquet", Some("status"));
    assert!(f >= 2, "the completion was not retried ({f} attempts)");
    // Nothing committed, no upload left open, other shards multipart too.
    let keys = fx.s3.keys(BUCKET, "runs/m");
    assert!(!keys.iter().any(|k| k == "index.json"), "{keys:?}");
    assert_eq!(fx.s3.open_uploads(BUCKET), 0, "an upload was left open");
    assert!(
        fx.proxy
            .seen()
            .iter()
            .any(|s| s.method == "PUT" && s.query.contains("partNumber=")),
        "no multipart upload was made: the test does not test completion"
    );

    // The fault goes away: the same command resumes and ends byte-identical.
    fx.proxy.arm(json!([]));
    let o = fx.pack("s3://dlm-test/runs/m", &env);
    ok(&o);
    same_shards(&local, &fx.remote("runs/m").1);
    assert_eq!(fx.s3.open_uploads(BUCKET), 0);
}
