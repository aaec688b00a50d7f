//! Faults the shared word table's pages in on a thread of its own, so the tokenizing threads
//! do not pay the kernel's first-touch zeroing of ~100 MiB of table.
//!
//! The table is an anonymous mapping the OS hands over untouched ([`super::shared_words`]); the
//! first write to each (huge) page faults and the kernel zeroes it (`clear_page_erms`). On a
//! one-thread `pack` of 200 MB of code that was 8–16 % of the one tokenizing thread's samples
//! (perf, per thread), all on the wall-clock path. This thread takes it instead: every slot
//! page first (inserts land at random over all of them), then the arena a window ahead of the
//! inserts (it fills in order; a small input never touches the pages it does not use). It
//! writes nothing the table can see: `MADV_POPULATE_WRITE` faults a range in without storing,
//! and where the kernel lacks it (before Linux 5.14) an atomic `fetch_or(0)` per page does the
//! same, race-free beside the inserts. `DLM_PACK_PREFAULT=0` turns it off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Arena bytes kept faulted in ahead of the inserts (a few ms of the fastest fill seen).
const AHEAD: usize = 16 << 20;
/// Bytes faulted per step (one huge page), the stop flag read between steps.
const STEP: usize = 2 << 20;
/// How long the thread waits between looks at the inserts' progress.
const POLL: Duration = Duration::from_millis(1);
const PAGE: usize = 4096;

/// The prefaulting thread; dropping it stops and joins the thread (before the mappings go).
pub(super) struct Prefaulter {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

/// A mapping's address and length in bytes (raw, so the thread can hold it; the owner joins
/// the thread before unmapping).
#[derive(Clone, Copy)]
struct Region {
    addr: usize,
    bytes: usize,
}

impl Region {
    fn of(s: &[AtomicU64]) -> Region {
        Region {
            addr: s.as_ptr() as usize,
            bytes: std::mem::size_of_val(s),
        }
    }

    /// Fault in `[from, to)` of this region (offsets page-aligned or clamped to the end).
    fn populate(self, from: usize, to: usize) {
        let to = to.min(self.bytes);
        if from >= to {
            return;
        }
        let start = self.addr + from;
        // SAFETY: advice on a range of a live mapping this process owns; it stores nothing.
        let r = unsafe { libc::madvise(start as *mut _, to - from, libc::MADV_POPULATE_WRITE) };
        if r != 0 {
            let mut p = start;
            while p < self.addr + to {
                // SAFETY: `p` is 8-aligned inside the live mapping of AtomicU64s; or-ing 0 in
                // atomically changes no value a concurrent insert stores or reads.
                unsafe { (*(p as *const AtomicU64)).fetch_or(0, Ordering::Relaxed) };
                p += PAGE;
            }
        }
    }
}

impl Prefaulter {
    /// Start faulting in `slots` whole and `arena` ahead of `used()` (arena words handed out);
    /// `None` when the thread cannot start (`DLM_PACK_PREFAULT=0`: the run's tuning never
    /// calls this). The caller keeps both mappings alive until it has dropped the returned
    /// value.
    pub(super) fn start(
        slots: &[AtomicU64],
        arena: &[AtomicU64],
        used: impl Fn() -> usize + Send + 'static,
    ) -> Option<Prefaulter> {
        let (slots, arena) = (Region::of(slots), Region::of(arena));
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("pack-prefault".into())
            .spawn(move || run(slots, arena, &used, &flag))
            .ok()?;
        Some(Prefaulter {
            stop,
            handle: Some(handle),
        })
    }
}

/// The thread: all slots, then the arena up to [`AHEAD`] bytes past the inserts.
fn run(slots: Region, arena: Region, used: &dyn Fn() -> usize, stop: &AtomicBool) {
    let mut done = 0;
    while done < slots.bytes && !stop.load(Ordering::Relaxed) {
        slots.populate(done, done + STEP);
        done += STEP;
    }
    let mut done = 0;
    while done < arena.bytes && !stop.load(Ordering::Relaxed) {
        let target = used()
            .saturating_mul(8)
            .saturating_add(AHEAD)
            .min(arena.bytes);
        if done < target {
            arena.populate(done, done + STEP);
            done += STEP;
        } else {
            std::thread::park_timeout(POLL);
        }
    }
}

impl Drop for Prefaulter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.thread().unpark();
            let _ = h.join();
        }
    }
}
