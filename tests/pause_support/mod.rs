//! Why a support module: the concurrency and signal tests are deterministic by running a
//! command until it pauses at a named point (`DLM_TEST_PAUSE`, see `dlm_data::signals`) and
//! waiting for its pause file, never for a time; safety, cron-contract and hostile-outputs
//! tests all start their commands this way.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Start `cmd` (warnings only, output piped) paused at `point` (`NAME` or `NAME:K`); returns
/// once it is there, with the pause file to remove to let it go on.
pub fn spawn_paused(cmd: Command, point: &str, dir: &Path) -> (Child, PathBuf) {
    spawn_paused_within(cmd, point, dir, Duration::from_secs(120))
}

/// [`spawn_paused`] for a point that may take up to `limit` to reach (a whole night's steps).
pub fn spawn_paused_within(
    mut cmd: Command,
    point: &str,
    dir: &Path,
    limit: Duration,
) -> (Child, PathBuf) {
    let file = dir.join(format!("pause-{}", point.replace(':', "-")));
    let _ = std::fs::remove_file(&file);
    cmd.env("DLM_TEST_PAUSE", point)
        .env("DLM_TEST_PAUSE_FILE", &file)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let t0 = Instant::now();
    while !file.exists() {
        if let Some(st) = child.try_wait().unwrap() {
            let o = child.wait_with_output().unwrap();
            panic!(
                "exited ({st}) before reaching {point}:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        assert!(t0.elapsed() < limit, "never reached {point}");
        std::thread::sleep(Duration::from_millis(5));
    }
    (child, file)
}

/// Send `sig` to our own child.
pub fn signal(child: &Child, sig: i32) {
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, sig) };
}
