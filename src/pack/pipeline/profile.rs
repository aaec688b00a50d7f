//! `DLM_PACK_PROFILE=1`: where a pack run's time goes, per pipeline stage, printed on stderr at
//! the end (`pack profile: ...`). The serial stages (reader thread, packer on the main thread,
//! committer thread) each cap the run at tokens ÷ their busy seconds; the line names those caps,
//! so a run that stops scaling says which stage stopped it, and `pool busy` is the share of
//! threads × wall the rayon pool spent tokenizing and encoding row groups (time measured per
//! task: on an oversubscribed box it counts preemption too). Off, it costs one relaxed load per
//! measured section.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

/// Nanoseconds per stage (summed over threads for the parallel ones).
#[derive(Default)]
pub(super) struct Profile {
    /// Reader thread: decoding input, rendering rows (busy), and blocked handing batches on.
    pub read_busy: AtomicU64,
    pub read_blocked: AtomicU64,
    /// Screening + tokenizing batches: time per document summed over the pool's threads
    /// (`tokenize_cpu`), and the CPU time the threads actually got (`tokenize_thread_cpu`; less
    /// when other threads preempted them).
    pub tokenize_cpu: AtomicU64,
    pub tokenize_thread_cpu: AtomicU64,
    /// Main thread: packing documents into rows and shards.
    pub pack: AtomicU64,
    /// Main thread: waiting for the reader, for tokenized batches, for the writer.
    pub wait_read: AtomicU64,
    pub wait_tokenize: AtomicU64,
    pub wait_write: AtomicU64,
    /// Shard threads: row conversion, splicing row groups (their encoding and compression
    /// runs on the rayon pool), and waiting for those row groups (`encode_wait`, part of it).
    pub encode_cpu: AtomicU64,
    pub encode_wait: AtomicU64,
    /// Streamed parquet row groups encoded and compressed on the rayon pool (summed).
    pub encode_pool: AtomicU64,
    /// Committer thread: writing, fsync and journaling shards in order.
    pub write_io: AtomicU64,
    /// Committer thread: waiting for the next shard's encoder.
    pub write_wait: AtomicU64,
    /// Timeline, nanoseconds since [`start`] (+1, so 0 is unset): setup done (tokenizer
    /// loaded, journal opened), the first and the last tokenized batch taken by the packer, the
    /// packer done, the writer done (last shard and index.json on disk). Start-up and tail
    /// show here, apart from the steady state between.
    pub at_setup: AtomicU64,
    pub at_first_batch: AtomicU64,
    pub at_last_batch: AtomicU64,
    pub at_packed: AtomicU64,
    pub at_written: AtomicU64,
}

static ORIGIN: OnceLock<Instant> = OnceLock::new();

/// The run starts now (the timeline's zero); `on`: the profile is taken (`DLM_PACK_PROFILE`,
/// read by [`crate::tuning`]).
pub(super) fn start(on: bool) {
    if on {
        ON.store(true, Ordering::Relaxed);
        let _ = ORIGIN.set(Instant::now());
    }
}

static ON: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set a timeline mark to now; `first`: only if unset.
pub(super) fn mark(at: impl Fn(&Profile) -> &AtomicU64, first: bool) {
    let Some(o) = ORIGIN.get().filter(|_| enabled()) else {
        return;
    };
    let ns = o.elapsed().as_nanos() as u64 + 1;
    let a = at(PROFILE.get_or_init(Profile::default));
    if first {
        let _ = a.compare_exchange(0, ns, Ordering::Relaxed, Ordering::Relaxed);
    } else {
        a.store(ns, Ordering::Relaxed);
    }
}

pub(super) static PROFILE: OnceLock<Profile> = OnceLock::new();

/// Whether the profile is taken ([`start`]).
pub(super) fn enabled() -> bool {
    ON.load(Ordering::Relaxed)
}

/// A running clock that adds its elapsed time to a stage when stopped (no-op when disabled).
pub(super) struct Clock(Option<Instant>);

impl Clock {
    pub fn start() -> Clock {
        Clock(enabled().then(Instant::now))
    }
    /// Add the time since start to `stage(profile)` and restart.
    pub fn lap(&mut self, stage: impl Fn(&Profile) -> &AtomicU64) {
        if let Some(t) = self.0 {
            let now = Instant::now();
            let p = PROFILE.get_or_init(Profile::default);
            stage(p).fetch_add((now - t).as_nanos() as u64, Ordering::Relaxed);
            self.0 = Some(now);
        }
    }
}

/// This thread's CPU time so far (CLOCK_THREAD_CPUTIME_ID).
pub(super) fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; the call only writes it.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Add `d` to a stage (no-op when disabled).
pub(super) fn add(stage: impl Fn(&Profile) -> &AtomicU64, d: std::time::Duration) {
    if enabled() {
        let p = PROFILE.get_or_init(Profile::default);
        stage(p).fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// The end-of-run line, when enabled (`tuning`: the pool's size and where row groups went).
pub(super) fn report(wall: f64, tokens: u64, tuning: &crate::tuning::Tuning) {
    if !enabled() {
        return;
    }
    let p = PROFILE.get_or_init(Profile::default);
    let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 / 1e9;
    let cap = |busy: f64| {
        if busy > 0.0 {
            format!("{:.0}", tokens as f64 / busy / 1e6)
        } else {
            "-".into()
        }
    };
    // The packer's laps include its blocked sends to the writer.
    let (rb, pk, wio) = (
        s(&p.read_busy),
        (s(&p.pack) - s(&p.wait_write)).max(0.0),
        s(&p.write_io),
    );
    let at = |a: &AtomicU64| match a.load(Ordering::Relaxed) {
        0 => "-".to_string(),
        ns => format!("{:.2}", (ns - 1) as f64 / 1e9),
    };
    // On a small pool, row groups are encoded on the shard threads (not pool work).
    let on_pool = tuning.row_groups.on_pool;
    eprintln!(
        "pack profile: timeline s: setup {}, first batch {}, last batch {}, packed {}, written {} | wall {wall:.2} s, {threads} threads | reader busy {rb:.2} s, blocked {:.2} s | tokenize {:.2} s ({:.2} thread cpu-s) | row groups {rg_where} {pool_rg:.2} s | pool busy {busy:.0} % | main: pack {pk:.2} s, waiting on reader {:.2} s, tokenizer {:.2} s, writer {:.2} s | shard threads {:.2} s (waiting on pool row groups {:.2} s) | writer: write+journal {wio:.2} s, idle {:.2} s | serial caps Mtok/s: reader {}, packer {}, writer {}, achieved {:.1}",
        at(&p.at_setup),
        at(&p.at_first_batch),
        at(&p.at_last_batch),
        at(&p.at_packed),
        at(&p.at_written),
        s(&p.read_blocked),
        s(&p.tokenize_cpu),
        s(&p.tokenize_thread_cpu),
        s(&p.wait_read),
        s(&p.wait_tokenize),
        s(&p.wait_write),
        s(&p.encode_cpu),
        s(&p.encode_wait),
        s(&p.write_wait),
        cap(rb),
        cap(pk),
        cap(wio),
        tokens as f64 / wall.max(1e-9) / 1e6,
        threads = tuning.pool,
        pool_rg = s(&p.encode_pool),
        busy = 100.0 * (s(&p.tokenize_cpu) + if on_pool { s(&p.encode_pool) } else { 0.0 })
            / (wall.max(1e-9) * tuning.pool as f64),
        rg_where = if on_pool { "on the pool" } else { "on shard threads" },
    );
}
