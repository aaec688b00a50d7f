//! The pipeline's queue and batch sizes, in one place, each overridable from the environment
//! so a many-core box can be tuned by measurement (`DLM_PACK_BATCH_KB`, `DLM_PACK_CHUNK_KB`,
//! `DLM_PACK_AHEAD`; docs/environment.md). None of them changes a byte of the output.

use std::sync::OnceLock;

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.parse().ok().filter(|&n| n > 0)
}

/// Text bytes per tokenization batch (`DLM_PACK_BATCH_KB`, default 4 MiB).
pub(super) fn batch_text_bytes() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| env_usize("DLM_PACK_BATCH_KB").map_or(4 << 20, |kb| kb << 10))
}

/// Rows per tokenization batch at most.
pub(super) const BATCH_MAX_ROWS: usize = 16_384;

/// Text bytes per tokenizing task (`DLM_PACK_CHUNK_KB`, default 256 KiB): a batch is cut
/// into chunks of about this much (a longer document is a chunk alone), each one task on the
/// pool.
pub(super) fn chunk_text_bytes() -> usize {
    static V: OnceLock<usize> = OnceLock::new();
    *V.get_or_init(|| env_usize("DLM_PACK_CHUNK_KB").map_or(256 << 10, |kb| kb << 10))
}

/// Batches between the reader and the packer (read, tokenizing or tokenized, in stream
/// order): two per pool thread, 6 to 64 (`DLM_PACK_AHEAD`) — 128 MiB of text in flight on
/// 16 threads, 256 MiB at most. One per thread left the packer waiting on the batch at the
/// head 2.1–2.7 s of a 5.4–6.5 s run on 16 cores (4 GB code corpus), 0.1 s with two.
pub(super) fn batches_ahead() -> usize {
    env_usize("DLM_PACK_AHEAD").unwrap_or((2 * rayon::current_num_threads()).clamp(6, 64))
}
