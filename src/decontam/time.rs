//! RFC 3339 UTC timestamps for reports (the clock helpers live in [`crate::util`], shared with
//! the output locks).

pub use crate::util::{now_rfc3339, rfc3339};

#[cfg(test)]
mod tests {
    #[test]
    fn known_dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::rfc3339(1_798_761_599), "2026-12-31T23:59:59Z");
    }
}
