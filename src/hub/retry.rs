//! When and how long to retry: exponential backoff with full jitter, a fixed attempt budget,
//! and the server's own word (`Retry-After`, or `t=` of the `RateLimit` header) on 429/503.
//! A server-supplied wait is parsed saturating (`1e30`, `inf` become [`Duration::MAX`], NaN
//! and garbage are ignored) and then capped at [`RetryPolicy::max`]: a hostile answer can
//! neither panic nor stall a run beyond the retry budget.

use std::fmt;
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
    let mut r = crate::util::SplitMix(t ^ CTR.fetch_add(0x6A09_E667, Ordering::Relaxed));
    if n == 0 {
        0
    } else {
        r.next_u64() % (n + 1)
    }
}

/// Seconds as a server wrote them, saturating: negative → 0, too large or infinite →
/// [`Duration::MAX`], NaN or not a number → `None`.
pub fn seconds(v: &str) -> Option<Duration> {
    let s: f64 = v.trim().parse().ok()?;
    if s.is_nan() {
        return None;
    }
    Some(Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX))
}

/// The wait a 429/503 response asks for: `Retry-After: <seconds>`, else `RateLimit: ...;t=<s>`.
pub fn server_wait(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(v) = headers.get("retry-after").and_then(|v| v.to_str().ok()) {
        if let Some(d) = seconds(v) {
            return Some(d);
        }
    }
    let rl = headers.get("ratelimit").and_then(|v| v.to_str().ok())?;
    rate_limit_t(rl)
}

/// The header a wait came from, as the server wrote it (for error messages).
pub fn wait_header(headers: &reqwest::header::HeaderMap) -> Option<String> {
    ["retry-after", "ratelimit"].iter().find_map(|k| {
        let v = headers.get(*k)?.to_str().ok()?;
        let name = if *k == "retry-after" {
            "Retry-After"
        } else {
            "RateLimit"
        };
        Some(format!("{name}: {}", super::names::clip(v)))
    })
}

/// `"resolvers";r=0;t=42` → 42 s.
pub fn rate_limit_t(v: &str) -> Option<Duration> {
    v.split([';', ','])
        .filter_map(|p| p.trim().strip_prefix("t="))
        .find_map(seconds)
}

/// Statuses worth retrying.
pub fn retryable_status(s: u16) -> bool {
    s == 429 || s == 408 || (500..600).contains(&s)
}

/// A failure worth retrying (connection error, truncated body, 5xx, 429, checksum mismatch),
/// with the wait the server asked for, if any.
#[derive(Debug)]
pub struct Transient {
    pub msg: String,
    pub wait: Option<Duration>,
}

impl fmt::Display for Transient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}
impl std::error::Error for Transient {}

pub fn transient(msg: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Transient {
        msg: msg.into(),
        wait: None,
    })
}

/// The `Transient` in an error's chain, if any.
pub fn as_transient(e: &anyhow::Error) -> Option<&Transient> {
    e.chain().find_map(|c| c.downcast_ref::<Transient>())
}

/// A reqwest error as transient (without the URL's query, which may carry a CDN signature).
pub fn net_error(what: &str, e: reqwest::Error) -> anyhow::Error {
    let e = e.without_url();
    let mut msg = format!("{what}: {e}");
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    transient(msg)
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

    #[test]
    fn hostile_waits_saturate_and_are_capped() {
        let p = RetryPolicy::default();
        for v in ["1e30", "inf", "+inf", "1e309", "18446744073709551616"] {
            assert_eq!(seconds(v), Some(Duration::MAX), "{v}");
            assert_eq!(p.delay(1, seconds(v)), p.max, "{v}");
        }
        assert_eq!(seconds("-inf"), Some(Duration::ZERO));
        assert_eq!(seconds("-3"), Some(Duration::ZERO));
        assert_eq!(seconds("NaN"), None);
        assert_eq!(seconds("soon"), None);
        assert_eq!(seconds(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(rate_limit_t("\"api\";r=0;t=1e30"), Some(Duration::MAX));
        assert_eq!(
            rate_limit_t("\"api\";r=0;t=nan;t=2"),
            Some(Duration::from_secs(2))
        );
        let mut h = reqwest::header::HeaderMap::new();
        h.insert("retry-after", "inf".parse().unwrap());
        assert_eq!(server_wait(&h), Some(Duration::MAX));
        assert_eq!(wait_header(&h).as_deref(), Some("Retry-After: inf"));
        h.insert("retry-after", "NaN".parse().unwrap());
        h.insert("ratelimit", "\"api\";r=0;t=1e30".parse().unwrap());
        assert_eq!(server_wait(&h), Some(Duration::MAX));
    }
}
