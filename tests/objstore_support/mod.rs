//! Why a support module: the object-storage tests run `dlm-data` against a real S3-compatible
//! server on loopback — moto's standalone server (`moto[server]` from PyPI, installed into
//! `.venv-s3` by `make objstore-venv`, part of `make test`'s TEST_DEPS) — started on a free
//! port per test, with a bucket created, the child's AWS_* environment set, and the server
//! killed when the test ends. Objects are read back through boto3 from the same venv.
#![allow(dead_code)]

pub mod faults;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The fake credentials every test uses (moto accepts any); the secret and the session token
/// are distinctive so a leak is found by a substring search.
pub const KEY_ID: &str = "AKIDOBJSTORETEST0001";
pub const SECRET: &str = "s3cr3t/Key+ObjStore=Never-Printed-7f3a";
pub const SESSION: &str = "FwoGZXIvYXdzSessionTokenObjStore//Never+Printed==";

pub fn venv() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-s3")
}

/// A moto server on 127.0.0.1, killed on drop.
pub struct S3Server {
    child: Child,
    pub port: u16,
    pub endpoint: String,
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl S3Server {
    /// Start moto and wait until it answers.
    pub fn start() -> S3Server {
        S3Server::start_with(&[])
    }

    /// Start moto with `env` set on it (e.g. moto's `S3_UPLOAD_PART_MIN_SIZE`).
    pub fn start_with(env: &[(&str, &str)]) -> S3Server {
        let exe = std::env::var_os("DLM_MOTO_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|| venv().join("bin/moto_server"));
        assert!(
            exe.exists(),
            "{} is missing: run `make objstore-venv` (moto[server] from PyPI)",
            exe.display()
        );
        for _ in 0..5 {
            let port = free_port();
            let child = Command::new(&exe)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .envs(env.iter().copied())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut s = S3Server {
                child,
                port,
                endpoint: format!("http://127.0.0.1:{port}"),
            };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(60) {
                if let Ok(Some(_)) = s.child.try_wait() {
                    break; // the port was taken meanwhile: another one
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return s;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = s.child.kill();
        }
        panic!("moto_server did not start");
    }

    /// The environment a `dlm-data` child needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", KEY_ID.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET.to_string()),
            ("AWS_SESSION_TOKEN", SESSION.to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".to_string()),
        ]
    }

    /// Set [`S3Server::env`] (and a staging directory under `staging`) on `cmd`.
    pub fn apply(&self, cmd: &mut Command, staging: &Path) {
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        cmd.env("DLM_DATA_STAGING", staging);
    }

    /// Run a boto3 snippet (`s3` is the client, `sys.argv[1:]` the arguments).
    pub fn boto(&self, script: &str, args: &[&str]) -> Output {
        let prog = format!(
            "import sys, boto3\ns3 = boto3.client('s3', endpoint_url='{}', region_name='us-east-1', aws_access_key_id='x', aws_secret_access_key='y')\n{script}",
            self.endpoint
        );
        let o = Command::new(venv().join("bin/python"))
            .arg("-c")
            .arg(prog)
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "boto3 failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }

    pub fn create_bucket(&self, name: &str) {
        self.boto("s3.create_bucket(Bucket=sys.argv[1])", &[name]);
    }

    /// Every object under `prefix/` copied into `dir` (relative names kept).
    pub fn download(&self, bucket: &str, prefix: &str, dir: &Path) {
        self.boto(
            "import os\nb, p, d = sys.argv[1:4]\nfor page in s3.get_paginator('list_objects_v2').paginate(Bucket=b, Prefix=p + '/'):\n    for o in page.get('Contents', []):\n        rel = o['Key'][len(p) + 1:]\n        dst = os.path.join(d, rel)\n        os.makedirs(os.path.dirname(dst), exist_ok=True)\n        s3.download_file(b, o['Key'], dst)\n",
            &[bucket, prefix, &dir.display().to_string()],
        );
    }

    /// The keys under `prefix/`, relative to it.
    pub fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let o = self.boto(
            "b, p = sys.argv[1:3]\nfor page in s3.get_paginator('list_objects_v2').paginate(Bucket=b, Prefix=p + '/'):\n    for o in page.get('Contents', []):\n        print(o['Key'][len(p) + 1:])\n",
            &[bucket, prefix],
        );
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect()
    }

    /// Upload every file under `dir` (hidden ones too) to `prefix/REL` of `bucket`.
    pub fn upload_dir(&self, bucket: &str, prefix: &str, dir: &Path) {
        self.boto(
            "import os\nb, p, d = sys.argv[1:4]\nfor root, _, files in os.walk(d):\n    for f in files:\n        full = os.path.join(root, f)\n        s3.upload_file(full, b, p + '/' + os.path.relpath(full, d))\n",
            &[bucket, prefix, &dir.display().to_string()],
        );
    }

    /// Put `body` at `key`.
    pub fn put(&self, bucket: &str, key: &str, body: &str) {
        self.boto(
            "s3.put_object(Bucket=sys.argv[1], Key=sys.argv[2], Body=sys.argv[3].encode())",
            &[bucket, key, body],
        );
    }

    /// Multipart uploads still open under the bucket.
    pub fn open_uploads(&self, bucket: &str) -> usize {
        let o = self.boto(
            "print(len(s3.list_multipart_uploads(Bucket=sys.argv[1]).get('Uploads', [])))",
            &[bucket],
        );
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    }
}

/// Shards equal byte for byte, and index.json lists the same shards (names, sha256, sizes)
/// and totals, complete (`local` and `remote`: relative name → bytes of two outputs).
pub fn same_shards(
    local: &std::collections::BTreeMap<String, Vec<u8>>,
    remote: &std::collections::BTreeMap<String, Vec<u8>>,
) {
    let shard = |k: &String| k.starts_with("data/");
    let l: Vec<_> = local.iter().filter(|(k, _)| shard(k)).collect();
    let r: Vec<_> = remote.iter().filter(|(k, _)| shard(k)).collect();
    assert!(l.len() > 3, "expected several shards, got {}", l.len());
    assert_eq!(l.len(), r.len(), "shard sets differ");
    for ((lk, lv), (rk, rv)) in l.iter().zip(&r) {
        assert_eq!(lk, rk);
        assert!(lv == rv, "{lk} differs from the local run's");
    }
    let li: serde_json::Value = serde_json::from_slice(&local["index.json"]).unwrap();
    let ri: serde_json::Value = serde_json::from_slice(&remote["index.json"]).unwrap();
    assert_eq!(li["shards"], ri["shards"]);
    assert_eq!(li["totals"], ri["totals"]);
    assert_eq!(ri["complete"], true);
}
