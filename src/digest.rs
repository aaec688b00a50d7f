//! The one digest rule of the Hub, the cache and the locks: a sha256 (64 hex digits) or a git
//! sha1 / commit (40), read in any case — as a user's manifest or lock may spell it — and held
//! lowercase, as the Hub and the cache spell it. A digest is parsed once where it is read
//! ([`HexDigest::parse`]); every later comparison and cache path sees the lowercase form, so
//! an uppercase sha names the same blob and snapshot as its lowercase spelling.

use std::fmt;

/// Length of a sha256 digest in hex digits.
pub const SHA256_HEX: usize = 64;
/// Length of a git sha1 (an object id or a commit) in hex digits.
pub const SHA1_HEX: usize = 40;

/// A digest that passed the one rule: exactly its length of hex digits, held lowercase.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HexDigest(String);

impl HexDigest {
    /// `s` as a digest of `len` hex digits (any case), lowercased; `None` when it is not one.
    pub fn parse(s: &str, len: usize) -> Option<HexDigest> {
        (s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| HexDigest(s.to_ascii_lowercase()))
    }

    /// A sha256 or a git sha1, whichever `s` is.
    pub fn parse_sha256_or_sha1(s: &str) -> Option<HexDigest> {
        Self::parse(s, SHA256_HEX).or_else(|| Self::parse(s, SHA1_HEX))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for HexDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `s` lowercased in place where it is a digest of `len`; anything else is left as written,
/// for the check that reads it to refuse with its own message.
pub fn normalise(s: &mut String, len: usize) {
    if let Some(d) = HexDigest::parse(s, len) {
        *s = d.into_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_case_in_lowercase_out_nothing_else() {
        let upper = "AB".repeat(20);
        let d = HexDigest::parse(&upper, SHA1_HEX).unwrap();
        assert_eq!(d.as_str(), "ab".repeat(20));
        assert_eq!(Some(d), HexDigest::parse(&"ab".repeat(20), SHA1_HEX));
        assert!(HexDigest::parse(&"ab".repeat(20), SHA256_HEX).is_none());
        assert!(HexDigest::parse(&format!("{}g", "a".repeat(39)), SHA1_HEX).is_none());
        assert!(HexDigest::parse(&"é".repeat(20), SHA1_HEX).is_none());
        let mut s = "C".repeat(64);
        normalise(&mut s, SHA256_HEX);
        assert_eq!(s, "c".repeat(64));
        let mut bad = "not a digest".to_string();
        normalise(&mut bad, SHA256_HEX);
        assert_eq!(bad, "not a digest");
    }
}
