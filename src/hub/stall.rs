//! Stall detection for transfers: a body that delivers less than a minimum rate over a whole
//! window (default under 1 KiB/s over 30 s) is a stall — a transient error naming the file,
//! retried with the client's backoff, then a clear failure. A per-read timeout cannot catch a
//! server that trickles one byte a second (each byte resets it); a rate over a window does.
//! The wait also ends at once when a stop signal arrives ([`crate::signals`]).

use std::time::Duration;

use anyhow::Result;
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::retry::{net_error, transient};

/// What counts as a stall.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StallPolicy {
    /// The window the rate is measured over.
    pub window: Duration,
    /// Fewer bytes per second than this over a whole window is a stall.
    pub min_bytes_per_sec: u64,
}

impl Default for StallPolicy {
    fn default() -> Self {
        StallPolicy {
            window: Duration::from_secs(30),
            min_bytes_per_sec: 1024,
        }
    }
}

impl StallPolicy {
    fn min_bytes(&self) -> u64 {
        (self.min_bytes_per_sec as f64 * self.window.as_secs_f64()).ceil() as u64
    }
}

/// Reads one body, checking its rate window by window.
pub struct RateGuard {
    policy: StallPolicy,
    window_start: Instant,
    bytes: u64,
    what: String,
}

impl RateGuard {
    pub fn new(policy: StallPolicy, what: &str) -> RateGuard {
        RateGuard {
            policy,
            window_start: Instant::now(),
            bytes: 0,
            what: what.to_string(),
        }
    }

    /// The next chunk of `body` (`None` at its end); a stall or a stop signal is an error.
    pub async fn next<S>(&mut self, body: &mut S) -> Result<Option<bytes::Bytes>>
    where
        S: Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin,
    {
        loop {
            let deadline = self.window_start + self.policy.window;
            let got = tokio::select! {
                r = tokio::time::timeout_at(deadline, body.next()) => r,
                i = crate::signals::stopped() => return Err(anyhow::Error::new(i)),
            };
            match got {
                Ok(Some(Ok(c))) => {
                    self.bytes += c.len() as u64;
                    if Instant::now() >= deadline {
                        self.roll()?;
                    }
                    return Ok(Some(c));
                }
                Ok(Some(Err(e))) => return Err(net_error(&self.what, e)),
                Ok(None) => return Ok(None),
                Err(_) => self.roll()?, // a whole window without a chunk
            }
        }
    }

    /// End of a window: a stall error when it delivered too little, else a new window.
    fn roll(&mut self) -> Result<()> {
        if self.bytes < self.policy.min_bytes() {
            return Err(transient(format!(
                "{}: transfer stalled: {} bytes in the last {:?} (minimum {} bytes/s over {:?}; \
                 see --stall-secs / --min-rate)",
                self.what,
                self.bytes,
                self.window_start.elapsed(),
                self.policy.min_bytes_per_sec,
                self.policy.window
            )));
        }
        self.window_start = Instant::now();
        self.bytes = 0;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trickle(
        every: Duration,
        n: usize,
    ) -> impl Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin {
        Box::pin(futures::stream::unfold(0usize, move |k| async move {
            if k == n {
                return None;
            }
            tokio::time::sleep(every).await;
            Some((Ok(bytes::Bytes::from_static(b"x")), k + 1))
        }))
    }

    /// A window of `secs` seconds and a floor of `min` bytes a second.
    fn policy(secs: u64, min: u64) -> StallPolicy {
        StallPolicy {
            window: Duration::from_secs(secs),
            min_bytes_per_sec: min,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_trickle_is_a_stall_and_a_steady_body_is_not() {
        let p = policy(30, 1024);
        // One byte a second: the first window ends with 30 bytes, far under 30 KiB.
        let mut g = RateGuard::new(p, "o/n/data.bin");
        let mut body = trickle(Duration::from_secs(1), 10_000);
        let mut got = 0;
        let e = loop {
            match g.next(&mut body).await {
                Ok(Some(_)) => got += 1,
                Ok(None) => panic!("ended"),
                Err(e) => break e,
            }
        };
        assert!(got <= 31, "{got} bytes before the stall");
        let msg = format!("{e:#}");
        assert!(
            msg.contains("o/n/data.bin") && msg.contains("stalled"),
            "{msg}"
        );
        assert!(super::super::retry::as_transient(&e).is_some(), "retried");
        // Silence: stalled at the end of the window.
        let mut g = RateGuard::new(p, "f");
        let mut body = trickle(Duration::from_secs(3600), 1);
        assert!(g.next(&mut body).await.is_err());
        // Fast enough: 1 byte every 0.5 ms for a lenient policy passes through to the end.
        let lenient = policy(1, 100);
        let mut g = RateGuard::new(lenient, "f");
        let mut body = trickle(Duration::from_micros(500), 5000);
        let mut n = 0;
        while g.next(&mut body).await.unwrap().is_some() {
            n += 1;
        }
        assert_eq!(n, 5000);
    }
}
