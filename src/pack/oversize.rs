//! Bounds what reaches the tokenizer, so its per-document memory stays bounded: a document
//! over `--max-doc-bytes`, or holding a run of non-whitespace longer than `--max-word-bytes`
//! (one pre-token: BPE over a single 31 MB "word" peaked at 2.3 GB RSS, about 75 bytes per
//! input byte, where 31 MB of ordinary text needs 170 MB), is oversized and handled by
//! `--on-oversize` (fail naming file and row, or skip and count).

/// Why `text` is oversized, if it is.
pub fn reason(text: &str, max_doc_bytes: u64, max_word_bytes: u64) -> Option<String> {
    if text.len() as u64 > max_doc_bytes {
        return Some(format!(
            "document of {} bytes exceeds --max-doc-bytes {max_doc_bytes}",
            text.len()
        ));
    }
    if text.len() as u64 <= max_word_bytes {
        return None;
    }
    let run = longest_word(text.as_bytes());
    (run as u64 > max_word_bytes).then(|| {
        format!("document holds a {run}-byte run without whitespace, over --max-word-bytes {max_word_bytes}")
    })
}

/// Length of the longest run of bytes that are not ASCII whitespace (the longest possible
/// pre-token of a whitespace-splitting pre-tokenizer; an over-estimate for the others).
pub fn longest_word(b: &[u8]) -> usize {
    let (mut best, mut cur) = (0usize, 0usize);
    for &c in b {
        if c.is_ascii_whitespace() {
            best = best.max(cur);
            cur = 0;
        } else {
            cur += 1;
        }
    }
    best.max(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_limits() {
        assert_eq!(longest_word(b""), 0);
        assert_eq!(longest_word(b"ab  cde\tf"), 3);
        assert_eq!(longest_word(b"abcd"), 4);
        assert!(reason("short text", 100, 5).is_none());
        assert!(reason("short text", 5, 100)
            .unwrap()
            .contains("--max-doc-bytes"));
        assert!(reason("short text", 100, 4)
            .unwrap()
            .contains("--max-word-bytes"));
    }
}
