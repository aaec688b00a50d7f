//! The pipeline's queue and batch sizes, in one place, each overridable from the environment
//! so a many-core box can be tuned by measurement (`DLM_PACK_BATCH_KB`, `DLM_PACK_TOKENIZERS`,
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

/// Batches tokenized at once, one per tokenizing thread (each batch split over the rayon
/// pool): while one batch waits for its longest document (a code file can be 1 MB), the
/// others keep every core busy, and the main thread packs finished batches meanwhile. One per
/// two pool threads, at least 3 (`DLM_PACK_TOKENIZERS`).
pub(super) fn tokenize_threads() -> usize {
    env_usize("DLM_PACK_TOKENIZERS").unwrap_or((rayon::current_num_threads() / 2).clamp(3, 32))
}

/// Batches between the reader and the packer (read, tokenizing or tokenized, in stream order):
/// twice the tokenizing threads (`DLM_PACK_AHEAD`).
pub(super) fn batches_ahead(tokenizers: usize) -> usize {
    env_usize("DLM_PACK_AHEAD").unwrap_or(2 * tokenizers)
}
