//! Progress display: indicatif bars (bytes, rate, ETA) when stderr is a terminal; otherwise
//! the fetch loop prints one plain line per finished file and, over the whole run, one plain
//! line of bytes done/total, rate and ETA every `--progress-interval` seconds
//! ([`crate::progress::SharedTicker`]), which is what cron and Slurm logs want.

use std::sync::Arc;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use crate::progress::SharedTicker;

/// All bars of one run.
pub struct Progress {
    multi: Option<MultiProgress>,
    /// The run's plain lines (bytes of every file of the plan).
    ticker: Option<Arc<SharedTicker>>,
}

/// One file's bar (a no-op off a terminal), feeding the run's plain lines. Cheap to clone.
#[derive(Clone)]
pub struct Bar(Option<ProgressBar>, Option<Arc<SharedTicker>>);

impl Progress {
    pub fn new() -> Progress {
        let tty = crate::progress::bars();
        Progress {
            multi: tty.then(MultiProgress::new),
            ticker: None,
        }
    }

    /// Also plain lines over `total` bytes (the plan's files, cached ones included).
    pub fn with_total(mut self, what: &str, total: u64) -> Progress {
        self.ticker = Some(Arc::new(SharedTicker::new(what, "bytes", total)));
        self
    }

    /// `n` bytes done without streaming them (a cached file, a resumed file's earlier part).
    pub fn add_done(&self, n: u64) {
        if let Some(t) = &self.ticker {
            t.add(n);
        }
    }

    /// The run's last plain line, with the totals.
    pub fn finish(&self) {
        if let Some(t) = &self.ticker {
            t.finish();
        }
    }

    pub fn bar(&self, name: &str, size: u64) -> Bar {
        let ticker = self.ticker.clone();
        Bar(self.multi.as_ref().map(|m| {
            let b = m.add(ProgressBar::new(size));
            b.set_style(
                ProgressStyle::with_template(
                    "{msg:40!} {bar:30} {bytes:>10}/{total_bytes:<10} {bytes_per_sec:>12} eta {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            b.set_message(crate::secret::redact(name).into_owned());
            b
        }), ticker)
    }

    /// Print a line (redacted, [`crate::secret`]) without tearing the bars.
    pub fn println(&self, line: &str) {
        let line = crate::secret::redact(line);
        let line = line.as_ref();
        match &self.multi {
            Some(m) => {
                let _ = m.println(line);
            }
            None => eprintln!("{line}"),
        }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Bar {
    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.inc(n);
        }
        if let Some(t) = &self.1 {
            t.add(n);
        }
    }
    pub fn set_position(&self, n: u64) {
        if let Some(b) = &self.0 {
            b.set_position(n);
        }
    }
    pub fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
    pub fn abandon(&self) {
        if let Some(b) = &self.0 {
            b.abandon();
        }
    }
}
