//! Why a lease object: a bucket has no `flock`, and two machines writing one prefix (overlapping
//! cron starts, a requeued array task) must never interleave. The writer creates
//! `PREFIX/.dlm-data.lease` with a create-only conditional PUT (`If-None-Match: *`), naming
//! its pid, host, command line and start time, and renews it every [`ttl`]/4 with a
//! conditional replace (`If-Match` on the ETag it last wrote). A second writer finds it and
//! stops with [`crate::error::Busy`] (exit 75) naming the holder. A lease not renewed for
//! [`ttl`] (the holder died on another machine), or one whose holder is a dead process on this
//! host, is taken over with a conditional replace — of two takers exactly one wins. A holder
//! whose renewal fails with a changed ETag has lost the lease and commits nothing
//! ([`Lease::check`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, Result};
use serde::{Deserialize, Serialize};

use super::store::{Bucket, Put};

/// The lease object's name, relative to the output prefix.
pub const LEASE_FILE: &str = ".dlm-data.lease";

/// The lease object's body.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LeaseRecord {
    pub pid: u32,
    pub host: String,
    pub command: String,
    /// RFC 3339, when the holder started.
    pub started: String,
    /// Unix seconds of the last renewal (the holder's clock).
    pub renewed_unix: u64,
    /// Seconds without renewal after which the lease may be taken over.
    pub ttl_secs: u64,
    /// Random per holder: tells our own lease from a taker's.
    pub token: String,
}

/// How long a lease lives without renewal: `DLM_DATA_LEASE_SECS`, default 60.
pub fn ttl() -> Duration {
    Duration::from_secs(super::settings::lease_ttl_secs())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return "?".into();
    }
    let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

fn command_line() -> String {
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    super::store::clean(&args.join(" "))
}

impl LeaseRecord {
    fn stale(&self, at: u64) -> bool {
        at > self.renewed_unix.saturating_add(self.ttl_secs)
    }
    /// Held by a process of this host that no longer exists (killed): its lease is free, as
    /// a dead process's flock is.
    fn dead_here(&self) -> bool {
        self.host == hostname()
            && self.pid != std::process::id()
            && !crate::util::pid_alive(self.pid)
    }
    fn describe(&self) -> String {
        format!(
            "pid {} on host {} (`{}`, started {}; renewed {}, free after {} s without renewal)",
            self.pid,
            self.host,
            self.command,
            self.started,
            crate::util::rfc3339(self.renewed_unix),
            self.ttl_secs
        )
    }
}

/// [`Lease::check`] from another thread.
#[derive(Clone)]
pub struct LeaseWatch {
    lost: Arc<Mutex<Option<String>>>,
    name: String,
}

impl LeaseWatch {
    pub fn check(&self) -> Result<()> {
        match &*self.lost.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(why) => Err(anyhow!(
                "{}: the lease was lost ({why}); nothing more is written by this run",
                self.name
            )),
        }
    }
}

/// A held lease, renewed on a thread until released.
pub struct Lease {
    bucket: Arc<Bucket>,
    rel: String,
    record: LeaseRecord,
    lost: Arc<Mutex<Option<String>>>,
    stop: Arc<AtomicBool>,
    renewer: Option<JoinHandle<()>>,
}

impl Lease {
    /// Take the lease of the output under `dir` (`""` or a part's `parts/...`), or fail with
    /// Busy (exit 75) naming the holder. `what` is the command, for the message.
    pub fn acquire(bucket: Arc<Bucket>, dir: &str, what: &str) -> Result<Lease> {
        let rel = if dir.is_empty() {
            LEASE_FILE.to_string()
        } else {
            format!("{dir}/{LEASE_FILE}")
        };
        Self::acquire_at(bucket, dir, rel, what)
    }

