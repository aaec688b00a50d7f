//! Sizes every command accepts, checked while parsing (outside the range: exit 2, naming the
//! flag and the range), so no size reaches an allocation or a division unchecked.
//! (A module of its own because every stage's `Args` uses it and `cli` uses every stage.)

use clap::builder::RangedU64ValueParser;

/// Longest row / generation in tokens (`--seq-len`, `--gen-length`, `--block-length`).
pub const MAX_TOKENS: u64 = 1 << 20;
/// Largest batch of sequences (`--batch-size`).
pub const MAX_BATCH: u64 = 1 << 16;
/// Most prompts of one continuous-batching window (`distill --window-prompts`).
pub const MAX_WINDOW_PROMPTS: u64 = 1 << 24;
/// Most workers of one array job (`--num-shards`).
pub const MAX_WORKERS: u64 = 1 << 16;
/// Most rows of one shard file (`--rows-per-shard`).
pub const MAX_ROWS_PER_SHARD: u64 = 1 << 24;
/// Most denoising steps (`--steps`).
pub const MAX_STEPS: u64 = 1 << 20;
/// Most retries of one request (`--retries`).
pub const MAX_RETRIES: u64 = 1000;
/// Longest first retry backoff in milliseconds (`--retry-base-ms`): 10 minutes.
pub const MAX_RETRY_BASE_MS: u64 = 600_000;
/// Most parallel downloads (`--jobs`).
pub const MAX_JOBS: u64 = 1024;
/// Largest download chunk in MiB (`--chunk-mb`).
pub const MAX_CHUNK_MB: u64 = 4096;
/// Largest byte size flag (`--shard-bytes`, `--max-doc-bytes`): 64 GiB.
pub const MAX_BYTES: u64 = 64 << 30;

/// `usize` in `lo..=hi`.
pub fn usize_in(lo: u64, hi: u64) -> RangedU64ValueParser<usize> {
    RangedU64ValueParser::new().range(lo..=hi)
}
/// `u64` in `lo..=hi`.
pub fn u64_in(lo: u64, hi: u64) -> RangedU64ValueParser<u64> {
    RangedU64ValueParser::new().range(lo..=hi)
}
/// `u32` in `lo..=hi`.
pub fn u32_in(lo: u64, hi: u64) -> RangedU64ValueParser<u32> {
    RangedU64ValueParser::new().range(lo..=hi)
}
/// `--seq-len` and other token lengths: 1 ..= 2^20.
pub fn tokens() -> RangedU64ValueParser<usize> {
    usize_in(1, MAX_TOKENS)
}
/// `--num-shards`: 1 ..= 2^16.
pub fn workers() -> RangedU64ValueParser<usize> {
    usize_in(1, MAX_WORKERS)
}

/// A size as users write it (`64MiB`, `512K`, `1000000`), at least 1 byte and at most
/// [`MAX_BYTES`].
pub fn parse_bytes(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim().trim_end_matches(['B', 'b']).trim_end_matches('i');
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?}: expected a size like 64MiB, 512K or 1000000"))?;
    if !(v.is_finite() && v >= 1.0) {
        return Err(format!("{s:?}: must be at least 1 byte"));
    }
    let bytes = v * mult as f64;
    if bytes > MAX_BYTES as f64 {
        return Err(format!("{s:?}: more than {} GiB", MAX_BYTES >> 30));
    }
    Ok(bytes as u64)
}
