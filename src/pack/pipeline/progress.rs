//! The progress bar of a pack run on a TTY: documents and tokens per second, input bytes read,
//! ETA by input bytes. When stderr is not a terminal, a plain line per `--progress-interval`
//! instead ([`crate::progress::Ticker`], by input bytes).

use std::time::Instant;

use crate::pack::plan::Unit;

/// Progress on a TTY: documents and tokens per second, input bytes, ETA by input bytes.
pub(super) struct Progress {
    bar: Option<indicatif::ProgressBar>,
    unit_bytes: Vec<u64>,
    done_before: u64,
    start: Instant,
    tokens: std::cell::Cell<u64>,
    docs: std::cell::Cell<u64>,
    rows_total: std::cell::RefCell<Vec<Option<u64>>>,
    ticker: crate::progress::Ticker,
}

impl Progress {
    pub(super) fn new(units: &[Unit], start_unit: usize) -> Progress {
        let unit_bytes: Vec<u64> = units.iter().map(|u| u.bytes).collect();
        let total: u64 = unit_bytes.iter().sum();
        let done_before: u64 = unit_bytes[..start_unit.min(units.len())].iter().sum();
        let bar = crate::progress::bars().then(|| {
            let b = indicatif::ProgressBar::new(total);
            b.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {bytes}/{total_bytes} read, {msg}, ETA {eta}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            b.set_position(done_before);
            b
        });
        let out = crate::progress::settings();
        let lines = !out.tty && !out.quiet;
        let rows_total = units
            .iter()
            .map(|u| {
                (u.format == crate::manifest::Format::Parquet && (bar.is_some() || lines))
                    .then(|| {
                        crate::sources::parquet::row_counts(&u.path, &u.file)
                            .ok()
                            .map(|v| v.iter().sum())
                    })
                    .flatten()
            })
            .collect();
        Progress {
            bar,
            unit_bytes,
            done_before,
            start: Instant::now(),
            tokens: 0.into(),
            docs: 0.into(),
            rows_total: std::cell::RefCell::new(rows_total),
            ticker: crate::progress::Ticker::new("pack", "input bytes", total, done_before),
        }
    }
    pub(super) fn tokens(&self, n: u64) {
        self.tokens.set(self.tokens.get() + n);
        self.docs.set(self.docs.get() + 1);
    }
    /// `rows_done` rows of `unit` are packed, `at` bytes of its file read (0: unknown): the
    /// position is by rows where the file's row count is known (parquet), else by bytes read
    /// (JSON, compressed or not), so a line advances within a file, not only at its end.
    pub(super) fn rows(&self, unit: usize, rows_done: u64, at: u64) {
        let pos = position(
            &self.unit_bytes,
            self.done_before,
            unit,
            self.rows_total.borrow()[unit],
            rows_done,
            at,
        );
        self.ticker.update(pos);
        let Some(b) = &self.bar else { return };
        b.set_position(pos);
        let secs = self.start.elapsed().as_secs_f64().max(1e-6);
        b.set_message(format!(
            "{:.0} docs/s, {:.2} Mtok/s",
            self.docs.get() as f64 / secs,
            self.tokens.get() as f64 / secs / 1e6
        ));
    }
    pub(super) fn unit_done(&self, unit: usize) {
        let done: u64 = self.unit_bytes[..=unit].iter().sum();
        if let Some(b) = &self.bar {
            b.set_position(done);
        }
        self.ticker.update(done);
    }
    pub(super) fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        self.ticker.finish(self.unit_bytes.iter().sum());
    }
}

/// Input bytes done at `rows_done` rows / `at` bytes read of `unit`: the units before it, plus
/// its share by rows (when its row count `rows_total` is known) or else by bytes read.
fn position(
    unit_bytes: &[u64],
    done_before: u64,
    unit: usize,
    rows_total: Option<u64>,
    rows_done: u64,
    at: u64,
) -> u64 {
    let before: u64 = unit_bytes[..unit].iter().sum::<u64>().max(done_before);
    let frac = match rows_total {
        Some(t) if t > 0 => rows_done as f64 / t as f64,
        _ if unit_bytes[unit] > 0 => (at as f64 / unit_bytes[unit] as f64).min(1.0),
        _ => 0.0,
    };
    before + (frac * unit_bytes[unit] as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::position;

    #[test]
    fn json_inputs_advance_by_bytes_read_within_a_file() {
        let units = [1000, 4000];
        // A JSON unit (no row count) half read: half its bytes, after the first unit.
        assert_eq!(position(&units, 0, 1, None, 10, 2000), 3000);
        assert_eq!(position(&units, 0, 0, None, 10, 250), 250);
        // Read past the (compressed) size never overshoots the unit.
        assert_eq!(position(&units, 0, 0, None, 10, 5000), 1000);
        // Parquet keeps its row fraction.
        assert_eq!(position(&units, 0, 1, Some(100), 25, 0), 2000);
    }
}
