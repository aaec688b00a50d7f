//! Why one file: the GPU engine's environment switches (docs/environment.md, docs/gpu.md) are
//! read here and nowhere else in the engine, so the A/B knobs the resume fingerprint records
//! (`crate::distill::fingerprint`) are one list to read.

use std::path::PathBuf;

/// `DLM_PAD_MULTIPLE`: a batch's prompt length is rounded up to a multiple of it, when set to
/// a positive number.
pub fn pad_multiple() -> Option<usize> {
    std::env::var("DLM_PAD_MULTIPLE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&m: &usize| m > 0)
}

/// `DLM_ATTN`: the attention variant forced (empty: by grid size).
pub fn attn() -> String {
    std::env::var("DLM_ATTN").unwrap_or_default()
}

/// `DLM_FOLD_NORM=1`: RMSNorm weights folded into the GEMMs they feed (experimental).
pub fn fold_norm() -> bool {
    std::env::var("DLM_FOLD_NORM").is_ok_and(|v| v == "1")
}

/// `DLM_TAIL_ROWS=0`: the last layer runs on every row (default: the block's rows only in
/// sampler steps).
pub fn tail_rows() -> bool {
    std::env::var("DLM_TAIL_ROWS").map_or(true, |v| v != "0")
}

/// `DLM_GEMM_TUNE=1`: cuBLASLt plans tuned by shape.
pub fn gemm_tune() -> bool {
    std::env::var("DLM_GEMM_TUNE").is_ok_and(|v| v == "1")
}

/// `DLM_GEMM_TUNE_LOG` set: each tuned shape's timings printed on stderr.
pub fn gemm_tune_log() -> bool {
    std::env::var("DLM_GEMM_TUNE_LOG").is_ok()
}

/// `DLM_KERNEL_CACHE`: where compiled kernels go, overriding the cache directory.
pub fn kernel_cache() -> Option<PathBuf> {
    std::env::var_os("DLM_KERNEL_CACHE").map(PathBuf::from)
}

/// `DLM_DISTILL_PROFILE` (not `0`): one stderr line per continuous-batching window.
pub fn distill_profile() -> bool {
    std::env::var_os("DLM_DISTILL_PROFILE").is_some_and(|v| v != "0")
}
