//! What a run tells its operator, the same from a shell, cron or Slurm: progress bars and
//! colour only on a terminal (never with `NO_COLOR`), otherwise one plain progress line every
//! `--progress-interval` seconds (done/total, rate, ETA) that a log file keeps readable;
//! `--quiet` keeps warnings and errors only.

use std::cell::Cell;
use std::io::IsTerminal;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The run's output settings (global flags).
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub quiet: bool,
    pub interval: Duration,
    /// stderr is a terminal.
    pub tty: bool,
    /// ANSI colour in the log (a terminal, and no `NO_COLOR`).
    pub color: bool,
}

static SETTINGS: OnceLock<Settings> = OnceLock::new();

/// Fix the settings for this process (the CLI, once, before any command runs).
pub fn init(quiet: bool, interval_secs: u64) -> Settings {
    let tty = std::io::stderr().is_terminal();
    let s = Settings {
        quiet,
        interval: Duration::from_secs(interval_secs.max(1)),
        tty,
        color: tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
    };
    *SETTINGS.get_or_init(|| s)
}

/// The settings ([`init`]'s, else the defaults: not quiet, 30 s, detected terminal).
pub fn settings() -> Settings {
    *SETTINGS.get_or_init(|| {
        let tty = std::io::stderr().is_terminal();
        Settings {
            quiet: false,
            interval: Duration::from_secs(30),
            tty,
            color: tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    })
}

/// Whether to draw progress bars: a terminal, not `--quiet`, not `DLM_NO_PROGRESS`.
pub fn bars() -> bool {
    let s = settings();
    s.tty && !s.quiet && !crate::tuning::no_progress()
}

/// Plain progress lines for logs: at most one per interval, none on a terminal (the bar is
/// there) or under `--quiet`.
pub struct Ticker {
    what: String,
    unit: &'static str,
    total: u64,
    done_before: u64,
    start: Instant,
    last: Cell<Instant>,
    on: bool,
    interval: Duration,
}

impl Ticker {
    /// `total` units of work, `done_before` of them already done (a resumed run).
    pub fn new(what: &str, unit: &'static str, total: u64, done_before: u64) -> Ticker {
        let s = settings();
        let now = Instant::now();
        Ticker {
            what: what.to_string(),
            unit,
            total,
            done_before,
            start: now,
            last: Cell::new(now),
            on: !s.tty && !s.quiet,
            interval: s.interval,
        }
    }

    /// `done` units are done now: a line when the interval has passed.
    pub fn update(&self, done: u64) {
        if !self.on || self.last.get().elapsed() < self.interval {
            return;
        }
        self.last.set(Instant::now());
        eprintln!("{}", self.line(done, self.start.elapsed()));
    }

    /// The run's last line (whatever the interval), so a log always ends with the totals.
    pub fn finish(&self, done: u64) {
        if self.on {
            eprintln!("{}", self.line(done, self.start.elapsed()));
        }
    }

    /// The progress line after `elapsed`: done/total (percent), rate, ETA.
    pub fn line(&self, done: u64, elapsed: Duration) -> String {
        let secs = elapsed.as_secs_f64().max(1e-9);
        let rate = done.saturating_sub(self.done_before) as f64 / secs;
        let left = self.total.saturating_sub(done);
        let eta = if rate > 0.0 {
            hms(left as f64 / rate)
        } else {
            "?".into()
        };
        format!(
            "{}: {done}/{} {} ({:.1}%), {rate:.2} {}/s, elapsed {}, ETA {eta}",
            self.what,
            self.total,
            self.unit,
            100.0 * done as f64 / self.total.max(1) as f64,
            self.unit,
            hms(secs)
        )
    }
}

/// A [`Ticker`] that worker threads (rayon, tasks) share: each adds what it finished; the
/// one that finds the interval passed writes the line.
pub struct SharedTicker {
    ticker: std::sync::Mutex<Ticker>,
    done: std::sync::atomic::AtomicU64,
}

impl SharedTicker {
    pub fn new(what: &str, unit: &'static str, total: u64) -> SharedTicker {
        SharedTicker {
            ticker: std::sync::Mutex::new(Ticker::new(what, unit, total, 0)),
            done: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// `n` more units are done.
    pub fn add(&self, n: u64) {
        let done = self.done.fetch_add(n, std::sync::atomic::Ordering::Relaxed) + n;
        // Another thread writing a line now: skip, the next add writes it.
        if let Ok(t) = self.ticker.try_lock() {
            t.update(done);
        }
    }

    /// The last line, with the totals.
    pub fn finish(&self) {
        let done = self.done.load(std::sync::atomic::Ordering::Relaxed);
        if let Ok(t) = self.ticker.lock() {
            t.finish(done);
        }
    }
}

/// A line for the operator on stderr (a summary, a next step), unless `--quiet`.
pub fn note(line: &str) {
    if !settings().quiet {
        eprintln!("{line}");
    }
}

/// Seconds as h:mm:ss.
pub fn hms(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_line_has_done_total_rate_and_eta() {
        let t = Ticker::new("distill", "prompts", 1000, 100);
        let l = t.line(400, Duration::from_secs(60));
        assert_eq!(
            l,
            "distill: 400/1000 prompts (40.0%), 5.00 prompts/s, elapsed 0:01:00, ETA 0:02:00"
        );
        assert_eq!(hms(3723.4), "1:02:03");
        assert!(t.line(100, Duration::from_secs(5)).ends_with("ETA ?"));
    }
}
