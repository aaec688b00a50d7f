//! SIGTERM, SIGINT and SIGHUP stop a writing command at its next safe point instead of
//! killing it mid-write: the handler only records the signal; the stages call [`check`]
//! between units of committed work (a batch, a shard, a chunk of a download), which returns
//! [`crate::error::Interrupted`]. The error unwinds through the ordinary failure paths, which
//! remove temp files and leave the journal at its last commit; the process exits 128+signal
//! (see [`crate::error::exit_code`]). A second signal while stopping exits at once.
//!
//! [`pause_point`] is the test hook that makes concurrency and signal tests deterministic:
//! with `DLM_TEST_PAUSE=NAME` (or `NAME:K`, the K-th time the point is reached) and
//! `DLM_TEST_PAUSE_FILE=PATH`, the process writes its pid to PATH at the named point and
//! waits there until PATH is removed or a signal arrives. Tests wait for the file instead of
//! sleeping.

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::time::Duration;

use anyhow::Result;

static RECEIVED: AtomicI32 = AtomicI32::new(0);

/// The signals a writing command stops on.
pub const STOP_SIGNALS: [i32; 3] = [libc::SIGTERM, libc::SIGINT, libc::SIGHUP];

extern "C" fn on_signal(sig: libc::c_int) {
    // Only async-signal-safe calls here.
    if RECEIVED.swap(sig, Ordering::SeqCst) != 0 {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Install the handlers (commands that write outputs call this first).
pub fn install() {
    for sig in STOP_SIGNALS {
        // SAFETY: a plain handler that only touches an atomic (or calls _exit).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// [`install`], plus a watchdog for the promise that every command ends within 5 s of a stop
/// signal: once a signal has gone `grace` without the command stopping at a safe point (a
/// read-only command has none: grace 0; a writer's safe points come well within its grace),
/// `on_deadline` runs on the watchdog's thread (the CLI prints the `--json` line and exits
/// 128+N). Every write is atomic, so an exit there leaves no partial output looking complete.
pub fn install_with_deadline(grace: Duration, on_deadline: fn(i32)) {
    install();
    let spawned = std::thread::Builder::new()
        .name("stop-watchdog".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(20));
            if let Some(sig) = received() {
                std::thread::sleep(grace);
                on_deadline(sig);
                return;
            }
        });
    // No thread (resource limits): the safe points alone stop the command.
    drop(spawned);
}

/// The signal received so far, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// A safe point: `Err(Interrupted)` once a stop signal has arrived.
pub fn check() -> Result<()> {
    match received() {
        None => Ok(()),
        Some(s) => Err(anyhow::Error::new(crate::error::Interrupted(s))),
    }
}

/// Resolves once a stop signal has arrived (for `select!` around network waits).
pub async fn stopped() -> crate::error::Interrupted {
    loop {
        if let Some(s) = received() {
            return crate::error::Interrupted(s);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub use crate::error::signal_name as name;

static PAUSE_HITS: AtomicU32 = AtomicU32::new(0);

/// The test hook (see the module doc): pause at `point` when `DLM_TEST_PAUSE` names it.
pub fn pause_point(point: &str) {
    let Some(want) = crate::tuning::test_pause() else {
        return;
    };
    let (name, nth) = match want.split_once(':') {
        Some((n, k)) => (n, k.parse::<u32>().unwrap_or(1)),
        None => (want.as_str(), 1),
    };
    if name != point {
        return;
    }
    if PAUSE_HITS.fetch_add(1, Ordering::SeqCst) + 1 != nth {
        return;
    }
    let Some(file) = crate::tuning::test_pause_file() else {
        return;
    };
    let file = std::path::PathBuf::from(file);
    let tmp = file.with_extension("tmp-pause");
    if std::fs::write(&tmp, std::process::id().to_string()).is_err()
        || std::fs::rename(&tmp, &file).is_err()
    {
        return;
    }
    while file.exists() && received().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::name(libc::SIGTERM), "SIGTERM");
        assert_eq!(super::name(libc::SIGHUP), "SIGHUP");
        assert_eq!(super::name(99), "signal 99");
    }
}
