//! Progress display: indicatif bars (bytes, rate, ETA) when stderr is a terminal, nothing
//! per chunk otherwise (the fetch loop prints one plain line per finished file instead, which
//! is what cron and Slurm logs want).

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

/// All bars of one run.
pub struct Progress {
    multi: Option<MultiProgress>,
}

/// One file's bar (a no-op off a terminal). Cheap to clone.
#[derive(Clone)]
pub struct Bar(Option<ProgressBar>);

impl Progress {
    pub fn new() -> Progress {
        let tty = crate::report::bars();
        Progress {
            multi: tty.then(MultiProgress::new),
        }
    }

    pub fn bar(&self, name: &str, size: u64) -> Bar {
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
        }))
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
