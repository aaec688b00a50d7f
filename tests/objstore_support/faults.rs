//! Why a proxy handle: issue 54's fault tests put `faultproxy.py` (beside this file) between
//! `dlm-data` and the moto server, arm rules (503 SlowDown, a reset mid-upload, a delay, a 500
//! on the multipart completion) and read back which requests each fault hit.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, venv, S3Server};

/// The proxy process, killed on drop.
pub struct FaultProxy {
    child: Child,
    pub endpoint: String,
    rules: PathBuf,
    log: PathBuf,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request the proxy saw.
#[derive(Debug, serde::Deserialize)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub query: String,
    pub fault: Option<String>,
}

impl FaultProxy {
    /// Start the proxy in front of `s3`, keeping its rules and log under `dir`.
    pub fn start(s3: &S3Server, dir: &Path) -> FaultProxy {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/objstore_support/faultproxy.py");
        let rules = dir.join("faults.json");
        let log = dir.join("faults.log.jsonl");
        std::fs::write(&rules, "[]").unwrap();
        for _ in 0..5 {
            let port = free_port();
            let mut child = Command::new(venv().join("bin/python"))
                .arg(&script)
                .args([port.to_string(), s3.endpoint.clone()])
                .arg(&rules)
                .arg(&log)
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap();
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(30) {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    return FaultProxy {
                        child,
                        endpoint: format!("http://127.0.0.1:{port}"),
                        rules,
                        log,
                    };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
        }
        panic!("faultproxy.py did not start");
    }

    /// Replace the armed rules (a JSON list, see faultproxy.py) and forget the log.
    pub fn arm(&self, rules: serde_json::Value) {
        let tmp = self.rules.with_extension("tmp");
        std::fs::write(&tmp, rules.to_string()).unwrap();
        std::fs::rename(&tmp, &self.rules).unwrap();
        let _ = std::fs::remove_file(&self.log);
    }

    /// Every request seen since the last [`FaultProxy::arm`].
    pub fn seen(&self) -> Vec<Seen> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// Set `s3`'s environment on `cmd`, the endpoint being this proxy.
    pub fn apply(&self, s3: &S3Server, cmd: &mut Command, staging: &Path) {
        s3.apply(cmd, staging);
        cmd.env("AWS_ENDPOINT_URL", &self.endpoint);
    }
}
