//! The forward pass as distill's unit of liveness: a window (16 × batch prompts by default)
//! takes minutes, a forward pass well under a second on the CPU fixtures. [`Watched`] wraps
//! the backend so that before every forward the run stops if SIGTERM/SIGINT/SIGHUP arrived
//! (the window in flight is abandoned: nothing of it is committed, the rerun recomputes it
//! byte-identically) and a plain progress line goes out every `--progress-interval` (forward
//! passes done of the estimate, prompts committed, rate, ETA).
//!
//! A backend that runs the whole loop itself (the GPU's `generate`/`generate_rows`) is not
//! seen pass by pass: it stops at the window's end, or the stop watchdog ends it (see
//! [`crate::signals::install_with_deadline`]); its progress counts prompts.

use std::cell::Cell;
use std::ops::Range;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::progress::hms;
use crate::sampling::early_exit::RowSchedule;
use crate::teacher::{Batch, GenJob, GenRows, TeacherBackend};

/// What the log says about a distill run between windows.
pub struct ForwardProgress {
    what: String,
    /// Estimated forward passes for this run's work (an upper bound with early exit).
    estimate: u64,
    forwards: Cell<u64>,
    prompts_total: u64,
    prompts_done: Cell<u64>,
    prompts_before: u64,
    start: Instant,
    last: Cell<Instant>,
    interval: Duration,
    on: bool,
}

impl ForwardProgress {
    /// `prompts_done` of `prompts_total` already committed (a resumed run); `estimate`
    /// forward passes to go.
    pub fn new(what: &str, estimate: u64, prompts_total: u64, prompts_done: u64) -> Self {
        let s = crate::progress::settings();
        let now = Instant::now();
        ForwardProgress {
            what: what.to_string(),
            estimate,
            forwards: Cell::new(0),
            prompts_total,
            prompts_done: Cell::new(prompts_done),
            prompts_before: prompts_done,
            start: now,
            last: Cell::new(now),
            interval: s.interval,
            on: !s.tty && !s.quiet,
        }
    }

    /// One forward pass done: a line when the interval has passed.
    pub fn forward(&self) {
        self.forwards.set(self.forwards.get() + 1);
        self.maybe_line();
    }

    /// The prompts committed so far (after a window's commit).
    pub fn committed(&self, prompts_done: u64) {
        self.prompts_done.set(prompts_done);
        self.maybe_line();
    }

    /// The run's last line (whatever the interval), so a log always ends with the totals.
    pub fn finish(&self) {
        if self.on {
            eprintln!("{}", self.line(self.start.elapsed()));
        }
    }

    fn maybe_line(&self) {
        if !self.on || self.last.get().elapsed() < self.interval {
            return;
        }
        self.last.set(Instant::now());
        eprintln!("{}", self.line(self.start.elapsed()));
    }

    /// The progress line after `elapsed`.
    pub fn line(&self, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let f = self.forwards.get();
        let rate = f as f64 / secs;
        // Early exit makes the estimate an upper bound: never report more done than estimated.
        let est = self.estimate.max(f);
        let eta = if rate > 0.0 {
            hms(est.saturating_sub(f) as f64 / rate)
        } else {
            // Nothing run yet: the prompts' rate, else unknown.
            let p = self.prompts_done.get() - self.prompts_before;
            if p > 0 {
                let left = self.prompts_total.saturating_sub(self.prompts_done.get());
                hms(left as f64 * secs / p as f64)
            } else {
                "?".into()
            }
        };
        format!(
            "{}: {f}/{est} forward passes ({:.1}%), {}/{} prompts committed, {rate:.2} passes/s, \
             elapsed {}, ETA {eta}",
            self.what,
            100.0 * f as f64 / est.max(1) as f64,
            self.prompts_done.get(),
            self.prompts_total,
            hms(secs)
        )
    }
}

/// The backend with a stop check and a progress tick before every forward pass.
pub struct Watched<'a> {
    pub inner: &'a mut dyn TeacherBackend,
    pub progress: &'a ForwardProgress,
}

impl TeacherBackend for Watched<'_> {
    fn vocab_size(&self) -> usize {
        self.inner.vocab_size()
    }

    fn pad_multiple(&self) -> usize {
        self.inner.pad_multiple()
    }

    fn logits(&mut self, batch: &Batch, rows: Range<usize>) -> Result<Vec<f32>> {
        // The deterministic hook for signal tests, then the stop: the window is abandoned.
        crate::signals::pause_point("distill-forward");
        crate::signals::check()?;
        let r = self.inner.logits(batch, rows);
        self.progress.forward();
        r
    }

    fn generate(&mut self, job: &GenJob) -> Option<Result<Vec<Vec<u32>>>> {
        self.inner.generate(job)
    }

    fn generate_rows(&mut self, job: &GenJob, sched: &RowSchedule) -> GenRows {
        self.inner.generate_rows(job, sched)
    }

    fn generate_rows_traced(
        &mut self,
        job: &GenJob,
        sched: &RowSchedule,
        k: usize,
    ) -> crate::teacher::GenRowsTraced {
        self.inner.generate_rows_traced(job, sched, k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_has_passes_of_the_estimate_prompts_and_eta() {
        let p = ForwardProgress::new("distill worker 1/1", 1000, 60, 12);
        for _ in 0..250 {
            p.forwards.set(p.forwards.get() + 1);
        }
        p.prompts_done.set(24);
        assert_eq!(
            p.line(Duration::from_secs(50)),
            "distill worker 1/1: 250/1000 forward passes (25.0%), 24/60 prompts committed, \
             5.00 passes/s, elapsed 0:00:50, ETA 0:02:30"
        );
    }
}
