//! When and how long to retry: exponential backoff with full jitter, a fixed attempt budget,
//! and the server's own word (`Retry-After`, or `t=` of the `RateLimit` header) on 429/503.

use std::time::Duration;

/// Retry budget and backoff.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Failed attempts tolerated per request before giving up.
    pub retries: u32,
    /// First backoff; doubles each retry.
    pub base: Duration,
    /// Longest backoff (and longest server-requested wait honoured).
    pub max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            retries: 8,
            base: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// Backoff before retry number `attempt` (1-based): uniform in [d/2, d] with
    /// d = min(base·2^(attempt-1), max), or the server's wait when it named one.
    pub fn delay(&self, attempt: u32, server_wait: Option<Duration>) -> Duration {
        if let Some(w) = server_wait {
            return w.min(self.max);
        }
        let exp = self
            .base
            .saturating_mul(1u32 << (attempt.saturating_sub(1)).min(16));
        let d = exp.min(self.max);
        let half = d / 2;
        half + Duration::from_nanos(jitter(half.as_nanos() as u64))
    }
}

/// A cheap uniform value in [0, n] from the clock and a counter (no RNG dependency).
fn jitter(n: u64) -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CTR: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut r = crate::fixtures::text::SplitMix(t ^ CTR.fetch_add(0x6A09_E667, Ordering::Relaxed));
    if n == 0 {
        0
    } else {
        r.next_u64() % (n + 1)
    }
}

/// The wait a 429/503 response asks for: `Retry-After: <seconds>`, else `RateLimit: ...;t=<s>`.
pub fn server_wait(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(v) = headers.get("retry-after").and_then(|v| v.to_str().ok()) {
        if let Ok(s) = v.trim().parse::<f64>() {
            return Some(Duration::from_secs_f64(s.max(0.0)));
        }
    }
    let rl = headers.get("ratelimit").and_then(|v| v.to_str().ok())?;
    rate_limit_t(rl)
}

/// `"resolvers";r=0;t=42` → 42 s.
pub fn rate_limit_t(v: &str) -> Option<Duration> {
    v.split([';', ','])
        .filter_map(|p| p.trim().strip_prefix("t="))
        .find_map(|t| t.trim().parse::<f64>().ok())
        .map(|s| Duration::from_secs_f64(s.max(0.0)))
}

/// Statuses worth retrying.
pub fn retryable_status(s: u16) -> bool {
    s == 429 || s == 408 || (500..600).contains(&s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let p = RetryPolicy {
            retries: 5,
            base: Duration::from_millis(100),
            max: Duration::from_millis(1000),
        };
        for a in 1..10 {
            let d = p.delay(a, None);
            let full = Duration::from_millis(100 * (1 << (a - 1))).min(p.max);
            assert!(d >= full / 2 && d <= full, "attempt {a}: {d:?}");
        }
        assert_eq!(p.delay(1, Some(Duration::from_secs(3))), p.max);
        assert_eq!(
            rate_limit_t("\"api\";r=0;t=7"),
            Some(Duration::from_secs(7))
        );
        assert_eq!(rate_limit_t("\"api\";r=0"), None);
    }
}