    /// [`Lease::acquire`] of the lease object `rel` guarding the output `dir` (a single-object
    /// output's lease sits beside it, not in a directory of its own: [`super::file_output`]).
    pub fn acquire_at(bucket: Arc<Bucket>, dir: &str, rel: String, what: &str) -> Result<Lease> {
        let ttl = ttl().as_secs();
        let mut record = LeaseRecord {
            pid: std::process::id(),
            host: hostname(),
            command: command_line(),
            started: crate::util::now_rfc3339(),
            renewed_unix: now(),
            ttl_secs: ttl,
            token: format!("{:016x}{:08x}", rand_u64(), std::process::id()),
        };
        for _ in 0..4 {
            record.renewed_unix = now();
            let body = serde_json::to_vec_pretty(&record)?;
            match bucket.put(&rel, body.clone(), object_store::PutMode::Create)? {
                Put::Done(etag) => return Ok(Self::start(bucket, rel, record, etag)),
                Put::Conflict => {}
            }
            let Some((bytes, etag)) = bucket.get(&rel)? else {
                continue; // released meanwhile: try to create it again
            };
            let held: Option<LeaseRecord> = serde_json::from_slice(&bytes).ok();
            let free = match &held {
                None => true, // not a lease this tool wrote: treated as stale
                Some(h) => h.stale(now()) || h.dead_here(),
            };
            if !free {
                let h = held.expect("checked above");
                return Err(anyhow::Error::new(crate::error::Busy(format!(
                    "{}: another dlm-data {what} is writing it: {}; lease {}. Wait for it to finish (or stop it)",
                    bucket.name(dir),
                    h.describe(),
                    bucket.name(&rel)
                ))));
            }
            if let Some(h) = &held {
                tracing::warn!(
                    "{}: taking over the lease of {} ({})",
                    bucket.name(dir),
                    h.describe(),
                    if h.dead_here() {
                        "that process is gone"
                    } else {
                        "not renewed in time"
                    }
                );
            }
            if let Put::Done(etag) = bucket.replace(&rel, body, etag)? {
                return Ok(Self::start(bucket, rel, record, etag));
            }
            // Another taker won the replace: look again (it will be live now).
        }
        Err(anyhow!(
            "{}: could not take the lease {} (it changed under every attempt)",
            bucket.name(dir),
            bucket.name(&rel)
        ))
    }

    fn start(bucket: Arc<Bucket>, rel: String, record: LeaseRecord, etag: Option<String>) -> Lease {
        let etag = Arc::new(Mutex::new(etag));
        let lost = Arc::new(Mutex::new(None));
        let stop = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (bucket, rel, record, etag, lost, stop) = (
                bucket.clone(),
                rel.clone(),
                record.clone(),
                etag.clone(),
                lost.clone(),
                stop.clone(),
            );
            std::thread::Builder::new()
                .name("lease-renewer".into())
                .spawn(move || renew_loop(&bucket, &rel, record, &etag, &lost, &stop))
                .ok()
        };
        Lease {
            bucket,
            rel,
            record,
            lost,
            stop,
            renewer,
        }
    }

    /// A handle that tells, from another thread, whether the lease is still held.
    pub fn watch(&self) -> LeaseWatch {
        LeaseWatch {
            lost: self.lost.clone(),
            name: self.bucket.name(&self.rel),
        }
    }

    /// Fails when the lease was lost (taken over, or not renewable): the run must not commit.
    pub fn check(&self) -> Result<()> {
        self.watch().check()
    }

    /// Stop renewing and delete the lease when it is still ours.
    pub fn release(mut self) -> Result<()> {
        self.stop_renewer();
        let Some((bytes, _)) = self.bucket.get(&self.rel)? else {
            return Ok(());
        };
        let ours = serde_json::from_slice::<LeaseRecord>(&bytes)
            .map(|r| r.token == self.record.token)
            .unwrap_or(false);
        if ours {
            self.bucket.delete(&self.rel)?;
        }
        Ok(())
    }

    fn stop_renewer(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.renewer.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.stop_renewer();
    }
}

fn renew_loop(
    bucket: &Bucket,
    rel: &str,
    mut record: LeaseRecord,
    etag: &Mutex<Option<String>>,
    lost: &Mutex<Option<String>>,
    stop: &AtomicBool,
) {
    let every = Duration::from_millis((record.ttl_secs * 1000 / 4).max(250));
    let mut last_ok = std::time::Instant::now();
    loop {
        std::thread::park_timeout(every);
        if stop.load(Ordering::SeqCst) {
            return;
        }
        record.renewed_unix = now();
        let body = serde_json::to_vec_pretty(&record).unwrap_or_default();
        let current = etag.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match bucket.replace(rel, body, current) {
            Ok(Put::Done(e)) => {
                *etag.lock().unwrap_or_else(|p| p.into_inner()) = e;
                last_ok = std::time::Instant::now();
            }
            Ok(Put::Conflict) => {
                *lost.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some("another process replaced it".into());
                return;
            }
            Err(e) => {
                tracing::warn!("renewing the lease: {e:#}");
                if last_ok.elapsed().as_secs() >= record.ttl_secs {
                    *lost.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(format!("not renewed for {} s", record.ttl_secs));
                    return;
                }
            }
        }
    }
}

/// A random-enough u64 for the lease token (time, pid and an address; no RNG crate needed).
fn rand_u64() -> u64 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let x = &t as *const u64 as u64;
    let mut s = crate::util::SplitMix(t ^ x.rotate_left(17) ^ u64::from(std::process::id()));
    s.next_u64()
}
